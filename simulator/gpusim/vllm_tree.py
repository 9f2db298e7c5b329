# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`gpusim vllm`: start a fake vLLM server whose process tree is shaped like the real one."""

from __future__ import annotations

import os
import time
import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from gpusim import procfs
from gpusim.allocs import Alloc, live_allocs
from gpusim.gpus import gpu_by_index, read_gpus
from gpusim.procs import ROLE_API_SERVER, ROLE_ENGINE_CORE, ProcRecord, read_records
from gpusim.spawn import FAKEVLLM_DIR, kill_records, log_tail, python3, simulator_env, spawn_detached, wait_until
from gpusim.statedir import StateDir, StateError
from gpusim.wrapper import ROLE_SIBLING, ROLE_WRAPPER, WRAPPER_ENV

ENTRYPOINTS = ("api_server", "serve")
DEFAULT_MODEL = "zai-org/GLM-5-GGUF"
DEFAULT_WORKER_MIB = 93029


@dataclass(frozen=True)
class TreeSpec:
    gpus: List[int]
    worker_mib: int
    engine_core: bool
    entrypoint: str
    model: str
    ignore_sigterm: bool
    port: Optional[int]
    wrapper: Optional[str] = None  # a title: the server runs below a wrapper that names it (see wrapper.py)
    sibling: Optional[str] = None  # a title: a process beside the server, below the wrapper
    env: Dict[str, str] = field(default_factory=dict)  # more environment for the tree (fake vLLM knobs)
    serve_args: Tuple[str, ...] = ()  # more of the server's flags (one server across hosts: --nnodes ... --headless)


def parse_gpu_list(text: str) -> List[int]:
    """`0-7`, `0,2,4` or `0-3,6` -> indices in the order given (rank i uses the i-th)."""
    indices: List[int] = []
    try:
        for part in text.split(","):
            first, sep, last = part.strip().partition("-")
            indices.extend(range(int(first), int(last) + 1) if sep else [int(first)])
    except ValueError as error:
        raise StateError(f"--gpus: expected a list such as 0-7 or 0,1,2,3, not {text!r}") from error
    if not indices or len(set(indices)) != len(indices):
        raise StateError(f"--gpus: empty or repeated GPU in {text!r}")
    return indices


def server_argv(spec: TreeSpec) -> List[str]:
    """The API server's command line, exactly as an operator would type it."""
    tp = ["--tensor-parallel-size", str(len(spec.gpus))]
    port = ["--port", str(spec.port)] if spec.port is not None else []
    more = list(spec.serve_args)
    if spec.entrypoint == "serve":
        return [python3(), str(FAKEVLLM_DIR / "bin" / "vllm"), "serve", spec.model] + tp + port + more
    return [python3(), "-m", "vllm.entrypoints.openai.api_server", "--model", spec.model] + tp + port + more


def tree_env(state: StateDir, spec: TreeSpec) -> Dict[str, str]:
    return simulator_env(state, dict(spec.env, **{
        "CUDA_VISIBLE_DEVICES": ",".join(str(index) for index in spec.gpus),
        "GPUOPS_SIM_WORKER_MIB": str(spec.worker_mib),
        "GPUOPS_SIM_ENGINE_CORE": "1" if spec.engine_core else "0",
        "GPUOPS_SIM_IGNORE_SIGTERM": "1" if spec.ignore_sigterm else "0",
    }))


def launch(spec: TreeSpec, env: Dict[str, str]) -> Tuple[List[str], Dict[str, str]]:
    """The command the reaper starts: the server, or a wrapper that starts it (and a sibling)."""
    argv = server_argv(spec)
    if spec.wrapper is None:
        if spec.sibling is not None:
            raise StateError("--sibling needs --wrapper (the sibling's parent)")
        return argv, env
    plan = {"title": spec.wrapper, "argv": argv, "sibling": spec.sibling}
    return [python3(), "-m", "gpusim.wrapper"], dict(env, **{WRAPPER_ENV: json.dumps(plan)})


def spawn_vllm(state: StateDir, spec: TreeSpec, timeout: float = 30.0) -> Dict[str, object]:
    """Start the tree and return once every worker holds its GPU; on failure end what was started."""
    gpus = read_gpus(state.require())
    for index in spec.gpus:
        gpu_by_index(gpus, index)
    if spec.entrypoint not in ENTRYPOINTS:
        raise StateError(f"--entrypoint must be one of {', '.join(ENTRYPOINTS)}")
    log_name = f"vllm-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    argv, env = launch(spec, tree_env(state, spec))
    reaper = spawn_detached(state, argv, env, log_name)
    seen: Set[Tuple[int, int]] = set()

    def workers() -> List[Alloc]:
        tree = procfs.descendants(reaper.pid)
        for pid in tree:
            start = procfs.starttime(pid)
            if start is not None:
                seen.add((pid, start))
        return [alloc for alloc in live_allocs(state) if alloc.pid in tree]

    wanted_roles = {role for role, title in ((ROLE_WRAPPER, spec.wrapper), (ROLE_SIBLING, spec.sibling)) if title}

    def companions_ready() -> bool:
        tree = procfs.descendants(reaper.pid)
        return wanted_roles <= {record.role for record in read_records(state) if record.pid in tree}

    def settled() -> bool:
        return (len(workers()) >= len(spec.gpus) and companions_ready()) or not reaper.is_running()

    wait_until(settled, timeout, interval=0.05)
    holders = workers()
    if len(holders) < len(spec.gpus) or not companions_ready():
        started = [ProcRecord(pid, start, "spawned") for pid, start in seen] + [reaper]
        kill_records(started)
        why = "the server exited" if not reaper.is_running() else f"timed out after {timeout:g} s"
        raise StateError(f"fake vLLM did not start ({why}); log {state.logs / log_name}.log:\n"
                         + log_tail(state, log_name))
    return _describe(state, reaper, spec, holders, log_name)


def _describe(state: StateDir, reaper: ProcRecord, spec: TreeSpec, holders: List[Alloc],
              log_name: str) -> Dict[str, object]:
    tree = procfs.descendants(reaper.pid)
    roles = {record.pid: record.role for record in read_records(state) if record.pid in tree}
    by_role = {role: pid for pid, role in roles.items()}
    rank_of = {index: rank for rank, index in enumerate(spec.gpus)}
    ordered = sorted(holders, key=lambda alloc: rank_of.get(alloc.gpu_index, len(spec.gpus)))
    return {
        "parent": by_role.get(ROLE_API_SERVER),
        "engine_core": by_role.get(ROLE_ENGINE_CORE),
        "workers": [alloc.pid for alloc in ordered],
        "gpus": [alloc.gpu_index for alloc in ordered],
        "reaper": reaper.pid,
        "wrapper": by_role.get(ROLE_WRAPPER),
        "sibling": by_role.get(ROLE_SIBLING),
        "log": str(state.logs / f"{log_name}.log"),
    }
