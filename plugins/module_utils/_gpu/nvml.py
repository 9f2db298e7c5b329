# -*- coding: utf-8 -*-
# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The one place that opens NVML and reads memory and memory holders from it.

Package rule (_gpu): the GPUs as NVML and nvidia-smi show them. It imports the flat files of module_utils
(_deps, _argspec, _secrets), _host and its own files: never _reclaim, _bench, _server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.errors import (
    FUNCTION_NOT_FOUND,
    NO_PERMISSION,
    NOT_SUPPORTED,
    NvmlError,
    pynvml_errors,
    translate,
)

MIB = 1024 * 1024
# the name nvidia-ml-py loads the library by (dlopen: a library of that soname already loaded is the one it gets)
LIBRARY = "libnvidia-ml.so.1"

# (type reported for the holder, pynvml function listing that type)
_PROCESS_LISTS = (
    ("compute", "nvmlDeviceGetComputeRunningProcesses"),
    ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
    ("mps", "nvmlDeviceGetMPSComputeRunningProcesses"),  # clients of an MPS server: in no other list
)


class Memory(t.NamedTuple):
    """One memory reading, in MiB. ``used`` excludes ``reserved`` when NVML's v2 call answers (then ``reserved`` is set)."""

    total_mib: int
    used_mib: int
    reserved_mib: t.Optional[int]
    free_mib: int


class Holder(t.NamedTuple):
    """A PID that NVML lists on one GPU. ``type``: compute, graphics or mps (an MPS client), joined by + when in several lists."""

    pid: int
    used_memory_mib: t.Optional[int]
    type: str


