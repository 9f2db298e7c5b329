# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`gpusim stuck`: a GPU holder that survives every signal (see keeper.py)."""

from __future__ import annotations

import os
from typing import Dict, List

from gpusim import procfs
from gpusim.allocs import FLAG_STICKY, Alloc, live_allocs
from gpusim.gpus import gpu_by_index, read_gpus
from gpusim.procs import ROLE_STUCK_KEEPER, read_records
from gpusim.spawn import kill_records, log_tail, python3, simulator_env, spawn_detached, wait_until
from gpusim.statedir import StateDir, StateError


def spawn_stuck(state: StateDir, gpu: int, mib: int, timeout: float = 15.0) -> Dict[str, object]:
    gpu_by_index(read_gpus(state.require()), gpu)
    log_name = f"stuck-gpu{gpu}-{os.getpid()}"
    argv = [python3(), "-m", "gpusim.keeper", "--gpu", str(gpu), "--mib", str(mib)]
    reaper = spawn_detached(state, argv, simulator_env(state, {}), log_name)

    def holders() -> List[Alloc]:
        tree = procfs.descendants(reaper.pid)
        return [a for a in live_allocs(state) if a.pid in tree and FLAG_STICKY in a.flags]

    if not wait_until(lambda: bool(holders()) or not reaper.is_running(), timeout) or not holders():
        kill_records([record for record in read_records(state)
                      if record.pid in procfs.descendants(reaper.pid)] + [reaper])
        raise StateError(f"the stuck holder did not start:\n{log_tail(state, log_name)}")
    tree = procfs.descendants(reaper.pid)
    keeper = next(r.pid for r in read_records(state) if r.pid in tree and r.role == ROLE_STUCK_KEEPER)
    return {"keeper": keeper, "holder": holders()[0].pid, "gpu": gpu, "mib": mib}
