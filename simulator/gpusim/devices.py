# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulated host's NVIDIA device files, held open as a CUDA process holds /dev/nvidia*.

A real CUDA process opens /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia<i> of each GPU it uses, and keeps
them open until it exits; `fuser /dev/nvidia*` (and gpu_reclaim's evidence) finds holders that way, even those
NVML does not list. The simulator never touches the machine's /dev: each host has its own `dev/` of plain
files (made by `gpusim create`), and every simulated CUDA process (a vLLM worker, a `gpusim tree` node that
holds memory or lists `devices`, a stuck holder, ...) opens its GPUs' files there and keeps them open for
life. Readers are pointed at the directory with GPUOPS_NVIDIA_DEVICE_DIR (gpusim.api.Host.environment()).
"""

from __future__ import annotations

from typing import IO, List

from gpusim.statedir import StateDir

DEVICE_DIR_ENV = "GPUOPS_NVIDIA_DEVICE_DIR"
_HELD: List[IO[bytes]] = []  # open for the life of the process, as the CUDA driver keeps them


def open_devices(state: StateDir, gpu_index: int) -> List[str]:
    """Open nvidiactl, nvidia-uvm and nvidia<gpu_index> of this host (once each per process); the paths held.

    A host made before device files existed has no dev/: then nothing is opened.
    """
    held = {handle.name for handle in _HELD}
    opened: List[str] = []
    for name in ("nvidiactl", "nvidia-uvm", f"nvidia{gpu_index}"):
        path = state.dev / name
        if str(path) in held or not path.exists():
            continue
        _HELD.append(open(path, "rb"))  # pylint: disable=consider-using-with  # kept open until the process exits
        opened.append(str(path))
    return opened
