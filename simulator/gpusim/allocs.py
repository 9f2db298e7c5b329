# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`allocs/<pid>-<gpu>` records: who holds how much memory on which GPU, and whether it still counts.

A process in another PID namespace than the host's (a container) records its PID there and that namespace
(`allocs/<pid>@<pidns>-<gpu>`); readers find its PID in their own /proc (on the host: its host PID), as NVML
reports host PIDs.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

from gpusim import procfs
from gpusim.devices import open_devices
from gpusim.host import HOST_PID_NAMESPACE, read_host
from gpusim.statedir import StateDir, StateError, atomic_write, content_lines

FLAG_FOREIGN = "foreign"
FLAG_NOT_AVAILABLE = "na"
FLAG_STICKY = "sticky"
FLAG_MPS = "mps"
KNOWN_FLAGS = (FLAG_FOREIGN, FLAG_NOT_AVAILABLE, FLAG_STICKY, FLAG_MPS)
GONE_SUFFIX = ".gone"
_RECORD_NAME = re.compile(r"^[0-9]+(@[0-9]+)?-[0-9]+$")


@dataclass(frozen=True)
class Alloc:
    pid: int  # the host's PID; with pid_namespace, the holder's PID in that namespace
    starttime: int
    gpu_index: int
    used_mib: int
    type: str = "C"
    flags: Tuple[str, ...] = ()
    pid_namespace: int = 0  # 0: the host's PID namespace; else the holder's own (the inode of its /proc/PID/ns/pid)

    @property
    def file_name(self) -> str:
        if self.pid_namespace:
            return f"{self.pid}@{self.pid_namespace}-{self.gpu_index}"
        return f"{self.pid}-{self.gpu_index}"

    @property
    def identity(self) -> Tuple[int, int, int]:
        """(PID namespace, PID there, start time): what a namespaced record knows of its process."""
        return (self.pid_namespace, self.pid, self.starttime)

    def line(self) -> str:
        flags = ",".join(self.flags) if self.flags else "-"
        namespace = f" {self.pid_namespace}" if self.pid_namespace else ""
        return f"{self.pid} {self.starttime} {self.gpu_index} {self.used_mib} {self.type} {flags}{namespace}\n"

    def counts(self, holder: Optional[procfs.ProcStat], state: Optional[StateDir] = None, lag_ms: int = 0) -> bool:
        """The rule of docs/simulator.md, given the record's process as /proc shows it (None: gone, or its PID
        reused): foreign always; else that process, not dead (Z ok if sticky); else, with a teardown lag and for a
        record of the host's PID namespace, for lag_ms after a reader first saw the process gone."""
        if FLAG_FOREIGN in self.flags:
            return True
        if holder is not None and holder.state != "X" and (holder.state != "Z" or FLAG_STICKY in self.flags):
            return True
        return not self.pid_namespace and state is not None and lag_ms > 0 and _lingers(state, self, lag_ms)


def holders(records: List[Alloc]) -> Dict[Alloc, Optional[procfs.ProcStat]]:
    """Each record's process as this reader's /proc shows it, None when gone or its PID was reused (foreign records:
    none). A record made in another PID namespace is found by its namespace, PID there and start time: one scan of
    /proc for all of them."""
    found = procfs.find_namespaced({alloc.identity for alloc in records
                                    if alloc.pid_namespace and FLAG_FOREIGN not in alloc.flags})
    result: Dict[Alloc, Optional[procfs.ProcStat]] = {}
    for alloc in records:
        if alloc.pid_namespace:
            result[alloc] = found.get(alloc.identity)
        else:
            stat = None if FLAG_FOREIGN in alloc.flags else procfs.read_stat(alloc.pid)
            result[alloc] = stat if stat is not None and stat.starttime == alloc.starttime else None
    return result


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _lingers(state: StateDir, alloc: Alloc, lag_ms: int) -> bool:
    """The teardown lag, as the fake library applies it: the first reader that sees the process gone writes the
    moment to allocs/<name>.gone (O_EXCL); the allocation stays live for lag_ms from then."""
    path = state.allocs / (alloc.file_name + GONE_SUFFIX)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        text = path.read_text().strip()
        return not text or _now_ms() - int(text) < lag_ms
    with os.fdopen(fd, "w") as handle:
        handle.write(f"{_now_ms()}\n")
    return True


