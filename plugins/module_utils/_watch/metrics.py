# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_watch): the metrics endpoint of a GPU host (docs/watch.md). It may import the flat files of
# module_utils, _http, _host, _gpu, _reclaim, _server and _report (whose reading and classification it shows); never a
# module or a plugin, and no other package imports it.

"""The metrics of one host in the Prometheus text exposition format (version 0.0.4), from a reading.

Pure: the reading (the fleet report's host entry: gpu_facts' GPUs with each holder's owner, the role's servers) and
the generation probes go in, text comes out. Written by hand rather than with prometheus_client: the endpoint runs
with the Python of the environment prepare_hosts builds on each host, which holds nvidia-ml-py and psutil only, and
the format is a few lines of text.

Every series carries ``host`` (the name the endpoint was given, its inventory name), so that a reader of the
endpoint itself (an event source of Event-Driven Ansible) needs no relabelling; each condition an alert or a
remediation acts on is one series whose labels name its evidence (GPU, holder PID and name, server).

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import math
import typing as t

# a holder's class, as the metrics name it: the managed server's, an orphan's (its launcher is gone), someone else's
# job (a live launcher that is not ours, a server started by hand, a PID NVML names that is not verified), a
# container's (a holder in a container, or in another PID namespace, that is not the managed server), and memory that
# no process holds (used while NVML lists no process)
SERVER = "server"
ORPHAN = "orphan"
FOREIGN = "foreign"
CONTAINER = "container"
NONE = "none"
CLASSES = (SERVER, ORPHAN, FOREIGN, CONTAINER, NONE)

# the fleet report's owner kinds (_report.reading) -> class; a holder in a container that is not the server's is a
# container's; "gone" (it exited after the reading) is left out
_OWNER_CLASS = {"server": SERVER, "orphan": ORPHAN, "other job": FOREIGN, "unmanaged": FOREIGN, "unverified": FOREIGN,
                "other namespace": CONTAINER}

GAUGE = "gauge"
COUNTER = "counter"

# name -> (type, help), in the order the text lists them
FAMILIES: t.Dict[str, t.Tuple[str, str]] = {
    "gpuops_watch_reading_ok": (GAUGE, "1 when the last reading of the host succeeded, 0 when it failed (see gpuops_watch_reading_error)"),
    "gpuops_watch_reading_error": (GAUGE, "1 with the reason of a failed reading as its label"),
    "gpuops_watch_reading_duration_seconds": (GAUGE, "seconds the last reading took (GPUs, holders, servers, probes)"),
    "gpuops_watch_reading_timestamp_seconds": (GAUGE, "when the last reading was taken (seconds since the epoch)"),
    "gpuops_gpus": (GAUGE, "GPUs the driver reports on the host"),
    "gpuops_gpu_lost": (GAUGE, "1 when the GPU fell off the bus or cannot be read (NVML_ERROR_GPU_IS_LOST and the like)"),
    "gpuops_gpu_unhealthy": (GAUGE, "1 when the GPU reports a health problem (XID, ECC, remapping, retired pages)"),
    "gpuops_gpu_memory_used_mib": (GAUGE, "GPU memory in use, MiB"),
    "gpuops_gpu_memory_total_mib": (GAUGE, "GPU memory in all, MiB"),
    "gpuops_gpu_memory_by_class_mib": (GAUGE, "GPU memory by holder class (server, orphan, foreign, container, none), MiB"),
    "gpuops_gpu_holders": (GAUGE, "processes holding memory on the GPU, by holder class"),
    "gpuops_gpu_holder_memory_mib": (GAUGE, "memory one process that is not the managed server holds on the GPU, MiB"
                                            " (NaN when the driver does not say), with its PID and name"),
    "gpuops_server_info": (GAUGE, "1 for each server the role manages on the host, with its model, port, mode and PID"),
    "gpuops_server_up": (GAUGE, "1 when the managed server's recorded process (or unit, or container) runs"),
    "gpuops_server_health": (GAUGE, "1 when the managed server answers /health with HTTP 200"),
    "gpuops_server_generates": (GAUGE, "1 when the last short completion generated tokens (checked at most once per interval)"),
    "gpuops_server_generation_age_seconds": (GAUGE, "seconds since the completion gpuops_server_generates reports was sent"),
    "gpuops_server_start_time_seconds": (GAUGE, "when the managed server's process started (seconds since the epoch)"),
    "gpuops_server_startups_total": (COUNTER, "start-ups of the managed server this endpoint saw (a new process of the record)"),
    "gpuops_server_restarts": (GAUGE, "restarts systemd (NRestarts) or the container runtime made after the server failed"),
}


class Sample(t.NamedTuple):
    name: str
    labels: t.Tuple[t.Tuple[str, str], ...]
    value: float


def sample(metric: str, value: t.Any, **labels: t.Any) -> Sample:
    """One sample of the family ``metric``; a label whose value is None is left out, a value that is None becomes NaN."""
    if metric not in FAMILIES:
        raise ValueError("no metric family %s" % metric)
    number = float("nan") if value is None else float(value)
    return Sample(metric, tuple((key, str(labels[key])) for key in labels if labels[key] is not None), number)


def escape(value: str) -> str:
    """A label value as the text format writes it: backslash, double quote and line feed escaped."""
    return value.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def number_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value == int(value) and abs(value) < 2 ** 53 else repr(value)


def exposition(samples: t.Iterable[Sample]) -> str:
    """The text format: each family's HELP and TYPE, then its samples, families in FAMILIES' order (one without a
    sample is still declared, so that a reader knows the endpoint has it)."""
    by_name: t.Dict[str, t.List[Sample]] = {name: [] for name in FAMILIES}
    for one in samples:
        by_name[one.name].append(one)
    lines = []
    for name, (kind, text) in FAMILIES.items():
        lines.append("# HELP %s %s" % (name, text.replace("\\", "\\\\").replace("\n", " ")))
        lines.append("# TYPE %s %s" % (name, kind))
        for one in by_name[name]:
            labels = ",".join('%s="%s"' % (key, escape(value)) for key, value in one.labels)
            lines.append("%s%s %s" % (name, "{%s}" % labels if labels else "", number_text(one.value)))
    return "\n".join(lines) + "\n"


def holder_class(holder: t.Mapping[str, t.Any]) -> t.Optional[str]:
    """The class of one holder of the fleet report's GPU entry (_report.model): None for one that exited meanwhile."""
    owner = holder.get("owner")
    if owner == "gone":
        return None
    found = _OWNER_CLASS.get(owner, FOREIGN)
    return CONTAINER if found == FOREIGN and holder.get("container") else found


