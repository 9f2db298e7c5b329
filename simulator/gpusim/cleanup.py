# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`gpusim cleanup` and `gc`: end every process gpusim recorded (and nothing else), drop dead records."""

from __future__ import annotations

import shutil
import signal
from typing import Dict, List

from gpusim.allocs import gc_allocs
from gpusim.procs import ROLE_REAPER, ProcRecord, forget, read_records
from gpusim.spawn import kill_records, wait_gone
from gpusim.statedir import StateDir


def _describe(records: List[ProcRecord]) -> List[Dict[str, object]]:
    return [{"pid": r.pid, "role": r.role} for r in records]


def cleanup(state: StateDir, timeout: float = 10.0, remove: bool = False) -> Dict[str, object]:
    """SIGKILL each recorded process whose start time still matches, wait for it, then tidy up.

    Reapers go last: each exits by itself once it has reaped its whole tree (zombies included),
    so waiting for them means the memory of every simulated process has really come back.
    """
    records = read_records(state)
    reapers = [r for r in records if r.role == ROLE_REAPER]
    others = [r for r in records if r.role != ROLE_REAPER]
    killed = kill_records(others, signal.SIGKILL)
    left = wait_gone(others, timeout)
    left_reapers = wait_gone(reapers, timeout=2.0)
    killed += kill_records(left_reapers, signal.SIGKILL)
    left += wait_gone(left_reapers, timeout)
    for record in records:
        if record not in left:
            forget(state, record)
    removed = gc_allocs(state) if state.allocs.is_dir() else []
    if remove and not left:
        shutil.rmtree(state.root)
    return {"killed": _describe(killed), "left": _describe(left), "removed_allocs": len(removed),
            "removed_state": remove and not left}
