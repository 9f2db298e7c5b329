# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cheap GPU memory holders for the large shapes: `sleep` processes with allocation records.

A fake vLLM worker is a Python interpreter (seconds to start a TP=8 tree on two cores), so 512 of them
do not fit a one-minute bench. A holder here is a `sleep` process this bench starts, with an
`allocs/<pid>-<gpu>` record written through gpusim's API (gpusim.api.Host.record_alloc), as docs/simulator.md defines it: NVML
and nvidia-smi list it exactly like a worker, and psutil reads it the same way.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import List

from _benchlib import BenchError
from gpusim.api import Host, StateError


class LightHolders:
    """Holders this bench started; on exit each is killed through its own Popen (its PID cannot be reused before we reap it)."""

    def __init__(self, state: Path) -> None:
        self.host = Host(state)
        self.procs: List["subprocess.Popen[bytes]"] = []

    def __enter__(self) -> "LightHolders":
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()

    @property
    def pids(self) -> List[int]:
        """The PIDs of every holder started so far."""
        return [proc.pid for proc in self.procs]

    def add(self, gpus: int, per_gpu: int, mib: int) -> None:
        """Start ``per_gpu`` more holders on each of GPUs 0..gpus-1, each holding ``mib``."""
        for gpu in range(gpus):
            for _holder in range(per_gpu):
                proc = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)  # pylint: disable=consider-using-with
                self.procs.append(proc)
                try:
                    self.host.record_alloc(proc.pid, gpu, mib)
                except StateError as error:
                    raise BenchError(f"holder {proc.pid}: {error}") from None
