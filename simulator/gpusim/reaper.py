# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`python3 -m gpusim.reaper`: the process above a simulated tree (see spawn.spawn_detached).

It runs the command found in GPUOPS_SIM_REAPER_ARGV and reaps its children. Where orphans of the tree
go is the host's `orphans` key (docs/simulator.md, "Orphans"): `reaper` (default) makes it a child
subreaper that adopts them, reaps every one and exits when none is left, titled as the host's
`subreaper_title` when one is set (`/lib/systemd/systemd --user`, say); `init` leaves it an ordinary
parent, so orphans go where the kernel sends them without one, PID 1 (or a subreaper above gpusim).
"""

from __future__ import annotations

import json
import os
import subprocess

import setproctitle

from gpusim import procfs
from gpusim.host import read_host
from gpusim.spawn import REAPER_ARGV_ENV, REAPER_DETACH_ENV
from gpusim.statedir import resolve_state


def detach() -> None:
    """Fork: the parent tells the starter the reaper's PID through the pipe and exits; the child goes on."""
    descriptor = int(os.environ.pop(REAPER_DETACH_ENV))
    child = os.fork()
    if child:
        os.write(descriptor, f"{child}\n".encode())
        os._exit(0)
    os.close(descriptor)


def main() -> int:
    if REAPER_DETACH_ENV in os.environ:
        detach()
    host = read_host(resolve_state(None))
    if host.get("orphans", "reaper") != "init":
        procfs.become_subreaper()
        if host.get("subreaper_title"):
            setproctitle.setproctitle(host["subreaper_title"])
    argv = json.loads(os.environ.pop(REAPER_ARGV_ENV))
    subprocess.Popen(argv)  # pylint: disable=consider-using-with  # reaped below by os.wait()
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return 0


if __name__ == "__main__":
    raise SystemExit(main())
