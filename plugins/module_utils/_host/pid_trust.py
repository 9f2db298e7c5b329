# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Whether a PID that NVML lists may be taken for the local process with that number (both modules use this).

Inside a container (a nested PID namespace) NVML may report the machine's PIDs, and such a number can belong to an
unrelated local process. NVML's PIDs are not trusted when this process runs in a nested PID namespace (its
/proc/self/status ``NSpid`` has more than one entry, or /proc/self/ns/pid is not the kernel's initial PID
namespace) or when NVML lists a PID that does not exist here. A local
process then counts as the GPU process only with evidence that it uses the GPU: an NVIDIA device file open
(``/dev/nvidia*``, or ``$GPUOPS_NVIDIA_DEVICE_DIR/nvidia*``).

Package rule (_host): this package reads the local host (the process table, PID trust, device files). It imports
only the flat files of module_utils (_deps, _argspec, _secrets) and its own files: never _gpu, _reclaim, _bench,
_server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host.devices import device_prefix, open_device_files

STATUS_PATH = "/proc/self/status"
NS_PATH = "/proc/self/ns/pid"
# the kernel's initial PID namespace (PROC_PID_INIT_INO), as /proc/self/ns/pid names it
INITIAL_PID_NAMESPACE = "pid:[4026531836]"
UNVERIFIABLE = "unverifiable"


def nested_pid_namespace(status_path: str = STATUS_PATH, ns_path: str = NS_PATH) -> bool:
    """True when this process runs below the kernel's initial PID namespace: ``NSpid`` names more than one PID (a
    /proc mounted outside this namespace), or ``ns_path`` is not the initial namespace (a container mounts its own
    /proc, where ``NSpid`` shows one entry only)."""
    try:
        with open(status_path, "r", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("NSpid:") and len(line.split()) > 2:
                    return True
    except OSError:
        pass
    try:
        return os.readlink(ns_path) != INITIAL_PID_NAMESPACE
    except OSError:  # no such link (a kernel before 3.8) or not readable: NSpid alone decides
        return False


def holds_device_file(pid: int, proc_root: str = "/proc", prefix: t.Optional[str] = None) -> bool:
    """True when process ``pid`` has an NVIDIA device file open (what ``fuser /dev/nvidia*`` shows). False when it
    has none, or its descriptors cannot be read (another user's process without the rights, or gone)."""
    return bool(open_device_files(pid, proc_root, prefix, first_only=True))


class PidTrust:
    """The verdict for one pass: ``trusted`` (NVML's PIDs are this namespace's), else why not, and per PID whether
    the local process has the evidence."""

    def __init__(self, why_not: t.Optional[str], evidence: t.Optional[t.Callable[[int], bool]] = None) -> None:
        self.why_not = why_not
        self._evidence = evidence or holds_device_file
        self._seen: t.Dict[int, bool] = {}

    @property
    def trusted(self) -> bool:
        return self.why_not is None

    def verified(self, pid: int) -> bool:
        """Whether the local process ``pid`` may be taken for the GPU process NVML lists under that number."""
        if self.why_not is None:
            return True
        if pid not in self._seen:
            self._seen[pid] = self._evidence(pid)
        return self._seen[pid]

    def reason(self, pid: int, name: t.Optional[str] = None) -> str:
        """Why ``pid`` is unverifiable (only meaningful when ``verified(pid)`` is false); ``name``: the local process's."""
        return ("%s: NVML's PIDs may not be this PID namespace's (%s) and the local process %d%s has no NVIDIA device file "
                "(%s*) open, so it may be an unrelated process with the same number; not signalled" % (
                    UNVERIFIABLE, self.why_not, pid, " (%s)" % name if name else "", device_prefix()))


def assess(missing: t.Iterable[int], nested: t.Optional[bool] = None, evidence: t.Optional[t.Callable[[int], bool]] = None) -> PidTrust:
    """``missing``: PIDs NVML lists (still, after a second reading) that this namespace does not have.
    ``nested``: whether this process runs in a nested PID namespace (read from /proc/self/status when None)."""
    gone = sorted(set(missing))
    reasons = []
    if nested_pid_namespace() if nested is None else nested:
        reasons.append("this task runs in a nested PID namespace")
    if gone:
        reasons.append("NVML lists pid %s, which this namespace does not have" % ", ".join(str(pid) for pid in gone[:5]))
    return PidTrust("; ".join(reasons) or None, evidence)
