# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`python3 -m gpusim.keeper --gpu N --mib M`: the parent of a holder that cannot be ended.

The keeper forks a holder that records a `sticky` allocation (a driver teardown stuck), and never
reaps it: whatever signal ends the holder, it stays a zombie that still holds the memory. Only
ending the keeper (gpusim cleanup) lets the reaper above collect the zombie and free the memory.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback

import setproctitle

from gpusim.allocs import FLAG_STICKY, register_own_alloc
from gpusim.procs import ROLE_STUCK_HOLDER, ROLE_STUCK_KEEPER, record_self
from gpusim.statedir import resolve_state

HOLDER_TITLE = "gpusim-stuck-holder"


def _hold(gpu: int, mib: int) -> None:
    setproctitle.setproctitle(f"{HOLDER_TITLE} --gpu {gpu}")
    state = resolve_state(None)
    record_self(state, ROLE_STUCK_HOLDER)
    register_own_alloc(state, gpu, mib, (FLAG_STICKY,))
    print(f"stuck holder {os.getpid()} holds {mib} MiB on GPU {gpu} (sticky)", flush=True)
    while True:
        signal.pause()


def main() -> int:
    parser = argparse.ArgumentParser(prog="gpusim.keeper")
    parser.add_argument("--gpu", type=int, required=True)
    parser.add_argument("--mib", type=int, required=True)
    args = parser.parse_args()
    record_self(resolve_state(None), ROLE_STUCK_KEEPER)
    if os.fork() == 0:
        try:
            _hold(args.gpu, args.mib)
        except BaseException:  # pylint: disable=broad-exception-caught  # a forked child must not return
            traceback.print_exc()
        finally:
            os._exit(1)
    # Never wait(): a dead holder stays a zombie, like a process stuck in the driver's teardown.
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