def text(value: t.Union[str, bytes]) -> str:
    """Older nvidia-ml-py releases return bytes where newer ones return str."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _mib(value: t.Optional[int]) -> t.Optional[int]:
    return None if value is None else int(value) // MIB


class NvmlSession:
    """An initialised NVML. Caches device handles and which call variants the driver offers."""

    def __init__(self, lib: t.Any) -> None:
        self.lib = lib
        self._errors = pynvml_errors(lib)
        self._handles: t.Dict[int, t.Any] = {}
        self._memory_v2 = getattr(lib, "nvmlMemory_v2", None)
        # reads refused with NVML_ERROR_NO_PERMISSION (the value is null): "call on GPU i", for the operator
        self.denied: t.List[str] = []
        self.count: int = self.call("nvmlDeviceGetCount")

    def call(self, name: str, *args: t.Any) -> t.Any:
        """Call pynvml's ``name``; any NVML failure is raised as NvmlError."""
        func = getattr(self.lib, name, None)
        if func is None:
            raise NvmlError(FUNCTION_NOT_FOUND, "nvidia-ml-py has no %s" % name)
        try:
            return func(*args)
        except self._errors as exc:
            raise translate(self.lib, exc) from None

    def optional(self, name: str, *args: t.Any) -> t.Any:
        """Like call(), but None where the device or driver does not offer the value (NOT_SUPPORTED and the like)."""
        try:
            return self.call(name, *args)
        except NvmlError as exc:
            if exc.code == NO_PERMISSION:
                where = [index for index, handle in self._handles.items() if args and handle is args[0]]
                self.denied.append("%s%s" % (name, " on GPU %d" % where[0] if where else ""))
            if exc.unavailable:
                return None
            raise

    def handle(self, index: int) -> t.Any:
        if index not in self._handles:
            self._handles[index] = self.call("nvmlDeviceGetHandleByIndex", index)
        return self._handles[index]

    def uuid(self, index: int) -> str:
        return text(self.call("nvmlDeviceGetUUID", self.handle(index)))

    def inventory(self) -> t.List[t.Tuple[int, t.Optional[str]]]:
        """(index, uuid) of every GPU; uuid None for a GPU that does not answer (e.g. lost)."""
        result: t.List[t.Tuple[int, t.Optional[str]]] = []
        for index in range(self.count):
            try:
                result.append((index, self.uuid(index)))
            except NvmlError:
                result.append((index, None))
        return result

    def driver(self) -> t.Dict[str, t.Any]:
        """driver_version, cuda_driver_version ("13.0"), nvml_version, count."""
        cuda = self.optional("nvmlSystemGetCudaDriverVersion_v2")
        if cuda is None:
            cuda = self.optional("nvmlSystemGetCudaDriverVersion")
        nvml_version = self.optional("nvmlSystemGetNVMLVersion")
        return {
            "driver_version": text(self.call("nvmlSystemGetDriverVersion")),
            "cuda_driver_version": None if cuda is None else "%d.%d" % (cuda // 1000, (cuda % 1000) // 10),
            "nvml_version": None if nvml_version is None else text(nvml_version),
            "count": self.count,
        }

    def memory(self, index: int) -> Memory:
        """A fresh memory reading: v2 (used without the driver's reservation) when offered, else v1."""
        handle = self.handle(index)
        if self._memory_v2 is not None:
            try:
                info = self.call("nvmlDeviceGetMemoryInfo", handle, self._memory_v2)
                return Memory(_mib(info.total), _mib(info.used), _mib(info.reserved), _mib(info.free))
            except NvmlError as exc:
                if not exc.unavailable:
                    raise
                self._memory_v2 = None
        info = self.call("nvmlDeviceGetMemoryInfo", handle)
        return Memory(_mib(info.total), _mib(info.used), None, _mib(info.free))

    def holders(self, index: int) -> t.List[Holder]:
        """Every PID in the compute, graphics and MPS lists of one GPU, sorted by PID (a PID in several lists appears once)."""
        handle = self.handle(index)
        merged: t.Dict[int, Holder] = {}
        for kind, name in _PROCESS_LISTS:
            for proc in self._process_list(name, handle):
                used = _mib(proc.usedGpuMemory)
                seen = merged.get(proc.pid)
                if seen is None:
                    merged[proc.pid] = Holder(proc.pid, used, kind)
                else:
                    # both lists report the process's whole usage on this GPU: do not add them up
                    known = [value for value in (seen.used_memory_mib, used) if value is not None]
                    merged[proc.pid] = Holder(proc.pid, max(known) if known else None, seen.type + "+" + kind)
        return [merged[pid] for pid in sorted(merged)]

    def _process_list(self, name: str, handle: t.Any) -> t.List[t.Any]:
        if name.startswith("nvmlDeviceGetMPS") and getattr(self.lib, name, None) is None:
            return []  # an nvidia-ml-py release without MPS lists: nothing to read
        try:
            return self.call(name, handle)
        except NvmlError as exc:
            if exc.code == FUNCTION_NOT_FOUND:
                # driver older than the _v3 symbol that the unversioned wrapper calls
                return self.call(name + "_v2", handle)
            if exc.code == NOT_SUPPORTED:
                return []
            raise


@contextlib.contextmanager
def open_nvml(lib: t.Any) -> t.Iterator[NvmlSession]:
    """Initialise NVML and yield a session; shut NVML down afterwards.

    Raises NvmlError with an actionable message when NVML cannot be opened
    (library not found, driver not loaded, no permission, version mismatch).
    """
    try:
        lib.nvmlInit()
    except pynvml_errors(lib) as exc:
        error = translate(lib, exc)
        raise NvmlError(error.code, "cannot initialise NVML: " + error.text) from None
    try:
        yield NvmlSession(lib)
    finally:
        with contextlib.suppress(lib.NVMLError):
            lib.nvmlShutdown()


def renew(session: NvmlSession) -> NvmlSession:
    """A new session in place of ``session``, for a reading that does not rely on it: NVML is shut down (its init
    count, counted by the library, is back to zero when nothing else in this process opened it, as in a module) and
    initialised again, with new device handles. Do not use ``session`` afterwards. The caller's own shutdown at the
    end (open_nvml's) closes the new one. Raises NvmlError when NVML cannot be opened again."""
    lib = session.lib
    with contextlib.suppress(lib.NVMLError):
        lib.nvmlShutdown()
    try:
        lib.nvmlInit()
    except pynvml_errors(lib) as exc:
        error = translate(lib, exc)
        raise NvmlError(error.code, "cannot initialise NVML again: " + error.text) from None
    return NvmlSession(lib)


def use_environment(environment: t.Mapping[str, t.Any]) -> t.Optional[str]:
    """Give this process, from now on, a task's ``environment`` (the role's gpuops_fleet_environment) that it did not
    start with: what it reads and what it starts sees the variables (NVML's, a container runtime's DOCKER_HOST), and
    since the loader reads LD_LIBRARY_PATH only when a process starts, NVML's library is loaded here from the first of
    its folders that holds one. Returns that library's path, or None."""
    for name, value in environment.items():
        os.environ[str(name)] = str(value)
    for folder in str(environment.get("LD_LIBRARY_PATH") or "").split(os.pathsep):
        path = os.path.join(folder, LIBRARY)
        if folder and os.path.isfile(path):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                continue  # not a library this process can load: NVML's own error says so when it is opened
            return path
    return None