def teardown_lag_ms(state: StateDir) -> int:
    """The host's driver teardown lag (host key teardown_lag_ms; 0: none)."""
    return int(read_host(state).get("teardown_lag_ms", "0") or 0)


def parse_alloc(line: str) -> Alloc:
    fields = line.split()
    if len(fields) not in (6, 7) or fields[4] not in ("C", "G"):
        raise StateError(f"allocs: expected 'pid starttime gpu_index used_mib C|G flags [pidns]': {line!r}")
    flags = () if fields[5] == "-" else tuple(fields[5].split(","))
    namespace = int(fields[6]) if len(fields) == 7 else 0
    return Alloc(int(fields[0]), int(fields[1]), int(fields[2]), int(fields[3]), fields[4], flags, namespace)


def write_alloc(state: StateDir, alloc: Alloc) -> None:
    unknown = set(alloc.flags) - set(KNOWN_FLAGS)
    if unknown:
        raise StateError(f"unknown allocation flags: {sorted(unknown)}")
    atomic_write(state.allocs / alloc.file_name, alloc.line())


def read_allocs(state: StateDir) -> List[Alloc]:
    """Every allocation record (live or dead), in GPU then PID order; half-written files are skipped."""
    records: List[Alloc] = []
    for path in state.allocs.iterdir():
        if not _RECORD_NAME.match(path.name):  # half-written (.tmp.) or a teardown mark (.gone)
            continue
        try:
            lines = content_lines(path)
        except FileNotFoundError:  # removed by a concurrent gc
            continue
        records.extend(parse_alloc(line) for line in lines)
    return sorted(records, key=lambda alloc: (alloc.gpu_index, alloc.pid))


def live_allocs(state: StateDir) -> List[Alloc]:
    """The allocations that count, in GPU then PID order, as this process sees them: one recorded in another PID
    namespace carries the PID its process has in this process's /proc (on the host: its host PID)."""
    lag = teardown_lag_ms(state)
    records = read_allocs(state)
    found = holders(records)
    live: List[Alloc] = []
    for alloc in records:
        holder = found[alloc]
        if alloc.counts(holder, state, lag):
            live.append(replace(alloc, pid=holder.pid, pid_namespace=0) if alloc.pid_namespace and holder else alloc)
    return sorted(live, key=lambda alloc: (alloc.gpu_index, alloc.pid))


def register_own_alloc(state: StateDir, gpu_index: int, used_mib: int, flags: Tuple[str, ...] = ()) -> Alloc:
    """Record memory held by the calling process: its PID and start time, and, when it runs in another PID namespace
    than the host's (a container), that namespace, its PID being the one it has there."""
    pid, start, namespace = procfs.own_identity()
    host_namespace = int(read_host(state).get(HOST_PID_NAMESPACE) or 0)  # 0: a host made before the key existed
    outside = host_namespace not in (0, namespace)
    alloc = Alloc(pid, start, gpu_index, used_mib, "C", flags, namespace if outside else 0)
    write_alloc(state, alloc)
    open_devices(state, gpu_index)  # a CUDA process holds its GPU's device files open (see devices.py)
    return alloc


def gc_allocs(state: StateDir) -> List[Alloc]:
    """Remove the records that no longer count; returns what was removed."""
    lag = teardown_lag_ms(state)
    records = read_allocs(state)
    found = holders(records)
    removed = [alloc for alloc in records if not alloc.counts(found[alloc], state, lag)]
    for alloc in removed:
        (state.allocs / alloc.file_name).unlink(missing_ok=True)
        (state.allocs / (alloc.file_name + GONE_SUFFIX)).unlink(missing_ok=True)
    return removed
