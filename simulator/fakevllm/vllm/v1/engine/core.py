# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`VLLM::EngineCore`: between the API server and the workers in vLLM's v1 process tree."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

import setproctitle

from vllm import _simhost
from vllm._proctree import Supervisor, log
from vllm.v1.executor.multiproc_executor import start_workers

from gpusim.procs import ROLE_ENGINE_CORE, record_self


def engine_core_args(tensor_parallel_size: int, gpu_memory_utilization: float) -> List[str]:
    return ["--tensor-parallel-size", str(tensor_parallel_size),
            "--gpu-memory-utilization", str(gpu_memory_utilization)]


def engine_core_main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="core")
    parser.add_argument("--tensor-parallel-size", type=int, required=True)
    parser.add_argument("--gpu-memory-utilization", type=float, required=True)
    args = parser.parse_args(argv)
    setproctitle.setproctitle("VLLM::EngineCore")
    try:
        record_self(_simhost.state_dir(), ROLE_ENGINE_CORE)
    except _simhost.StartupError as error:
        log(f"EngineCore: {error}")
        return 1
    workers = start_workers(args.tensor_parallel_size, args.gpu_memory_utilization)
    return Supervisor("EngineCore", workers).run()


if __name__ == "__main__":
    sys.exit(engine_core_main())
