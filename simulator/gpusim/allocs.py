# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`allocs/<pid>-<gpu>` records: who holds how much memory on which GPU, and whether it still counts."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Tuple

from gpusim import procfs
from gpusim.statedir import StateDir, StateError, atomic_write, content_lines

FLAG_FOREIGN = "foreign"
FLAG_NOT_AVAILABLE = "na"
FLAG_STICKY = "sticky"
KNOWN_FLAGS = (FLAG_FOREIGN, FLAG_NOT_AVAILABLE, FLAG_STICKY)


@dataclass(frozen=True)
class Alloc:
    pid: int
    starttime: int
    gpu_index: int
    used_mib: int
    type: str = "C"
    flags: Tuple[str, ...] = ()

    @property
    def file_name(self) -> str:
        return f"{self.pid}-{self.gpu_index}"

    def line(self) -> str:
        flags = ",".join(self.flags) if self.flags else "-"
        return f"{self.pid} {self.starttime} {self.gpu_index} {self.used_mib} {self.type} {flags}\n"

    def is_live(self) -> bool:
        """The rule of docs/simulator.md: foreign always; else same process, not dead (Z ok if sticky)."""
        if FLAG_FOREIGN in self.flags:
            return True
        stat = procfs.read_stat(self.pid)
        if stat is None or stat.starttime != self.starttime or stat.state == "X":
            return False
        return stat.state != "Z" or FLAG_STICKY in self.flags


def parse_alloc(line: str) -> Alloc:
    fields = line.split()
    if len(fields) != 6 or fields[4] not in ("C", "G"):
        raise StateError(f"allocs: expected 'pid starttime gpu_index used_mib C|G flags': {line!r}")
    flags = () if fields[5] == "-" else tuple(fields[5].split(","))
    return Alloc(int(fields[0]), int(fields[1]), int(fields[2]), int(fields[3]), fields[4], flags)


def write_alloc(state: StateDir, alloc: Alloc) -> None:
    unknown = set(alloc.flags) - set(KNOWN_FLAGS)
    if unknown:
        raise StateError(f"unknown allocation flags: {sorted(unknown)}")
    atomic_write(state.allocs / alloc.file_name, alloc.line())


def read_allocs(state: StateDir) -> List[Alloc]:
    """Every allocation record (live or dead), in GPU then PID order; half-written files are skipped."""
    records: List[Alloc] = []
    for path in state.allocs.iterdir():
        if ".tmp." in path.name:
            continue
        try:
            lines = content_lines(path)
        except FileNotFoundError:  # removed by a concurrent gc
            continue
        records.extend(parse_alloc(line) for line in lines)
    return sorted(records, key=lambda alloc: (alloc.gpu_index, alloc.pid))


def live_allocs(state: StateDir) -> List[Alloc]:
    return [alloc for alloc in read_allocs(state) if alloc.is_live()]


def register_own_alloc(state: StateDir, gpu_index: int, used_mib: int, flags: Tuple[str, ...] = ()) -> Alloc:
    """Record memory held by the calling process (its own pid and start time)."""
    pid = os.getpid()
    start = procfs.starttime(pid)
    assert start is not None  # our own /proc entry exists
    alloc = Alloc(pid, start, gpu_index, used_mib, "C", flags)
    write_alloc(state, alloc)
    return alloc


def gc_allocs(state: StateDir) -> List[Alloc]:
    """Remove the records that no longer count; returns what was removed."""
    removed = [alloc for alloc in read_allocs(state) if not alloc.is_live()]
    for alloc in removed:
        (state.allocs / alloc.file_name).unlink(missing_ok=True)
    return removed
