# -*- coding: utf-8 -*-
# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""NVML error codes mapped to messages an operator can act on.

Package rule (_gpu): the GPUs as NVML and nvidia-smi show them. It imports the flat files of module_utils
(_deps, _argspec, _secrets), _host and its own files: never _reclaim, _bench, _server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

# NVML return codes (nvml.h); stable ABI values.
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
NO_DATA = 21
ARGUMENT_VERSION_MISMATCH = 25

# Codes that mean "this device or this driver does not offer the value": reported as null.
UNAVAILABLE_CODES = frozenset((NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, FUNCTION_NOT_FOUND, NO_DATA, ARGUMENT_VERSION_MISMATCH))

_NAMES = {
    1: "NVML_ERROR_UNINITIALIZED",
    2: "NVML_ERROR_INVALID_ARGUMENT",
    NOT_SUPPORTED: "NVML_ERROR_NOT_SUPPORTED",
    NO_PERMISSION: "NVML_ERROR_NO_PERMISSION",
    NOT_FOUND: "NVML_ERROR_NOT_FOUND",
    7: "NVML_ERROR_INSUFFICIENT_SIZE",
    8: "NVML_ERROR_INSUFFICIENT_POWER",
    DRIVER_NOT_LOADED: "NVML_ERROR_DRIVER_NOT_LOADED",
    10: "NVML_ERROR_TIMEOUT",
    11: "NVML_ERROR_IRQ_ISSUE",
    LIBRARY_NOT_FOUND: "NVML_ERROR_LIBRARY_NOT_FOUND",
    FUNCTION_NOT_FOUND: "NVML_ERROR_FUNCTION_NOT_FOUND",
    14: "NVML_ERROR_CORRUPTED_INFOROM",
    GPU_IS_LOST: "NVML_ERROR_GPU_IS_LOST",
    16: "NVML_ERROR_RESET_REQUIRED",
    17: "NVML_ERROR_OPERATING_SYSTEM",
    LIB_RM_VERSION_MISMATCH: "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    20: "NVML_ERROR_MEMORY",
    NO_DATA: "NVML_ERROR_NO_DATA",
    ARGUMENT_VERSION_MISMATCH: "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
    999: "NVML_ERROR_UNKNOWN",
}

_HINTS = {
    DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded: check `lsmod | grep nvidia` and `dmesg`, load it with `modprobe nvidia`"
                       " or reinstall the driver; after a driver upgrade, reboot",
    LIBRARY_NOT_FOUND: "libnvidia-ml.so.1 was not found by the dynamic loader: install the NVIDIA driver"
                       " (its user-space libraries), or add the folder that holds libnvidia-ml.so.1 to the loader path",
    NO_PERMISSION: "this user may not access the GPU: run the task with become: true,"
                   " or add the remote user to the group that owns /dev/nvidia*",
    LIB_RM_VERSION_MISMATCH: "the NVML library and the loaded kernel module are different versions (driver upgraded without a reboot):"
                             " reboot the host or reload the nvidia kernel modules",
    FUNCTION_NOT_FOUND: "the installed NVIDIA driver is older than nvidia-ml-py expects: upgrade the driver or install an older nvidia-ml-py",
    GPU_IS_LOST: "the GPU stopped responding (fell off the bus): check `dmesg` for NVIDIA Xid errors (e.g. Xid 79);"
                 " the GPU needs a reset or the host a reboot",
    16: "the GPU needs a reset: drain it and run `nvidia-smi --gpu-reset` or reboot",
    14: "the GPU's infoROM is corrupted: contact the hardware vendor",
    17: "the operating system blocked the request: check `dmesg`",
}


class NvmlError(Exception):
    """An NVML call failed; str() is the operator-facing message."""

    def __init__(self, code: int, text: str) -> None:
        super(NvmlError, self).__init__(text)
        self.code = code
        self.text = text

    @property
    def unavailable(self) -> bool:
        """True when the value is just not offered by this device or driver (reported as null)."""
        return self.code in UNAVAILABLE_CODES

    def __str__(self) -> str:
        name = _NAMES.get(self.code, "NVML error %d" % self.code)
        hint = _HINTS.get(self.code)
        if hint:
            return "%s (%s): %s" % (self.text, name, hint)
        return "%s (%s)" % (self.text, name)


def translate(lib: t.Any, exc: BaseException) -> NvmlError:
    """Turn an exception raised by pynvml into an NvmlError.

    pynvml raises NVMLError subclasses carrying ``value``; its unversioned process-list
    wrappers raise NVMLLibraryMismatchError, a plain Exception, for a missing symbol
    (mapped to FUNCTION_NOT_FOUND so callers may fall back to an older call).
    """
    mismatch = getattr(lib, "NVMLLibraryMismatchError", None)
    if mismatch is not None and isinstance(exc, mismatch):
        return NvmlError(FUNCTION_NOT_FOUND, str(exc))
    code = getattr(exc, "value", None)
    return NvmlError(code if isinstance(code, int) else 999, str(exc))


def pynvml_errors(lib: t.Any) -> t.Tuple[t.Type[BaseException], ...]:
    """What pynvml raises: NVMLError, and NVMLLibraryMismatchError where the release has it (older ones do not)."""
    mismatch = getattr(lib, "NVMLLibraryMismatchError", None)
    return (lib.NVMLError,) if mismatch is None else (lib.NVMLError, mismatch)
