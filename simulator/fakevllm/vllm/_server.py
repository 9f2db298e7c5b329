# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API server process: what `vllm serve` and `python -m vllm.entrypoints.openai.api_server` run."""

from __future__ import annotations

import os

from vllm import __version__, _simhost
from vllm._args import ServerArgs
from vllm._health import serve_health
from vllm._proctree import Supervisor, log, start_child
from vllm.v1.engine.core import engine_core_args
from vllm.v1.executor.multiproc_executor import start_workers

from gpusim import procfs
from gpusim.allocs import live_allocs
from gpusim.procs import ROLE_API_SERVER, record_self


def run_server(args: ServerArgs) -> int:
    try:
        state = _simhost.state_dir()
    except _simhost.StartupError as error:
        log(f"APIServer: {error}")
        return 1
    record_self(state, ROLE_API_SERVER)
    log(f"vLLM API server version {__version__} (simulated), model {args.model},"
        f" tensor_parallel_size={args.tensor_parallel_size}")
    if _simhost.engine_core_enabled():
        core_args = engine_core_args(args.tensor_parallel_size, args.gpu_memory_utilization)
        children = [start_child("vllm.v1.engine.core", core_args)]
    else:
        children = start_workers(args.tensor_parallel_size, args.gpu_memory_utilization)
    supervisor = Supervisor("APIServer", children)

    def is_ready() -> bool:
        tree = procfs.descendants(os.getpid())
        return sum(1 for alloc in live_allocs(state) if alloc.pid in tree) >= args.tensor_parallel_size

    if args.port is not None:
        serve_health(args, args.port, is_ready)
        log(f"APIServer: listening on http://{args.host}:{args.port}")
    return supervisor.run()
