# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`python3 -m gpusim.reaper`: the subreaper above a simulated tree (see spawn.spawn_detached).

It runs the command found in GPUOPS_SIM_REAPER_ARGV, adopts the tree's orphans, reaps every one of
them, and exits when none is left.
"""

from __future__ import annotations

import json
import os
import subprocess

from gpusim import procfs
from gpusim.spawn import REAPER_ARGV_ENV


def main() -> int:
    procfs.become_subreaper()
    argv = json.loads(os.environ.pop(REAPER_ARGV_ENV))
    subprocess.Popen(argv)  # pylint: disable=consider-using-with  # reaped below by os.wait()
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return 0


if __name__ == "__main__":
    raise SystemExit(main())
