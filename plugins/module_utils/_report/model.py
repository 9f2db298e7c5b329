# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_report): the fleet report's reading (on each host) and its files (on the controller). It may import
# the flat files of module_utils (_deps, _secrets), _gpu, _host and _http, and the read-only helpers of _reclaim (the
# owner rule) and _server (records, /health); never a module or a plugin.

"""The fleet report's data, from each host's registered gpu_report_facts (or gpu_facts) result.

One structure feeds the page, the CSV files, report.json and summary.md, so they cannot disagree. A host whose
result is missing, unreachable, failed or malformed, and a value that is null or of the wrong type, is shown as
such: nothing here raises on bad facts.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import datetime
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu import state as gpu_state
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import mask_cmdlines, masked_text

CMDLINE_LIMIT = 300
HOST_OK = "ok"
HOST_UNREACHABLE = "unreachable"
HOST_FAILED = "failed"
HOST_NO_RESULT = "no result"

# a holder's container, as gpu_facts names its fields
CONTAINER_KEYS = ("runtime", "id", "name", "image", "pod_uid")

# problem kinds, most urgent first (the page and summary.md list them in this order)
PROBLEM_ORDER = ("unreachable", "failed", "lost", "unhealthy", "orphan", "unaccounted", "server")


def _text(value: t.Any) -> t.Optional[str]:
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def when(epoch: t.Any) -> t.Optional[str]:
    """Seconds since the epoch as UTC ISO 8601 (to the second); None when not a number."""
    seconds = gpu_state.number(epoch)
    if seconds is None:
        return None
    try:
        return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return None


def _cmdline(proc: t.Mapping[str, t.Any]) -> t.Optional[str]:
    words = proc.get("cmdline")
    if not isinstance(words, (list, tuple)) or not words:
        return None
    text = masked_text(words) or ""
    return text if len(text) <= CMDLINE_LIMIT else text[:CMDLINE_LIMIT - 3] + "..."


def _container(raw: t.Any) -> t.Optional[t.Dict[str, t.Optional[str]]]:
    """A holder's container as gpu_facts gives it (runtime, id, name, image, pod_uid; a missing one is None); None when
    the holder is in none, or the value names neither a runtime nor an id."""
    if not isinstance(raw, t.Mapping) or not (raw.get("runtime") or raw.get("id")):
        return None
    return {key: _text(raw.get(key)) for key in CONTAINER_KEYS}


def _holder(proc: t.Mapping[str, t.Any], owner: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    visible = proc.get("visible") is not False
    kind = owner.get("kind")
    if kind is None and not visible:
        kind = "other namespace"
    return {
        "pid": proc.get("pid") if isinstance(proc.get("pid"), int) else None,
        "name": masked_text(proc.get("name")),
        "username": _text(proc.get("username")),
        "cmdline": _cmdline(proc),
        "used_memory_mib": gpu_state.number(proc.get("used_memory_mib")),
        "visible": visible,
        "owner": kind,
        "server": _text(owner.get("server")),
        "launcher_pid": owner.get("launcher_pid") if isinstance(owner.get("launcher_pid"), int) else None,
        "launcher": masked_text(owner.get("launcher")),
        "why": masked_text(owner.get("why")),
        "container": _container(proc.get("container")),
    }


def _gpu(raw: t.Mapping[str, t.Any], owners: t.Mapping[int, t.Mapping[str, t.Any]], threshold_mib: int) -> t.Dict[str, t.Any]:
    procs = gpu_state.processes(raw)
    holders = [_holder(proc, owners.get(proc.get("pid")) or {}) for proc in procs or []]
    used = gpu_state.number(raw.get("memory_used_mib"))
    unaccounted = used if procs == [] and used is not None and used > threshold_mib else None
    index = raw.get("index")
    return {
        "index": index if isinstance(index, int) and not isinstance(index, bool) else None,
        "name": _text(raw.get("name")),
        "uuid": _text(raw.get("uuid")),
        "state": gpu_state.state(raw, threshold_mib),
        "unhealthy": gpu_state.is_unhealthy(raw),
        "health": gpu_state.health_flags(raw),
        "throttle": gpu_state.throttle_flags(raw),
        "memory_used_mib": used,
        "memory_total_mib": gpu_state.number(raw.get("memory_total_mib")),
        "utilization_gpu_pct": gpu_state.number(raw.get("utilization_gpu_pct")),
        "temperature_c": gpu_state.number(raw.get("temperature_c")),
        "power_draw_w": gpu_state.number(raw.get("power_draw_w")),
        "power_limit_w": gpu_state.number(raw.get("power_limit_w")),
        "holders": holders,
        "processes_read": procs is not None,
        "unaccounted_mib": unaccounted,
        "error": _text(raw.get("error")),
    }


def _group_of(raw: t.Any) -> t.Optional[t.Dict[str, t.Any]]:
    """A server's place in a server across hosts (its group's name, its rank, the group's size and head)."""
    if not isinstance(raw, t.Mapping) or not _text(raw.get("name")):
        return None
    rank, size = raw.get("rank"), raw.get("size")
    return {"name": _text(raw.get("name")), "rank": rank if isinstance(rank, int) else None,
            "size": size if isinstance(size, int) else None, "head": _text(raw.get("head"))}