def gpu_samples(host: str, gpus: t.Sequence[t.Mapping[str, t.Any]]) -> t.List[Sample]:
    """The GPUs' series, from the fleet report's GPU entries (_report.model.host_entry's ``gpus``)."""
    out = [sample("gpuops_gpus", len(gpus), host=host)]
    for gpu in gpus:
        ids = {"host": host, "gpu": gpu.get("index"), "uuid": gpu.get("uuid")}
        out.append(sample("gpuops_gpu_lost", gpu.get("state") == "lost", **ids))
        out.append(sample("gpuops_gpu_unhealthy", bool(gpu.get("unhealthy")), **ids))
        out.append(sample("gpuops_gpu_memory_used_mib", gpu.get("memory_used_mib"), **ids))
        out.append(sample("gpuops_gpu_memory_total_mib", gpu.get("memory_total_mib"), **ids))
        mib = {name: 0.0 for name in CLASSES}
        count = {name: 0 for name in CLASSES}
        for holder in gpu.get("holders") or []:
            kind = holder_class(holder)
            if kind is None:
                continue
            count[kind] += 1
            used = holder.get("used_memory_mib")
            mib[kind] += used or 0
            if kind != SERVER:
                out.append(sample("gpuops_gpu_holder_memory_mib", used, host=host, gpu=gpu.get("index"), uuid=gpu.get("uuid"),
                                  **{"class": kind, "pid": holder.get("pid"), "name": holder.get("name") or "?"}))
        mib[NONE] = gpu.get("unaccounted_mib") or 0
        for kind in CLASSES:
            out.append(sample("gpuops_gpu_memory_by_class_mib", mib[kind], **dict(ids, **{"class": kind})))
            if kind != NONE:
                out.append(sample("gpuops_gpu_holders", count[kind], **dict(ids, **{"class": kind})))
    return out


class ServerState(t.NamedTuple):
    """One managed server as the endpoint shows it (watch.read_state fills it)."""
    name: str
    model: t.Optional[str]
    port: t.Optional[t.Any]
    mode: str
    pid: t.Optional[int]
    up: bool
    health: bool
    generates: t.Optional[bool]  # None: never checked (not up, or no answer on /health)
    generation_age_s: t.Optional[float]
    start_time: t.Optional[float]
    startups: int
    restarts: t.Optional[int]


def server_samples(host: str, servers: t.Sequence[ServerState]) -> t.List[Sample]:
    out = []
    for server in servers:
        ids = {"host": host, "server": server.name}
        out.append(sample("gpuops_server_info", 1, model=server.model, port=server.port, mode=server.mode, pid=server.pid, **ids))
        out.append(sample("gpuops_server_up", server.up, **ids))
        out.append(sample("gpuops_server_health", server.health, **ids))
        out.append(sample("gpuops_server_generates", bool(server.generates), **ids))
        if server.generation_age_s is not None:
            out.append(sample("gpuops_server_generation_age_seconds", round(server.generation_age_s, 3), **ids))
        if server.start_time is not None:
            out.append(sample("gpuops_server_start_time_seconds", server.start_time, **ids))
        out.append(sample("gpuops_server_startups_total", server.startups, **ids))
        if server.restarts is not None:
            out.append(sample("gpuops_server_restarts", server.restarts, **ids))
    return out


def reading_samples(host: str, ok: bool, error: t.Optional[str], duration_s: float, at: float) -> t.List[Sample]:
    out = [sample("gpuops_watch_reading_ok", ok, host=host)]
    if not ok:
        out.append(sample("gpuops_watch_reading_error", 1, host=host, error=" ".join(str(error or "unknown").split())[:300]))
    out.append(sample("gpuops_watch_reading_duration_seconds", round(duration_s, 6), host=host))
    out.append(sample("gpuops_watch_reading_timestamp_seconds", round(at, 3), host=host))
    return out
