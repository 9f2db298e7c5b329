# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TP workers: `VLLM::Worker_TP<rank>`, each holding simulated memory on its GPU until it dies."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from typing import List, Optional

import setproctitle

from vllm import _simhost
from vllm._proctree import log, start_child

from gpusim.allocs import register_own_alloc
from gpusim.procs import ROLE_WORKER, record_self

WORKER_MODULE = "vllm.v1.executor.multiproc_executor"


def start_workers(tensor_parallel_size: int, gpu_memory_utilization: float) -> List["subprocess.Popen[bytes]"]:
    return [
        start_child(WORKER_MODULE, ["--rank", str(rank), "--gpu-memory-utilization", str(gpu_memory_utilization)])
        for rank in range(tensor_parallel_size)
    ]


def worker_main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="multiproc_executor")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--gpu-memory-utilization", type=float, required=True)
    args = parser.parse_args(argv)
    title = f"VLLM::Worker_TP{args.rank}"
    setproctitle.setproctitle(title)  # also sets /proc/PID/comm to its first 15 characters
    if _simhost.ignore_sigterm():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        state = _simhost.state_dir()
        record_self(state, ROLE_WORKER)
        gpu = _simhost.visible_gpu(state, args.rank)
        wanted = _simhost.worker_mib(gpu, args.gpu_memory_utilization)
        _simhost.check_free_memory(state, gpu, args.rank, wanted)
    except _simhost.StartupError as error:
        log(f"{title}: {error}")
        return 1
    register_own_alloc(state, gpu.index, wanted)
    log(f"{title} (pid {os.getpid()}) holds {wanted} MiB on GPU {gpu.index} ({gpu.uuid})")
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(worker_main())
