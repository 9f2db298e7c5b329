# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_report): the fleet report's reading (on each host) and its files (on the controller). It may import
# the flat files of module_utils (_deps, _secrets), _gpu, _host and _http, and the read-only helpers of _reclaim (the
# owner rule) and _server (records, /health); never a module or a plugin.

"""What one host contributes to the fleet report: gpu_facts' reading, whose each holder is (the server the role
manages, an orphan, someone else's job, a PID of another namespace) and the role's servers on the host.

It reads and never changes anything: the role's records are only read, /health is only asked.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import glob
import json
import os
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.facts import run_facts
from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import (
    RunCli, RuntimeClient, is_full_id,
)
from ansible_collections.gpuops.fleet.plugins.module_utils._host.peers import connected_to
from ansible_collections.gpuops.fleet.plugins.module_utils._host.process_table import ProcessTable, protected_pids
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.owner import ORPHAN, OWNER, GetSid, Ownership, getsid, label
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.plan import climb
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import SpecError, build_spec
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import masked_argv, masked_text
from ansible_collections.gpuops.fleet.plugins.module_utils._http.request import Reply, http_get
from ansible_collections.gpuops.fleet.plugins.module_utils._server.record import RecordError, read_record, recorded_process

DEFAULT_STATE_DIR = "/var/lib/gpuops-fleet/vllm"

# gpu_report_facts' defaults, for a parameter that is missing (the module's ARGUMENT_SPEC names them from here)
DEFAULTS: t.Dict[str, t.Any] = {"gpus": None, "state_dir": DEFAULT_STATE_DIR, "health_host": "127.0.0.1", "health_timeout": 3.0}

# owner kinds, as the report names them
SERVER = "server"
ORPHANED = "orphan"
OTHER_JOB = "other job"
UNMANAGED = "unmanaged"
OTHER_NAMESPACE = "other namespace"
UNVERIFIED = "unverified"
GONE = "gone"

HttpGet = t.Callable[[str, float], Reply]

# a server entry before its record is read
EMPTY_SERVER: t.Dict[str, t.Any] = {
    "name": None, "record": None, "pid": None, "create_time": None, "running": False, "model": None, "port": None, "gpus": None,
    "config_hash": None, "launched_at": None, "argv": None, "health": None, "healthy": None, "error": None, "unit": None,
    "container": None, "group": None,
}


def _group(meta: t.Mapping[str, t.Any]) -> t.Optional[t.Dict[str, t.Any]]:
    """The server across hosts a record's server is a rank of (the role's metadata: name, rank, size, head, head_url)."""
    group = meta.get("group")
    if not isinstance(group, dict) or not group.get("name"):
        return None
    return {key: group.get(key) for key in ("name", "rank", "size", "head", "head_url")}


def _health_url(meta: t.Mapping[str, t.Any], health_host: str) -> t.Optional[str]:
    """Where a record's server answers /health: its port here, or for a headless rank (which serves no API) its head's."""
    group = _group(meta)
    if group and group.get("rank") and group.get("head_url"):
        return "%s/health" % group["head_url"]
    port = meta.get("port")
    return None if port in (None, "") else "http://%s:%s/health" % (health_host, port)


def _server(path: str, psutil: t.Any, health_host: str, health_timeout: float, get: HttpGet) -> t.Dict[str, t.Any]:
    """One record of the role, what it says and whether its process runs and answers /health."""
    entry: t.Dict[str, t.Any] = dict(EMPTY_SERVER, name=os.path.basename(path)[:-len(".json")], record=path)
    pidless = _pidless_record(path) or {}
    if pidless.get("mode") == "container":  # the container mode's record: the container, whose runtime knows its main process
        return _container_server(entry, pidless, psutil, health_host, health_timeout, get)
    unit = pidless if isinstance(pidless.get("unit"), str) else None
    if unit is not None:  # the systemd launch mode's record: the unit, not a PID (systemctl knows the rest)
        entry.update(unit=unit.get("unit"), config_hash=unit.get("config_hash"), argv=masked_argv(unit.get("argv") or []) or None,
                     running=None)
        return entry
    try:
        record = read_record(path)
    except RecordError as exc:
        entry["error"] = str(exc)
        return entry
    if record is None:  # removed since the listing
        entry["error"] = "the record went away while it was read"
        return entry
    meta = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
    entry.update(
        name=str(meta.get("name") or entry["name"]), pid=record["pid"], create_time=record["create_time"], model=meta.get("model"),
        port=meta.get("port"), gpus=meta.get("gpus"), config_hash=record.get("config_hash"), launched_at=record.get("launched_at"),
        argv=masked_argv(record.get("argv") or []) or None,
    )
    entry["running"] = recorded_process(psutil, record) is not None
    entry["group"] = _group(meta)
    url = _health_url(meta, health_host)
    if entry["running"] and url:
        reply = get(url, health_timeout)
        entry.update(health=reply.describe(), healthy=reply.status == 200)
    return entry


def _container_server(entry: t.Dict[str, t.Any], box: t.Mapping[str, t.Any], psutil: t.Any, health_host: str, health_timeout: float,
                      get: HttpGet, run: t.Optional[RunCli] = None, find: t.Optional[t.Callable[[str], t.Optional[str]]] = None) -> t.Dict[str, t.Any]:
    """A record of the container mode: what it says, and what the container's runtime says of it (``inspect``: whether
    it runs, its main process by the host's PID), then /health."""
    meta = box.get("metadata") if isinstance(box.get("metadata"), dict) else {}
    runtime, cid = str(box.get("runtime") or ""), str(box.get("container_id") or "")
    entry.update(name=str(meta.get("name") or entry["name"]), model=meta.get("model"), port=meta.get("port"), gpus=meta.get("gpus"),
                 config_hash=box.get("config_hash"), launched_at=box.get("launched_at"), argv=masked_argv(box.get("argv") or []) or None,
                 container={"runtime": runtime, "id": cid, "name": box.get("container_name"), "image": box.get("image")})
    client = RuntimeClient(find, run)
    cli = client.cli(runtime)
    if cli is None or not is_full_id(cid):
        entry["error"] = "container %s: %s" % (box.get("container_name"), "its record names no container id" if cli else
                                               "no %s command here to ask about it" % (runtime or "runtime"))
        return entry
    state = client.inspect(runtime, cid).state
    entry["running"] = bool(state and state.running and state.pid)
    if entry["running"]:
        entry["pid"] = state.pid
        try:
            entry["create_time"] = psutil.Process(state.pid).create_time()
        except psutil.Error:
            entry["running"] = False
    entry["group"] = _group(meta)
    url = _health_url(meta, health_host)
    if entry["running"] and url:
        reply = get(url, health_timeout)
        entry.update(health=reply.describe(), healthy=reply.status == 200)
    return entry


