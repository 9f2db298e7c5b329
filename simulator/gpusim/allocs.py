# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`allocs/<pid>-<gpu>` records: who holds how much memory on which GPU, and whether it still counts."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import List, Optional, Tuple

from gpusim import procfs
from gpusim.devices import open_devices
from gpusim.host import read_host
from gpusim.statedir import StateDir, StateError, atomic_write, content_lines

FLAG_FOREIGN = "foreign"
FLAG_NOT_AVAILABLE = "na"
FLAG_STICKY = "sticky"
FLAG_MPS = "mps"
KNOWN_FLAGS = (FLAG_FOREIGN, FLAG_NOT_AVAILABLE, FLAG_STICKY, FLAG_MPS)
GONE_SUFFIX = ".gone"
_RECORD_NAME = re.compile(r"^[0-9]+-[0-9]+$")


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

    def process_live(self) -> bool:
        """Same process, not dead (Z ok if sticky)."""
        stat = procfs.read_stat(self.pid)
        if stat is None or stat.starttime != self.starttime or stat.state == "X":
            return False
        return stat.state != "Z" or FLAG_STICKY in self.flags

    def is_live(self, state: Optional[StateDir] = None, lag_ms: int = 0) -> bool:
        """The rule of docs/simulator.md: foreign always; else same process, not dead (Z ok if sticky);
        else, with a teardown lag, for lag_ms after a reader first saw the process gone."""
        if FLAG_FOREIGN in self.flags or self.process_live():
            return True
        return state is not None and lag_ms > 0 and _lingers(state, self, lag_ms)


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
        if not _RECORD_NAME.match(path.name):  # half-written (.tmp.) or a teardown mark (.gone)
            continue
        try:
            lines = content_lines(path)
        except FileNotFoundError:  # removed by a concurrent gc
            continue
        records.extend(parse_alloc(line) for line in lines)
    return sorted(records, key=lambda alloc: (alloc.gpu_index, alloc.pid))


def live_allocs(state: StateDir) -> List[Alloc]:
    lag = teardown_lag_ms(state)
    return [alloc for alloc in read_allocs(state) if alloc.is_live(state, lag)]


def register_own_alloc(state: StateDir, gpu_index: int, used_mib: int, flags: Tuple[str, ...] = ()) -> Alloc:
    """Record memory held by the calling process (its own pid and start time)."""
    pid = os.getpid()
    start = procfs.starttime(pid)
    assert start is not None  # our own /proc entry exists
    alloc = Alloc(pid, start, gpu_index, used_mib, "C", flags)
    write_alloc(state, alloc)
    open_devices(state, gpu_index)  # a CUDA process holds its GPU's device files open (see devices.py)
    return alloc


def gc_allocs(state: StateDir) -> List[Alloc]:
    """Remove the records that no longer count; returns what was removed."""
    lag = teardown_lag_ms(state)
    removed = [alloc for alloc in read_allocs(state) if not alloc.is_live(state, lag)]
    for alloc in removed:
        (state.allocs / alloc.file_name).unlink(missing_ok=True)
        (state.allocs / (alloc.file_name + GONE_SUFFIX)).unlink(missing_ok=True)
    return removed