def server_groups(hosts: t.Sequence[t.Mapping[str, t.Any]]) -> t.List[t.Dict[str, t.Any]]:
    """Each server across hosts as one: its name, its hosts by rank (each rank's PID, whether it runs, its health: a
    headless rank's is its head's), and whether it is whole (every rank seen, running, and the head healthy)."""
    found: t.Dict[str, t.Dict[str, t.Any]] = {}
    for host in hosts:
        for server in host.get("servers") or []:
            group = server.get("group")
            if not group:
                continue
            entry = found.setdefault(group["name"], {"name": group["name"], "size": group["size"], "head": group["head"],
                                                     "model": server.get("model"), "ranks": []})
            entry["ranks"].append({"host": host["name"], "rank": group["rank"], "server": server["name"], "pid": server["pid"],
                                   "running": server["running"], "health": server["health"], "healthy": server["healthy"]})
    groups = []
    for name in sorted(found):
        entry = found[name]
        entry["ranks"].sort(key=lambda r: (r["rank"] is None, r["rank"]))
        seen = {r["rank"] for r in entry["ranks"]}
        entry["whole"] = (entry["size"] is not None and seen == set(range(entry["size"]))
                          and all(r["running"] and r["healthy"] for r in entry["ranks"]))
        groups.append(entry)
    return groups


