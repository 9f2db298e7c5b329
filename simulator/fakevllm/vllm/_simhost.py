# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fake vLLM's link to the simulated host: its GPUOPS_SIM_* knobs and its GPUs.

Knobs (environment, so `vllm serve ...` keeps vLLM's own command line):
  GPUOPS_SIM_STATE             the simulated host's state directory (required, like a GPU)
  GPUOPS_SIM_WORKER_MIB        MiB each worker holds (default: --gpu-memory-utilization x total)
  GPUOPS_SIM_ENGINE_CORE       1: v1 tree, API server -> VLLM::EngineCore -> workers
  GPUOPS_SIM_IGNORE_SIGTERM    1: workers ignore SIGTERM (only SIGKILL ends them)
  GPUOPS_SIM_SHUTDOWN_GRACE_S  seconds between SIGTERM and SIGKILL of the tree (default 5, as vLLM)
  GPUOPS_SIM_WORKER_SPAWN_S    seconds each worker runs as `python3 -c "from multiprocessing.spawn import
                               spawn_main; ..."` before it sets its title and takes its memory (default 0:
                               workers start as `python -m` children and title themselves at once)
  GPUOPS_SIM_WORKER_SPAWN_MIB  MiB a worker holds during that window (a CUDA context; default 0)
  CUDA_VISIBLE_DEVICES         which GPUs the ranks use, as with real CUDA (indices or UUIDs)
  GPUOPS_SIM_CDI_GPU_<N>=<N>   in a container: the host's GPU N is one of the container's (set by a CDI device's edits);
                               with any of them set, the container sees only those GPUs, numbered from 0 in the host's
                               order, as a container of CDI devices does
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Dict

_SIMULATOR_DIR = Path(__file__).resolve().parent.parent.parent
if str(_SIMULATOR_DIR) not in sys.path:
    sys.path.append(str(_SIMULATOR_DIR))

# pylint: disable=wrong-import-position  # gpusim is found through the path added above
from gpusim.allocs import live_allocs  # noqa: E402
from gpusim.gpus import Gpu, read_gpus  # noqa: E402
from gpusim.host import read_host  # noqa: E402
from gpusim.statedir import STATE_ENV, StateDir  # noqa: E402

FAKEVLLM_DIR = _SIMULATOR_DIR / "fakevllm"
WORKER_MIB_ENV = "GPUOPS_SIM_WORKER_MIB"
ENGINE_CORE_ENV = "GPUOPS_SIM_ENGINE_CORE"
IGNORE_SIGTERM_ENV = "GPUOPS_SIM_IGNORE_SIGTERM"
GRACE_ENV = "GPUOPS_SIM_SHUTDOWN_GRACE_S"
SPAWN_S_ENV = "GPUOPS_SIM_WORKER_SPAWN_S"
SPAWN_MIB_ENV = "GPUOPS_SIM_WORKER_SPAWN_MIB"
DEFAULT_GRACE_S = 5.0
CDI_GPU_ENV = re.compile(r"^GPUOPS_SIM_CDI_GPU_[0-9]+$")


class StartupError(Exception):
    """Why a process of the fake vLLM cannot start, worded as vLLM/PyTorch would."""


def _flag(name: str) -> bool:
    return os.environ.get(name, "0").strip().lower() in ("1", "true", "yes", "on")


def engine_core_enabled() -> bool:
    return _flag(ENGINE_CORE_ENV)


def ignore_sigterm() -> bool:
    return _flag(IGNORE_SIGTERM_ENV)


def shutdown_grace_s() -> float:
    return float(os.environ.get(GRACE_ENV, DEFAULT_GRACE_S))


def worker_spawn_s() -> float:
    return float(os.environ.get(SPAWN_S_ENV) or 0)


def worker_spawn_mib() -> int:
    return int(os.environ.get(SPAWN_MIB_ENV) or 0)


def state_dir() -> StateDir:
    """The host's state directory; without one there is no GPU, as on a machine without a driver."""
    value = os.environ.get(STATE_ENV)
    state = StateDir(Path(value)) if value else None
    if state is None or not state.exists():
        raise StartupError(f"RuntimeError: Failed to infer device type (no simulated host: set {STATE_ENV})")
    return state


def child_env() -> Dict[str, str]:
    """The environment for this tree's children: the fake vllm package stays importable."""
    env = dict(os.environ)
    paths = [str(FAKEVLLM_DIR), str(_SIMULATOR_DIR)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def visible_gpu(state: StateDir, rank: int) -> Gpu:
    """The GPU that CUDA device <rank> is, through CUDA_VISIBLE_DEVICES like the real runtime."""
    if read_host(state).get("driver_loaded") == "0":
        raise StartupError("RuntimeError: Found no NVIDIA driver on your system.")
    gpus = read_gpus(state)
    given = sorted(int(value) for name, value in os.environ.items() if CDI_GPU_ENV.match(name) and value.strip().isdigit())
    if given:
        # a container's GPUs: only these, numbered from 0
        gpus = [gpu for gpu in gpus if gpu.index in given]
    numbers = {id(gpu): str(number) if given else str(gpu.index) for number, gpu in enumerate(gpus)}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [entry.strip() for entry in visible.split(",")] if visible is not None else [numbers[id(g)] for g in gpus]
    if rank >= len(entries):
        raise StartupError(f"RuntimeError: CUDA error: invalid device ordinal (cuda:{rank})")
    entry = entries[rank]
    for gpu in gpus:
        if entry in (numbers[id(gpu)], gpu.uuid):
            if gpu.lost:
                raise StartupError(f"RuntimeError: CUDA error: GPU is lost (cuda:{rank}, {gpu.pci_bus_id})")
            return gpu
    raise StartupError(f"RuntimeError: CUDA error: invalid device ordinal (CUDA_VISIBLE_DEVICES entry {entry!r})")


def worker_mib(gpu: Gpu, gpu_memory_utilization: float) -> int:
    value = os.environ.get(WORKER_MIB_ENV)
    return int(value) if value else int(gpu.memory_total_mib * gpu_memory_utilization)


def check_free_memory(state: StateDir, gpu: Gpu, rank: int, wanted_mib: int) -> None:
    """Fail as vLLM does when another process still holds the memory this worker needs."""
    held = sum(alloc.used_mib for alloc in live_allocs(state) if alloc.gpu_index == gpu.index)
    free = gpu.memory_total_mib - gpu.reserved_mib - gpu.orphan_mib - held
    if free < wanted_mib:
        utilization = wanted_mib / gpu.memory_total_mib
        raise StartupError(
            f"ValueError: Free memory on device cuda:{rank} ({free / 1024:.2f}/{gpu.memory_total_mib / 1024:.2f} GiB)"
            f" on startup is less than desired GPU memory utilization ({utilization:.2f},"
            f" {wanted_mib / 1024:.2f} GiB). Decrease GPU memory utilization or reduce GPU memory used by other"
            " processes."
        )
