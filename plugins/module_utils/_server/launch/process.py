# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The ``process`` launch mode: the server runs as a detached process, named by a record (PID and start time).

Each backend of this package (process.py, systemd.py) has the same three functions with the same arguments and the
same result keys, so that a module runs every launch mode through one path: status(), stop() and launch().
``module`` is the AnsibleModule (check_mode, warn, run_command, get_bin_path), ``psutil`` the psutil module.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._server.generation import reading_generates
from ansible_collections.gpuops.fleet.plugins.module_utils._http.request import http_get
from ansible_collections.gpuops.fleet.plugins.module_utils._server.answers import drain
from ansible_collections.gpuops.fleet.plugins.module_utils._server.process import LaunchError, launch_detached, stop_tree
from ansible_collections.gpuops.fleet.plugins.module_utils._server.record import (
    carry_last_good, read_record, recorded_process, remove_record, same_process, string_env, write_record,
)

MODE = "process"
HEALTH_TIMEOUT_S = 5.0
DRAIN_INTERVAL_S = 0.5


class ServerError(Exception):
    """The backend could not do what was asked; ``result`` holds what it found and did until then."""

    def __init__(self, message: str, result: t.Optional[t.Mapping[str, t.Any]] = None) -> None:
        super().__init__(message)
        self.result = dict(result or {})


class Target(t.NamedTuple):
    """The managed server: its record (or unit configuration record), its unit (systemd mode), the wanted configuration,
    its container (container mode: the keys of container.ContainerSpec)."""

    state_file: str
    unit: t.Optional[str] = None
    config_hash: t.Optional[str] = None
    container: t.Optional[t.Dict[str, t.Any]] = None


class LaunchSpec(t.NamedTuple):
    """What a launch starts. ``env``: the environment the server gets on top of the task's (process mode) or in its
    unit's environment file (systemd mode); ``shown_argv``: the argv with secrets masked; ``systemd``: the options
    of the systemd mode (content, env_file, exec_env, enabled)."""

    argv: t.List[str]
    env: t.Dict[str, t.Any]
    shown_argv: t.List[str]
    log_file: t.Optional[str] = None
    chdir: t.Optional[str] = None
    metadata: t.Optional[t.Dict[str, t.Any]] = None
    systemd: t.Optional[t.Dict[str, t.Any]] = None


def with_health(status: t.Dict[str, t.Any], health_url: t.Optional[str], generate: t.Optional[t.Mapping[str, t.Any]]) -> t.Dict[str, t.Any]:
    """``status`` with /health asked (when ``health_url``) and, for a server that runs with the wanted configuration and
    does not fail /health, the generation check of ``generate`` (generation.GENERATE_OPTIONS). Shared by the backends:
    only a server that would otherwise be left alone is asked for a completion."""
    if health_url:
        reply = http_get(health_url, timeout=HEALTH_TIMEOUT_S)
        status.update(healthy=reply.status == 200, health=reply.describe())
    if status["running"] and status["healthy"] is not False and status["config_matches"] is not False:
        generation = reading_generates(generate)
        if generation is not None:
            status.update(generates=generation.ok, generation=generation.as_result())
    return status


def matches(wanted: t.Optional[str], recorded: t.Optional[str]) -> t.Optional[bool]:
    """Whether the wanted configuration hash is the recorded one; None when either is missing."""
    return None if wanted is None or recorded is None else wanted == recorded


def base_reading(mode: str, target: Target, record: t.Optional[t.Mapping[str, t.Any]], pid: t.Optional[int],
                 create_time: t.Optional[float], recorded_hash: t.Optional[str]) -> t.Dict[str, t.Any]:
    """The keys every backend's reading has, before /health and the generation check: the server runs when ``pid``."""
    return {
        "mode": mode, "record": dict(record) if record is not None else None, "running": pid is not None, "pid": pid,
        "create_time": create_time, "config_hash": recorded_hash, "config_matches": matches(target.config_hash, recorded_hash),
        "healthy": None, "health": None, "generates": None, "generation": None, "crash_loop": "",
    }


def status(module: t.Any, psutil: t.Any, target: Target, health_url: t.Optional[str] = None,
           generate: t.Optional[t.Mapping[str, t.Any]] = None) -> t.Dict[str, t.Any]:
    """What runs now by the record: the recorded process (PID and start time), its configuration hash against the
    wanted one, its /health answer when it runs, and the generation check when asked. Raises RecordError for an
    unreadable record."""
    del module
    record = read_record(target.state_file)
    proc = recorded_process(psutil, record)
    reading = base_reading(MODE, target, record, proc.pid if proc is not None else None,
                           record.get("create_time") if proc is not None and record else None,
                           record.get("config_hash") if record else None)
    return with_health(reading, health_url if proc is not None else None, generate)


def drain_first(module: t.Any, drain_url: t.Optional[str], drain_timeout: float) -> t.Optional[t.Dict[str, t.Any]]:
    """The drain before a stop (read once in check mode); a warning when requests are cut. None without ``drain_url``."""
    if not drain_url:
        return None
    drained = drain(drain_url.rstrip("/"), drain_timeout, DRAIN_INTERVAL_S, wait=not module.check_mode)
    if drained["cut"] and not module.check_mode:
        module.warn(drained["msg"] + ": a restart now cuts them")
    return drained


def stop_process(psutil: t.Any, proc: t.Any, stop_timeout: float, still: t.Callable[[], t.Any]) -> t.List[t.Dict[str, t.Any]]:
    """SIGTERM ``proc``, then SIGKILL its tree after ``stop_timeout``; raises ServerError when ``still()`` finds it alive."""
    stopped = [entry._asdict() for entry in stop_tree(psutil, proc, stop_timeout)]
    survivor = still()
    if survivor is not None:
        raise ServerError("PID %d survived SIGTERM and SIGKILL (state %s)" % (survivor.pid, survivor.status()), {"stopped": stopped})
    return stopped