def _server(raw: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    argv = raw.get("argv")
    return {
        "name": _text(raw.get("name")),
        "model": _text(raw.get("model")),
        "config_hash": _text(raw.get("config_hash")),
        "pid": raw.get("pid") if isinstance(raw.get("pid"), int) else None,
        "running": raw.get("running") if isinstance(raw.get("running"), bool) else None,
        "port": _text(raw.get("port")),
        "gpus": [gpu for gpu in raw.get("gpus") or [] if isinstance(gpu, (int, str))] if isinstance(raw.get("gpus"), list) else None,
        "health": _text(raw.get("health")),
        "healthy": raw.get("healthy") if isinstance(raw.get("healthy"), bool) else None,
        "up_since": when(raw.get("create_time")),
        "unit": _text(raw.get("unit")),
        "container": _container(raw.get("container")),
        "argv": masked_text(argv) if isinstance(argv, list) else None,
        "error": _text(raw.get("error")),
        "group": _group_of(raw.get("group")),
    }


def _reason(raw: t.Mapping[str, t.Any], default: str) -> str:
    msg = raw.get("msg")
    if isinstance(msg, str) and msg.strip():
        return " ".join(msg.split())
    return default


def host_entry(name: str, raw: t.Any, threshold_mib: int) -> t.Dict[str, t.Any]:
    """One host of the report, from its registered result (anything: a bad one is shown as such)."""
    host: t.Dict[str, t.Any] = {"name": name, "status": HOST_OK, "reason": None, "driver": None, "gpus": [], "servers": [],
                                "free_gpus": [], "problems": 0}
    if not isinstance(raw, t.Mapping) or not raw:
        host.update(status=HOST_NO_RESULT, reason="no result: the host was not reached or its task did not run")
        return host
    if raw.get("unreachable"):
        host.update(status=HOST_UNREACHABLE, reason=_reason(raw, "the host did not answer"))
        return host
    if raw.get("failed"):
        host.update(status=HOST_FAILED, reason=_reason(raw, "the reading failed without a message"))
        return host
    if raw.get("skipped"):
        host.update(status=HOST_NO_RESULT, reason=_reason(raw, "the reading was skipped"))
        return host
    gpus = gpu_state.gpu_list(raw)
    if gpus is None:
        host.update(status=HOST_FAILED, reason="the result holds no GPU facts (ansible_facts.gpus is missing or not a list)")
        return host
    facts = raw.get("ansible_facts") if isinstance(raw.get("ansible_facts"), t.Mapping) else {}
    driver = facts.get("gpu_driver") if isinstance(facts.get("gpu_driver"), t.Mapping) else {}
    host["driver"] = {key: _text(driver.get(key)) for key in ("driver_version", "cuda_driver_version", "source")}
    owners = {entry.get("pid"): entry for entry in raw.get("owners") or [] if isinstance(entry, t.Mapping)}
    host["gpus"] = [_gpu(mask_cmdlines(gpu), owners, threshold_mib) for gpu in gpus]
    host["servers"] = [_server(entry) for entry in raw.get("servers") or [] if isinstance(entry, t.Mapping)]
    host["free_gpus"] = [gpu["index"] for gpu, raw_gpu in zip(host["gpus"], gpus) if gpu_state.is_free(raw_gpu, threshold_mib)]
    return host


def _mib(value: t.Optional[float]) -> str:
    return "?" if value is None else "{:,}".format(int(value))


def host_problems(host: t.Mapping[str, t.Any]) -> t.List[t.Dict[str, t.Any]]:
    """What needs an operator on this host, most urgent first."""
    name = host["name"]
    found: t.List[t.Dict[str, t.Any]] = []

    def add(kind: str, gpu: t.Optional[int], text: str, pid: t.Optional[int] = None) -> None:
        found.append({"host": name, "kind": kind, "gpu": gpu, "pid": pid, "text": text})

    if host["status"] in (HOST_UNREACHABLE, HOST_NO_RESULT):
        add("unreachable", None, "%s: %s" % (host["status"], host["reason"]))
    elif host["status"] == HOST_FAILED:
        add("failed", None, "reading failed: %s" % host["reason"])
    for gpu in host["gpus"]:
        if gpu["state"] == "lost":
            add("lost", gpu["index"], "GPU %s is lost: %s" % (gpu["index"], gpu["error"]))
        elif gpu["unhealthy"]:
            add("unhealthy", gpu["index"], "GPU %s is unhealthy: %s" % (gpu["index"], "; ".join(gpu["health"])))
    for gpu in host["gpus"]:
        for holder in gpu["holders"]:
            if holder["owner"] == "orphan":
                add("orphan", gpu["index"], "GPU %s: %s (PID %s, user %s) holds %s MiB; %s" % (
                    gpu["index"], holder["name"] or "?", holder["pid"], holder["username"] or "?", _mib(holder["used_memory_mib"]),
                    holder["why"] or "its launcher is gone"), holder["pid"])
    for gpu in host["gpus"]:
        if gpu["unaccounted_mib"] is not None:
            add("unaccounted", gpu["index"], "GPU %s: %s MiB used and held by no process" % (gpu["index"], _mib(gpu["unaccounted_mib"])))
    for server in host["servers"]:
        if server["error"]:
            add("server", None, "managed server %s: %s" % (server["name"], server["error"]))
        elif server["running"] is False:
            add("server", None, "managed server %s (PID %s) is not running" % (server["name"], server["pid"]))
        elif server["running"] and server["healthy"] is False:
            add("server", None, "managed server %s (PID %s) does not answer /health: %s" % (server["name"], server["pid"], server["health"]))
    return found


def build_report(results: t.Sequence[t.Tuple[str, t.Any]], threshold_mib: int = gpu_state.DEFAULT_THRESHOLD_MIB,
                 generated_at: t.Optional[float] = None, title: str = "GPU fleet report") -> t.Dict[str, t.Any]:
    """The report from (host name, registered result) pairs."""
    hosts = [host_entry(str(name), raw, threshold_mib) for name, raw in results]
    problems: t.List[t.Dict[str, t.Any]] = []
    for host in hosts:
        found = host_problems(host)
        host["problems"] = len(found)
        problems.extend(found)
    problems.sort(key=lambda p: (PROBLEM_ORDER.index(p["kind"]), p["host"], -1 if p["gpu"] is None else p["gpu"]))
    hosts.sort(key=lambda h: (h["problems"] == 0, h["name"]))
    gpus = [gpu for host in hosts for gpu in host["gpus"]]
    summary = {
        "hosts": len(hosts),
        "hosts_answered": sum(1 for host in hosts if host["status"] == HOST_OK),
        "hosts_unreachable": sum(1 for host in hosts if host["status"] in (HOST_UNREACHABLE, HOST_NO_RESULT)),
        "hosts_failed": sum(1 for host in hosts if host["status"] == HOST_FAILED),
        "gpus": len(gpus),
        "gpus_free": sum(1 for host in hosts for _index in host["free_gpus"]),
        "gpus_held": sum(1 for gpu in gpus if gpu["state"] == "held"),
        "gpus_unhealthy": sum(1 for gpu in gpus if gpu["unhealthy"]),
        "gpus_lost": sum(1 for gpu in gpus if gpu["state"] == "lost"),
        "memory_used_mib": int(sum(gpu["memory_used_mib"] or 0 for gpu in gpus)),
        "memory_total_mib": int(sum(gpu["memory_total_mib"] or 0 for gpu in gpus)),
        "holders": sum(len(gpu["holders"]) for gpu in gpus),
        "orphans": sum(1 for p in problems if p["kind"] == "orphan"),
        "problems": len(problems),
    }
    return {
        "title": title,
        "generated_at": when(generated_at) if generated_at is not None else None,
        "threshold_mib": threshold_mib,
        "summary": summary,
        "problems": problems,
        "hosts": hosts,
        "groups": server_groups(hosts),
    }
