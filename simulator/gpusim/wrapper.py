# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`python3 -m gpusim.wrapper`: a process above a server that mentions it in its arguments, and a sibling.

Real hosts start servers from scripts, tmux panes and supervisors whose command lines name the server
(`/bin/bash /opt/run-vllm.sh vllm serve ...`). This wrapper takes such a title, starts the server's
command as its child and, when asked, a sibling beside it (a log shipper, a metrics exporter), then stays
alive after the server is gone, as a tmux pane or a script that goes on does. Neither holds a GPU: a
reclaim that ends either of them is wrong. The plan comes in GPUOPS_SIM_WRAPPER (JSON: `title`, `argv`,
`sibling`), so no command line of ours shows it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import setproctitle

from gpusim.procs import record_self
from gpusim.spawn import python3
from gpusim.statedir import resolve_state

WRAPPER_ENV = "GPUOPS_SIM_WRAPPER"
ROLE_WRAPPER = "wrapper"
ROLE_SIBLING = "sibling"


def _retitle(title: str) -> None:
    setproctitle.setproctitle(title)
    program = title.split()[0].rsplit("/", 1)[-1]
    with open("/proc/self/comm", "w", encoding="ascii", errors="replace") as handle:
        handle.write(program[:15])


def sibling_main(title: str) -> int:
    _retitle(title)
    record_self(resolve_state(None), ROLE_SIBLING)
    while True:
        signal.pause()


def main() -> int:
    plan = json.loads(os.environ.pop(WRAPPER_ENV))
    if plan.get("role") == ROLE_SIBLING:
        return sibling_main(plan["title"])
    _retitle(plan["title"])
    record_self(resolve_state(None), ROLE_WRAPPER)
    if plan.get("sibling"):
        env = dict(os.environ, **{WRAPPER_ENV: json.dumps({"role": ROLE_SIBLING, "title": plan["sibling"]})})
        subprocess.Popen([python3(), "-m", "gpusim.wrapper"], env=env)  # pylint: disable=consider-using-with
    subprocess.Popen(plan["argv"])  # pylint: disable=consider-using-with  # reaped below
    while True:  # reap the children as they end, then stay
        try:
            os.wait()
        except ChildProcessError:
            signal.pause()


if __name__ == "__main__":
    sys.exit(main())
