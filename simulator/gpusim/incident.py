# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`gpusim incident`: the broken cleanup of incident.md, replayed on a running tree.

`pkill -9 -f vllm.entrypoints` ended the API server only; `nvidia-smi --query-compute-apps=pid |
head -1 | xargs kill -9` ended the first GPU holder only. Seven workers kept their memory.
"""

from __future__ import annotations

import signal
from typing import Dict, List, Optional

from gpusim import procfs
from gpusim.allocs import live_allocs
from gpusim.procs import ROLE_API_SERVER, ProcRecord, read_records
from gpusim.spawn import kill_records, wait_gone
from gpusim.statedir import StateDir, StateError


def _server(records: List[ProcRecord], parent: Optional[int]) -> ProcRecord:
    servers = [r for r in records if r.role == ROLE_API_SERVER and r.is_running()]
    if parent is not None:
        servers = [r for r in servers if r.pid == parent]
    if len(servers) != 1:
        pids = ", ".join(str(r.pid) for r in servers) or "none"
        raise StateError(f"need exactly one running API server (found: {pids}); pick one with --parent")
    return servers[0]


def replay_incident(state: StateDir, parent: Optional[int] = None) -> List[Dict[str, object]]:
    records = read_records(state.require())
    server = _server(records, parent)
    tree = procfs.descendants(server.pid)
    holders = [alloc for alloc in live_allocs(state) if alloc.pid in tree]  # nvidia-smi's order
    if not holders:
        raise StateError(f"API server {server.pid} has no worker holding a GPU")
    first = next((r for r in records if r.pid == holders[0].pid and r.is_running()), None)
    if first is None:
        raise StateError(f"the first holder, PID {holders[0].pid}, is not a process gpusim recorded")
    steps = [(server, "pkill -9 -f vllm.entrypoints"),
             (first, "nvidia-smi --query-compute-apps=pid | head -1 | xargs kill -9")]
    killed: List[Dict[str, object]] = []
    for record, command in steps:
        title = procfs.title(record.pid)
        if kill_records([record], signal.SIGKILL):
            killed.append({"pid": record.pid, "role": record.role, "title": title, "signal": "SIGKILL",
                           "as_by": command})
    wait_gone([record for record, _command in steps], timeout=5.0)
    return killed
