# -*- coding: utf-8 -*-
# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """Shared by the modules that read GPUs through NVML (gpu_facts, gpu_reclaim)."""

    DOCUMENTATION = r"""
options:
  gpus:
    description:
      - The GPUs to work on, each by index (V(0), V(1), ...) or by UUID (V(GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)), as C(nvidia-smi -L) lists them.
      - Omit it for every GPU of the host. An empty list, a malformed value, an index the host does not have
        or a UUID no GPU answers to fails the task, naming the value, before anything is read or done.
    type: list
    elements: str
requirements:
  - nvidia-ml-py (C(import pynvml)) and the NVIDIA driver's C(libnvidia-ml.so.1) on the managed host.
  - psutil on the managed host, to name the processes that hold GPU memory.
notes:
  - Install the C(nvidia-ml-py) package, not the deprecated C(pynvml) package (a wrapper that warns on import).
  - When NVML cannot be opened the task fails saying why and what to do, for example the driver not loaded
    (C(modprobe nvidia)), C(libnvidia-ml.so.1) not found (install the driver), no permission on C(/dev/nvidia*)
    (run the task with C(become)), or a library/kernel module version mismatch after a driver upgrade (reboot).
  - A GPU that NVML lists but that does not answer (NVML_ERROR_GPU_IS_LOST) is reported with its error; the other GPUs are still handled.
"""
