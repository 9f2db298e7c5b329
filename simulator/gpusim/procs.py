# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`procs/<pid>` records: every process the simulator started (pid, start time, role)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List

from gpusim import procfs
from gpusim.statedir import StateDir, StateError, atomic_write, content_lines

ROLE_REAPER = "reaper"
ROLE_API_SERVER = "api_server"
ROLE_ENGINE_CORE = "engine_core"
ROLE_WORKER = "worker"
ROLE_STUCK_KEEPER = "stuck_keeper"
ROLE_STUCK_HOLDER = "stuck_holder"


@dataclass(frozen=True)
class ProcRecord:
    pid: int
    starttime: int
    role: str

    def is_same_process(self) -> bool:
        return procfs.is_same_process(self.pid, self.starttime)

    def is_running(self) -> bool:
        return procfs.is_running(self.pid, self.starttime)


def record_process(state: StateDir, pid: int, role: str) -> ProcRecord:
    """Record <pid> with its current start time; fails if it is already gone."""
    start = procfs.starttime(pid)
    if start is None:
        raise StateError(f"cannot record PID {pid} ({role}): it is not running")
    record = ProcRecord(pid, start, role)
    state.procs.mkdir(parents=True, exist_ok=True)
    atomic_write(state.procs / str(pid), f"{pid} {start} {role}\n")
    return record


def record_self(state: StateDir, role: str) -> ProcRecord:
    return record_process(state, os.getpid(), role)


def read_records(state: StateDir) -> List[ProcRecord]:
    records: List[ProcRecord] = []
    if not state.procs.is_dir():
        return records
    for path in state.procs.iterdir():
        if ".tmp." in path.name:
            continue
        try:
            lines = content_lines(path)
        except FileNotFoundError:
            continue
        for line in lines:
            pid, start, role = line.split()
            records.append(ProcRecord(int(pid), int(start), role))
    return sorted(records, key=lambda record: record.pid)


def forget(state: StateDir, record: ProcRecord) -> None:
    (state.procs / str(record.pid)).unlink(missing_ok=True)