def stop(module: t.Any, psutil: t.Any, target: Target, drain_url: t.Optional[str] = None, drain_timeout: float = 60.0,
         stop_timeout: float = 30.0, disable: bool = False) -> t.Dict[str, t.Any]:
    """End the recorded server (drained first when ``drain_url``), its whole tree, and remove the record. Returns the
    reading before the stop updated: changed, stopped, drained (when drained), msg. ``disable`` has no meaning here."""
    del disable
    reading = status(module, psutil, target)
    record = reading["record"]
    proc = recorded_process(psutil, record)
    result = dict(reading, changed=False, stopped=[])
    if proc is not None:
        drained = drain_first(module, drain_url, drain_timeout)
        if drained is not None:
            result["drained"] = drained
    if proc is None:
        if record is not None and not module.check_mode:
            remove_record(target.state_file)
            result["msg"] = "the recorded server (PID %s) no longer runs; record removed" % record.get("pid")
        return result
    result["changed"] = True
    if module.check_mode:
        result.update(running=False, msg="would stop PID %d" % proc.pid)
        return result
    try:
        result["stopped"] = stop_process(psutil, proc, stop_timeout, lambda: recorded_process(psutil, record))
    except ServerError as exc:
        raise ServerError(str(exc), dict(result, **exc.result)) from None
    remove_record(target.state_file)
    result.update(running=False, pid=None, create_time=None,
                  msg="stopped PID %d and %d process(es) of its tree" % (proc.pid, max(0, len(result["stopped"]) - 1)))
    return result


def stop_taken_over(module: t.Any, psutil: t.Any, pid: int, create_time: float, drain_url: t.Optional[str] = None,
                    drain_timeout: float = 60.0, stop_timeout: float = 30.0) -> t.Dict[str, t.Any]:
    """Stop a server taken over (found on the port, never launched here): drained first, then its whole tree; its
    parent (a shell, tmux, screen) is never signalled. A process that no longer runs with ``create_time`` is left alone.
    Returns changed, stopped, drained (when drained) and msg."""
    proc = same_process(psutil, pid, create_time)
    result: t.Dict[str, t.Any] = {"changed": False, "stopped": []}
    if proc is None:
        result["msg"] = "PID %d started at %s no longer runs" % (pid, create_time)
        return result
    drained = drain_first(module, drain_url, drain_timeout)
    if drained is not None:
        result["drained"] = drained
    result["changed"] = True
    if module.check_mode:
        result["msg"] = "would stop PID %d" % proc.pid
        return result
    result["stopped"] = stop_process(psutil, proc, stop_timeout, lambda: same_process(psutil, pid, create_time))
    result["msg"] = "stopped PID %d and %d process(es) of its tree" % (proc.pid, max(0, len(result["stopped"]) - 1))
    return result


def _environment(extra: t.Mapping[str, t.Any]) -> t.Dict[str, str]:
    env = dict(os.environ)
    env.update(string_env(extra))
    return env


def launch(module: t.Any, psutil: t.Any, target: Target, spec: LaunchSpec) -> t.Dict[str, t.Any]:
    """Start the server unless the recorded one runs with this configuration (then nothing changes); a recorded server
    with another configuration is a ServerError (stop it first). Writes the record (0600). Returns the reading updated:
    changed, launched, log_file, msg."""
    reading = status(module, psutil, target)
    record = reading["record"]
    wanted = target.config_hash
    result = dict(reading, changed=False, launched=False, log_file=(record or {}).get("log_file") or spec.log_file)
    if reading["running"]:
        if wanted is not None and reading["config_hash"] != wanted:
            raise ServerError("PID %d already runs from %s with another configuration (hash %s, wanted %s): stop it first"
                              % (reading["pid"], target.state_file, reading["config_hash"], wanted), result)
        result["msg"] = "PID %d already runs with this configuration" % reading["pid"]
        return result
    if not spec.log_file:
        raise ServerError("log_file: the process mode needs a log file to launch", result)
    result["changed"] = True
    if module.check_mode:
        result.update(running=True, msg="would launch %s" % " ".join(spec.shown_argv))
        return result
    # this start-up's lines begin here: the ready step reads the log from this offset on (_server/startup.py)
    try:
        log_offset = os.path.getsize(spec.log_file)
    except OSError:
        log_offset = 0
    try:
        pid = launch_detached(spec.argv, _environment(spec.env), spec.log_file, spec.chdir, shown_argv=spec.shown_argv)
    except LaunchError as exc:
        raise ServerError("argv: %s" % exc, result) from None
    try:
        create_time = psutil.Process(pid).create_time()
    except psutil.Error:
        raise ServerError("the server (PID %d) exited at once; see %s" % (pid, spec.log_file), result) from None
    write_record(target.state_file, {
        "pid": pid, "create_time": create_time, "config_hash": wanted, "argv": list(spec.shown_argv),
        "env_keys": sorted(spec.env), "log_file": spec.log_file, "log_offset": log_offset,
        "launched_at": time.time(),
        "metadata": dict(spec.metadata or {}),
        # the last known-good configuration (beside the record) by hash and since when: no value of it
        "last_good": carry_last_good(target.state_file),
    })
    result.update(running=True, pid=pid, create_time=create_time, config_hash=wanted, config_matches=True if wanted else None,
                  launched=True, log_file=spec.log_file, msg="launched PID %d" % pid)
    return result
