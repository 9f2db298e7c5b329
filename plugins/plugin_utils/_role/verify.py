# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The verify step's verdict on the server's GPUs (the independent check the incident lacked), on the controller.

Each GPU of the server must have no holder and at most the threshold used. The reading judged is the reclaim's last
one when it proved the GPUs free through an NVML session opened after its signals (``reading_after.fresh_session``),
else a fresh gpu_facts reading. With state stopped, a GPU that only a job the reclaim left alone holds is not this
server's to free: it is named, not failed.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.state import is_held

Gpu = t.Mapping[str, t.Any]


def fresh_reading(reclaim: t.Optional[t.Mapping[str, t.Any]]) -> t.Optional[t.List[t.Dict[str, t.Any]]]:
    """The reclaim's last reading as gpu_facts entries when it proved the GPUs free through a fresh NVML session, else None."""
    reclaim = reclaim or {}
    after = reclaim.get("reading_after") or {}
    if reclaim.get("verified") is not True or not isinstance(reclaim.get("gpus"), list) or after.get("fresh_session") is not True:
        return None
    return [{"index": gpu.get("index"), "uuid": gpu.get("uuid"), "error": gpu.get("error"),
             "memory_used_mib": gpu.get("memory_used_mib_after"), "processes": gpu.get("processes_left")} for gpu in reclaim["gpus"]]


def left_alone_pids(plan: t.Mapping[str, t.Any], reclaim: t.Optional[t.Mapping[str, t.Any]],
                    preflight: t.Optional[t.Mapping[str, t.Any]]) -> t.List[int]:
    """With state stopped, the PIDs of the jobs the reclaim (else the preflight) left alone; none otherwise."""
    if plan.get("state") != "stopped":
        return []
    foreign = (reclaim or {}).get("foreign")
    if foreign is None:
        foreign = (preflight or {}).get("foreign") or []
    return [entry.get("pid") for entry in foreign if isinstance(entry, t.Mapping)]


def judge(plan: t.Mapping[str, t.Any], gpus: t.Sequence[Gpu], alone: t.Sequence[int]) -> t.Dict[str, t.Any]:
    """busy: the server's GPUs not free (an error, a holder, or memory above the threshold); left: those that only a
    job left alone holds."""
    busy, left = [], []
    threshold = int(plan.get("memory_threshold_mib") or 0)
    for gpu in gpus:
        if gpu.get("index") not in plan["gpus"]:
            continue
        holders = gpu.get("processes") or []
        if holders and all(proc.get("pid") in alone for proc in holders):
            left.append(gpu.get("index"))
        elif gpu.get("error") is not None or is_held(gpu, threshold):
            busy.append(dict(gpu))
    return {"gpus": [dict(gpu) for gpu in gpus], "busy": busy, "left": left}


def _holder_line(proc: t.Mapping[str, t.Any]) -> str:
    used = proc.get("used_memory_mib")
    hidden = "" if proc.get("visible", True) else "  (not visible in this PID namespace)"
    fields = (proc.get("pid"), proc.get("name") or "?", "N/A" if used is None else used, proc.get("username") or "?", hidden,
              " ".join(proc.get("cmdline") or [])[:100])
    return "    PID %s  %s  %s MiB  user %s%s  %s" % fields


def busy_text(host: str, plan: t.Mapping[str, t.Any], busy: t.Sequence[Gpu], reclaim_msg: t.Optional[str], held: str) -> str:
    """Each busy GPU and every holder, by PID, name, MiB, user and command line."""
    said = " (gpu_reclaim said: %s)" % reclaim_msg if reclaim_msg else ""
    lines = ["%s: %d GPU(s) of server %s %s%s:" % (host, len(busy), plan["name"], held, said)]
    for gpu in sorted(busy, key=lambda entry: entry.get("index") or 0):
        if gpu.get("error"):
            lines.append("  GPU %s: %s" % (gpu.get("index"), gpu["error"]))
        else:
            nobody = "" if gpu.get("processes") else ", held by no process"
            lines.append("  GPU %s: %s / %s MiB used%s" % (gpu.get("index"), gpu.get("memory_used_mib"), gpu.get("memory_total_mib"), nobody))
        lines += [_holder_line(proc) for proc in gpu.get("processes") or []]
    return "\n".join(lines)


def free_text(plan: t.Mapping[str, t.Any], left: t.Sequence[int]) -> str:
    free = [str(gpu) for gpu in plan["gpus"] if gpu not in left]
    text = "GPU %s free (no holder, at most %s MiB used)" % (", ".join(free), plan.get("memory_threshold_mib"))
    if left:
        text += "; GPU %s held by a job left alone" % ", ".join(str(gpu) for gpu in left)
    return text


def verdict(host: str, plan: t.Mapping[str, t.Any], gpus: t.Sequence[Gpu], alone: t.Sequence[int],
            reclaim: t.Optional[t.Mapping[str, t.Any]], check_mode: bool) -> t.Dict[str, t.Any]:
    """The step's result: the judgement, ``failed`` when a GPU is busy (never in check mode, which stopped nothing),
    and ``msg`` naming each busy GPU and holder, or the free ones."""
    judged = judge(plan, gpus, alone)
    said = (reclaim or {}).get("msg")
    if not judged["busy"]:
        msg = free_text(plan, judged["left"])
    elif check_mode:
        msg = busy_text(host, plan, judged["busy"], said, "held now (check mode stops nothing)")
    else:
        msg = busy_text(host, plan, judged["busy"], said, "not free")
    return dict(judged, failed=bool(judged["busy"]) and not check_mode, msg=msg)