def _pidless_record(path: str) -> t.Optional[t.Dict[str, t.Any]]:
    """The record at ``path`` when it names no PID: the systemd mode's (its unit) or the container mode's (its
    container); None for a process record or one that cannot be read (read_record says why)."""
    try:
        with open(path, "r", encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "pid" not in data else None


def read_servers(state_dir: str, psutil: t.Any, health_host: str, health_timeout: float,
                 get: t.Optional[HttpGet] = None) -> t.List[t.Dict[str, t.Any]]:
    """Every server record of the role in ``state_dir`` (NAME.json), sorted by name; none when the folder is absent."""
    fetch = get or http_get
    return [_server(path, psutil, health_host, health_timeout, fetch) for path in sorted(glob.glob(os.path.join(glob.escape(state_dir), "*.json")))]


def judge_holders(facts: t.Mapping[str, t.Any], servers: t.Sequence[t.Mapping[str, t.Any]], psutil: t.Any,
                  sid_of: GetSid = getsid) -> t.List[t.Dict[str, t.Any]]:
    """Whose each holder of the facts is, by gpu_reclaim's rule (_reclaim.owner): the managed server's (its tree or
    session); an orphan (no launcher above it, and it hangs from PID 1, a subreaper, or was adopted); unmanaged (its
    launcher lives but itself hangs from PID 1 or a subreaper: a server started by hand and detached); another job's."""
    pids = sorted({proc["pid"] for gpu in facts.get("gpus") or [] for proc in gpu.get("processes") or []})
    if not pids:
        return []
    spec = build_spec({})
    table = ProcessTable(psutil)
    protected = protected_pids(psutil)
    owned = []  # (server, the spec with that server as owner), as gpu_reclaim's owner option would check it
    for server in servers:
        if server["running"] is True:
            try:
                owned.append((server, build_spec({"owner": {"pid": server["pid"], "create_time": server["create_time"]}})))
            except SpecError:
                continue  # a record whose PID cannot own anything (it is shown with its values all the same)
    verdicts: t.List[t.Dict[str, t.Any]] = []
    infos = {proc["pid"]: proc for gpu in facts.get("gpus") or [] for proc in gpu.get("processes") or []}
    for pid in pids:
        info = infos[pid]
        entry: t.Dict[str, t.Any] = {"pid": pid, "kind": None, "why": None, "server": None, "launcher_pid": None, "launcher": None}
        verdicts.append(entry)
        if info.get("unverified"):
            entry.update(kind=UNVERIFIED, why="NVML's PID may be the machine's, and the local PID has no NVIDIA device open")
            continue
        if not info.get("visible"):
            entry.update(kind=OTHER_NAMESPACE, why="this PID namespace has no such process (a container's?)")
            continue
        if pid not in table.info:
            entry.update(kind=GONE, why="exited after the reading")
            continue
        chain, stop = climb(table, pid, spec, protected)
        for server, server_spec in owned:
            verdict = Ownership(table, server_spec, sid_of).judge(pid, chain, stop)
            if verdict.kind == OWNER:
                entry.update(kind=SERVER, server=server["name"], why=verdict.why)
                break
        else:
            verdict = Ownership(table, spec, sid_of, lambda pids, address: connected_to(psutil, pids, address)).judge(pid, chain, stop)
            if verdict.kind != ORPHAN:
                entry.update(kind=OTHER_JOB, why=verdict.why)
            elif chain:
                # gpu_reclaim may take it under orphans_only, but its launcher lives: a server started by hand, detached
                entry.update(kind=UNMANAGED, why="its launcher, PID %d, runs detached (%s); no record of the role names it" % (chain[-1], verdict.why))
            else:
                entry.update(kind=ORPHANED, why="its launcher is gone: " + verdict.why)
        top = chain[-1] if chain else None
        if top is not None:
            entry.update(launcher_pid=top, launcher=masked_text(label(table.info.get(top))))
        elif entry["kind"] == SERVER:
            entry.update(launcher_pid=pid, launcher=masked_text(label(table.info.get(pid))))
        entry["why"] = masked_text(entry["why"])
    return verdicts


def run_reading(params: t.Mapping[str, t.Any], pynvml: t.Any, psutil: t.Any, require: t.Callable[[str], None],
                find_smi: t.Callable[[], t.Optional[str]] = lambda: None, run_command: t.Any = None,
                get: t.Optional[HttpGet] = None, sid_of: GetSid = getsid) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """One gpu_report_facts run: (result, warnings, failed). gpu_facts' facts, ``owners`` and ``servers``."""
    timeout = params.get("health_timeout", DEFAULTS["health_timeout"])
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 60:
        return {"msg": "health_timeout: %r must be more than 0 and at most 60 seconds" % (timeout,)}, [], True
    state_dir = params.get("state_dir") or DEFAULT_STATE_DIR
    if not os.path.isabs(state_dir):
        return {"msg": "state_dir: %r is not an absolute path" % (state_dir,)}, [], True
    result, warnings, failed = run_facts({"gpus": params.get("gpus"), "processes": True, "health": True, "topology": False},
                                         pynvml, psutil, require, find_smi, run_command)
    if failed:
        return result, warnings, failed
    if psutil is None:
        require("psutil")
        return {"msg": "psutil is needed to tell whose each holder is"}, warnings, True
    for gpu in result["ansible_facts"].get("gpus") or []:
        for proc in gpu.get("processes") or []:
            proc["name"] = masked_text(proc.get("name"))
            if proc.get("cmdline"):
                proc["cmdline"] = [masked_text(word) for word in proc["cmdline"]]
    servers = read_servers(state_dir, psutil, params.get("health_host") or DEFAULTS["health_host"], float(timeout), get)
    result["servers"] = servers
    result["owners"] = judge_holders(result["ansible_facts"], servers, psutil, sid_of)
    return result, warnings, False
