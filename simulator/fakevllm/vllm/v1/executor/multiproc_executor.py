# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TP workers: `VLLM::Worker_TP<rank>`, each holding simulated memory on its GPU until it dies."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from typing import List, Optional

import setproctitle

from vllm import _simhost
from vllm._proctree import log, start_child
from vllm._spawn import start_spawned

from gpusim.allocs import register_own_alloc
from gpusim.procs import ROLE_WORKER, record_self

WORKER_MODULE = "vllm.v1.executor.multiproc_executor"


def start_workers(tensor_parallel_size: int, gpu_memory_utilization: float) -> List["subprocess.Popen[bytes]"]:
    if _simhost.worker_spawn_s() > 0:  # vLLM's own way: multiprocessing spawn, titled only after a while
        return [start_spawned(spawned_worker, (rank, gpu_memory_utilization), f"VllmWorker-{rank}")
                for rank in range(tensor_parallel_size)]
    return [
        start_child(WORKER_MODULE, ["--rank", str(rank), "--gpu-memory-utilization", str(gpu_memory_utilization)])
        for rank in range(tensor_parallel_size)
    ]


def spawned_worker(rank: int, gpu_memory_utilization: float) -> None:
    """A worker started by spawn_main: recorded at once, untitled (and holding GPUOPS_SIM_WORKER_SPAWN_MIB, a CUDA
    context) for GPUOPS_SIM_WORKER_SPAWN_S seconds, then the same as any worker."""
    if _simhost.ignore_sigterm():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    early = 0
    try:
        state = _simhost.state_dir()
        record_self(state, ROLE_WORKER)
        early = _simhost.worker_spawn_mib()
        if early:
            register_own_alloc(state, _simhost.visible_gpu(state, rank).index, early)
    except _simhost.StartupError as error:
        log(f"worker rank {rank}: {error}")
        sys.exit(1)
    time.sleep(_simhost.worker_spawn_s())
    sys.exit(worker_main(["--rank", str(rank), "--gpu-memory-utilization", str(gpu_memory_utilization)], early))


def worker_main(argv: Optional[List[str]] = None, held_mib: int = 0) -> int:
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
        _simhost.check_free_memory(state, gpu, args.rank, wanted - held_mib)  # what it holds already counts
    except _simhost.StartupError as error:
        log(f"{title}: {error}")
        return 1
    register_own_alloc(state, gpu.index, wanted)
    log(f"{title} (pid {os.getpid()}) holds {wanted} MiB on GPU {gpu.index} ({gpu.uuid})")
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(worker_main())
