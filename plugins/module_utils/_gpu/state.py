# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One GPU's state as the fleet report and the free_gpus/unhealthy_gpus filters judge it, from a gpu_facts entry: the one
judgement of whether a GPU is free (is_held, is_free; memory_held for the memory alone, which gpu_reclaim's
verification shares).

Every value may be missing or V(null) (a field the device does not offer, a host whose reading failed): nothing here
raises on such an entry, it is judged on what it has.

Package rule (_gpu): the GPUs as NVML and nvidia-smi show them. It imports the flat files of module_utils
(_deps, _argspec, _secrets), _host and its own files: never _reclaim, _bench, _server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

DEFAULT_THRESHOLD_MIB = 1024

# clock event reasons that say something is wrong (gpu_idle, applications_clocks_setting and sw_power_cap are normal)
SLOWDOWN_REASONS = frozenset(("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown"))


def number(value: t.Any) -> t.Optional[float]:
    """An int or a float as it is; anything else (None, "N/A", a bool, text) is None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def is_lost(gpu: t.Mapping[str, t.Any]) -> bool:
    return bool(gpu.get("error"))


def health_flags(gpu: t.Mapping[str, t.Any]) -> t.List[str]:
    """What is wrong with the GPU, in words; empty when nothing is known to be wrong."""
    flags: t.List[str] = []
    if is_lost(gpu):
        flags.append("lost: %s" % gpu.get("error"))
        return flags
    ecc = number(gpu.get("ecc_uncorrected_volatile"))
    if ecc:
        flags.append("uncorrected ECC errors: %d" % ecc)
    rows = gpu.get("remapped_rows")
    if isinstance(rows, t.Mapping):
        if rows.get("failure") is True:
            flags.append("row remapping failed")
        if rows.get("pending") is True:
            flags.append("row remapping pending (reset the GPU)")
        if number(rows.get("uncorrectable")):
            flags.append("rows remapped for uncorrectable errors: %d" % number(rows.get("uncorrectable")))
    pages = gpu.get("retired_pages")
    if isinstance(pages, t.Mapping):
        if pages.get("pending") is True:
            flags.append("retired pages pending (reset the GPU)")
        if number(pages.get("double_bit")):
            flags.append("pages retired for double-bit errors: %d" % number(pages.get("double_bit")))
    return flags


def throttle_flags(gpu: t.Mapping[str, t.Any]) -> t.List[str]:
    """The clock event reasons that slow the GPU down (shown, but not counted as unhealthy)."""
    reasons = gpu.get("clocks_event_reasons")
    if not isinstance(reasons, (list, tuple)):
        return []
    return ["throttled: %s" % reason for reason in reasons if reason in SLOWDOWN_REASONS]


def is_unhealthy(gpu: t.Mapping[str, t.Any]) -> bool:
    return bool(health_flags(gpu))


def processes(gpu: t.Mapping[str, t.Any]) -> t.Optional[t.List[t.Mapping[str, t.Any]]]:
    """The GPU's holders; None when they were not read."""
    found = gpu.get("processes")
    if not isinstance(found, list):
        return None
    return [proc for proc in found if isinstance(proc, t.Mapping)]


def memory_held(used_mib: t.Optional[float], threshold_mib: int = DEFAULT_THRESHOLD_MIB) -> bool:
    """More than ``threshold_mib`` is in use: the GPU is held, whoever holds it (a process, or none: a driver teardown
    that did not finish). Memory that is not known (None) holds nothing by itself."""
    return used_mib is not None and used_mib > threshold_mib


def is_held(gpu: t.Mapping[str, t.Any], threshold_mib: int = DEFAULT_THRESHOLD_MIB, *, ignore_pids: t.Container[int] = ()) -> bool:
    """A holder is listed, or more than ``threshold_mib`` is in use (memory held by no process counts as held).

    A holder whose pid is in ``ignore_pids`` is no holder (a caller's own process, say); its memory is still counted
    in the GPU's use, so a GPU above the threshold is held whatever holds it."""
    if any(proc.get("pid") not in ignore_pids for proc in processes(gpu) or []):
        return True
    return memory_held(number(gpu.get("memory_used_mib")), threshold_mib)


def is_free(gpu: t.Mapping[str, t.Any], threshold_mib: int = DEFAULT_THRESHOLD_MIB, healthy: bool = True) -> bool:
    """Nothing holds it: it answered, its holders were read and are none, at most ``threshold_mib`` in use, and (with
    ``healthy``) nothing is known to be wrong with it. A GPU whose memory or holders could not be read is not free."""
    if is_lost(gpu) or processes(gpu) is None or number(gpu.get("memory_used_mib")) is None:
        return False
    if is_held(gpu, threshold_mib):
        return False
    return not (healthy and is_unhealthy(gpu))


def state(gpu: t.Mapping[str, t.Any], threshold_mib: int = DEFAULT_THRESHOLD_MIB) -> str:
    """One word: V(lost), V(held), V(free), V(unhealthy) (idle but not to be used) or V(unknown) (not read)."""
    if is_lost(gpu):
        return "lost"
    if is_held(gpu, threshold_mib):
        return "held"
    if is_free(gpu, threshold_mib):
        return "free"
    if is_unhealthy(gpu):
        return "unhealthy"
    return "unknown"


def gpu_list(facts: t.Any) -> t.Optional[t.List[t.Mapping[str, t.Any]]]:
    """The GPU entries of gpu_facts' ``ansible_facts``, of a registered gpu_facts result, of a host's variables, or
    the list itself; None when ``facts`` is none of those."""
    if isinstance(facts, t.Mapping):
        if "ansible_facts" in facts and isinstance(facts["ansible_facts"], t.Mapping):
            facts = facts["ansible_facts"]
        facts = facts.get("gpus")
    if not isinstance(facts, (list, tuple)):
        return None
    return [gpu for gpu in facts if isinstance(gpu, t.Mapping)]


def check_threshold(value: t.Any, option: str = "threshold_mib") -> int:
    """``value`` as a whole number of MiB from 0 to 1 TiB; raises ValueError naming the option and the value."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError("%s: %r is not a whole number of MiB" % (option, value))
    try:
        mib = int(value)
    except ValueError:
        raise ValueError("%s: %r is not a whole number of MiB" % (option, value)) from None
    if not 0 <= mib <= 1024 * 1024:
        raise ValueError("%s: %r must be from 0 to %d MiB" % (option, value, 1024 * 1024))
    return mib
