# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_reclaim's readings of the selected GPUs, and the judgement of a fresh one: free, or why not.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._nvml import Holder, Memory, NvmlSession
from ansible_collections.gpuops.fleet.plugins.module_utils._nvml_errors import NvmlError


class Reading(t.NamedTuple):
    """One GPU read through NVML; ``error`` set (and the rest empty) when the GPU does not answer."""

    index: int
    uuid: t.Optional[str]
    memory: t.Optional[Memory]
    holders: t.List[Holder]
    error: t.Optional[str]


class Problem(t.NamedTuple):
    """Why a GPU is not free. ``waitable``: it may still resolve (a signalled process, memory coming back)."""

    gpu: int
    text: str
    waitable: bool


def read_gpu(session: NvmlSession, index: int, uuid: t.Optional[str] = None) -> Reading:
    """A fresh reading of one GPU: memory and every holder (compute and graphics lists).

    ``uuid``: known from an earlier reading, so a polling loop does not ask NVML for it again.
    """
    try:
        uuid = uuid or session.uuid(index)
        return Reading(index, uuid, session.memory(index), session.holders(index), None)
    except NvmlError as exc:
        return Reading(index, None, None, [], "GPU %d: %s" % (index, exc))


def judge(reading: Reading, threshold_mib: int, signalled: t.Mapping[int, t.Tuple[str, bool]], left_alone: t.Mapping[int, str],
          describe: t.Callable[[int], t.Dict[str, t.Any]], excluded: t.Callable[[t.Dict[str, t.Any]], bool],
          ignore_foreign: bool, settling: bool = True) -> t.List[Problem]:
    """Every reason this GPU is not free; an empty list means verified free.

    ``settling``: this run signalled a holder of this GPU, so memory held by no process may still come back.
    """
    if reading.error is not None or reading.memory is None:
        return [Problem(reading.index, reading.error or "GPU %d: no memory reading" % reading.index, False)]
    problems: t.List[Problem] = []
    discounted = 0
    counted_holders = 0
    kept: t.List[str] = []
    for holder in reading.holders:
        info = describe(holder.pid)
        mib = "%s MiB" % ("N/A" if holder.used_memory_mib is None else holder.used_memory_mib)
        where = "GPU %d: pid %d" % (reading.index, holder.pid)
        if holder.pid in signalled and not info["visible"]:
            # ours, and gone from /proc: NVML lags behind, or the driver's teardown is stuck; never another namespace's
            counted_holders += 1
            problems.append(Problem(reading.index, "%s exited after a signal but NVML still lists it with %s: "
                                    "the driver has not released its memory" % (where, mib), True))
            continue
        if not info["visible"]:
            if ignore_foreign:
                discounted += holder.used_memory_mib or 0
                continue
            problems.append(Problem(reading.index, "%s holds %s but is not visible in this PID namespace (a container's process?): "
                                    "run on the host PID namespace (e.g. not inside a container), or set ignore_foreign" % (where, mib), False))
            counted_holders += 1
            continue
        if excluded(info):
            # left alone on purpose; it keeps the GPU busy only if the memory says so (judged below)
            kept.append("pid %d (%s, excluded)" % (holder.pid, info["name"]))
            continue
        counted_holders += 1
        label = "%s (%s, state %s) holds %s" % (where, info["name"], info["state"], mib)
        if holder.pid in signalled:
            why, waitable = signalled[holder.pid]
            problems.append(Problem(reading.index, label + ": " + why, waitable))
        elif holder.pid in left_alone:
            problems.append(Problem(reading.index, label + ": not signalled: " + left_alone[holder.pid], False))
        else:
            problems.append(Problem(reading.index, label + ": appeared during the reclaim (respawned by a launcher left alive?)", False))
    used = reading.memory.used_mib - discounted
    if counted_holders == 0 and used > threshold_mib:
        if kept:
            problems.append(Problem(reading.index, "GPU %d: %d MiB used (above memory_threshold_mib %d), held by %s" % (
                reading.index, used, threshold_mib, ", ".join(kept)), False))
        else:
            problems.append(Problem(reading.index, "GPU %d: %d MiB used with no process holding it (above memory_threshold_mib %d): "
                                    "memory held by no process, e.g. a driver teardown that did not finish" % (reading.index, used, threshold_mib),
                                    settling))
    return problems
