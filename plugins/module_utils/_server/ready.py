# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""vllm_ready's task on the host: wait until the server answers /health and lists its model, failing within seconds if
it dies; one short completion; then the launch check, the last known-good mark and the release of the lock.

Run by vllm_ready, and by vllm_process given ``ready`` (the role's ready step, so that a restart's module runs share one
module payload, built once per run on the controller).

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import time
import typing as t
from urllib.parse import urlsplit

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError, between, failure, http_url
from ansible_collections.gpuops.fleet.plugins.module_utils._server.log_tail import file_since, file_tail, journal_since, journal_tail
from ansible_collections.gpuops.fleet.plugins.module_utils._http.request import http_get
from ansible_collections.gpuops.fleet.plugins.module_utils._server.answers import listed_models
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import hide_only_secrets, secret_argv_values, secret_env_names
from ansible_collections.gpuops.fleet.plugins.module_utils._server.check import run_launch_check
from ansible_collections.gpuops.fleet.plugins.module_utils._server.generation import GENERATE_TIMEOUT_MAX_S, check_generation
from ansible_collections.gpuops.fleet.plugins.module_utils._server.lock import release
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.mode import MODES, resolve_mode
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.process import ServerError
from ansible_collections.gpuops.fleet.plugins.module_utils._server.record import (
    RecordError, good_config, mark_good, read_record, read_startups, same_process, write_startups)
from ansible_collections.gpuops.fleet.plugins.module_utils._server.startup import adaptive_timeout, launched_here, parse_startup, remember, totals
from ansible_collections.gpuops.fleet.plugins.module_utils._server.unit import main_pid, parse_show, show_argv, start_time, watch_unit


ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "url": {"type": "str", "required": True},
    "model": {"type": "str"},
    "api_key": {"type": "str", "no_log": True},
    "generate_timeout": {"type": "float", "default": 60},
    "pid": {"type": "int"},
    "create_time": {"type": "float"},
    "unit": {"type": "str"},
    "mode": {"type": "str", "choices": list(MODES)},
    "state_file": {"type": "path"},
    "log_file": {"type": "path"},
    "log_lines": {"type": "int", "default": 30},
    "timeout": {"type": "float", "default": 900},
    "since": {"type": "float"},
    "poll_for": {"type": "float", "default": 0},
    "interval": {"type": "float", "default": 0.1},
    # the launch's own wait (vllm_process's waited): the action plugin's, ignored here
    "waited": {"type": "dict"},
    "check": {"type": "dict", "options": {
        "gpus": {"type": "list", "elements": "int", "required": True},
        "tensor_parallel_size": {"type": "int", "required": True},
        "env": {"type": "dict", "default": {}, "no_log": True},
        "secret_env": {"type": "list", "elements": "str", "default": [], "no_log": False},
    }},
    "mark_good": {"type": "dict", "options": {
        "state_file": {"type": "path", "required": True},
        "config": {"type": "dict", "required": True, "no_log": True},
    }},
    "release_lock": {"type": "dict", "options": {
        "path": {"type": "path", "required": True},
        "token": {"type": "str", "required": True, "no_log": False},
    }},
    # the timeout from the last start-ups of this configuration (kept beside the record at state_file), this one kept
    "startup": {"type": "dict", "options": {
        "config_hash": {"type": "str", "required": True},
        "factor": {"type": "float", "default": 2.0},
        "floor": {"type": "float", "default": 60.0},
        "remember": {"type": "bool", "default": True},
        # when this run launched the server: a start-up is kept only for a server that started since (launched_here)
        "launched": {"type": "float"},
    }},
}
# lines of a container's output read for its start-up (its own container: only this start-up's)
STARTUP_LINES = 5000
MUTUALLY_EXCLUSIVE = [("pid", "unit")]
REQUIRED_BY = {"create_time": "pid"}


def check_params(params: t.Mapping[str, t.Any]) -> str:
    """The server's base URL (no trailing slash), once every option is in range; raises SpecError naming option and value."""
    url = http_url("url", params["url"])
    for option, low, high in (("timeout", 0, 86400), ("poll_for", 0, 86400), ("generate_timeout", 0, GENERATE_TIMEOUT_MAX_S),
                              ("interval", 0.01, 60), ("log_lines", 0, 10000)):
        between(option, params[option], low, high)
    if params.get("startup"):
        between("startup.factor", params["startup"]["factor"], 0, 100)
        between("startup.floor", params["startup"]["floor"], 0, 86400)
    return url


class _Failed(Exception):
    """The run fails with ``msg`` and the rest of ``result``: raised where a step ends the run early."""

    def __init__(self, msg: str, **result: t.Any) -> None:
        super().__init__(msg)
        self.result = dict(result, msg=msg)


def validated(given: t.Mapping[str, t.Any], prefix: str) -> t.Dict[str, t.Any]:
    """``given`` (vllm_ready's options, as vllm_process's ``ready``) checked against ARGUMENT_SPEC, defaults filled in, as
    t.Any does for vllm_ready; raises SpecError naming the first bad option under ``prefix``."""
    checked = ArgumentSpecValidator(ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE, required_by=REQUIRED_BY).validate(dict(given))
    if checked.error_messages:
        raise SpecError("%s%s" % (prefix, checked.error_messages[0]))
    return checked.validated_parameters


def no_log_leaves(given: t.Mapping[str, t.Any]) -> t.List[t.Any]:
    """What AnsibleModule hides of vllm_ready's options before any check (api_key, every value of check.env and of
    mark_good.config): for a caller that checks them itself (validated), hidden until run() keeps only the secrets."""
    check = given.get("check") if isinstance(given.get("check"), dict) else {}
    mark = given.get("mark_good") if isinstance(given.get("mark_good"), dict) else {}
    return [leaf for leaf in _leaves([given.get("api_key"), check.get("env"), mark.get("config")]) if leaf not in (None, "")]


def run(module: t.Any, params: t.Dict[str, t.Any]) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """Only the secrets hidden, the options checked, then /health polled until the server is ready, dies, or time runs out."""
    _hide_only_secrets(module, params)
    try:
        url = check_params(params)
        _server_of_mode(params)
    except (SpecError, RecordError) as exc:
        return failure(str(exc))
    now = time.time()
    since = params["since"] if params["since"] is not None else now
    if module.check_mode:
        return {"changed": False, "ready": False, "status": "not polled in check mode", "elapsed_s": 0.0, "since": since, "alive": None,
                "msg": "check mode: not waiting for %s" % url}, [], False
    try:
        return _poll(module, params, url, since)
    except _Failed as exc:
        return exc.result, [], True


def _poll(module, params, url, since):
    """(result, warnings, failed) of polling /health at ``url``; a step that fails the run early raises _Failed."""
    runtime_cli, container_name = _container_server(module, params)
    watcher, created = _watcher(module, params)
    headers = {"Authorization": "Bearer %s" % params["api_key"]} if params["api_key"] else {}
    timeout, timeout_why = _timeout(params)

    def log_tail():
        if runtime_cli and container_name:
            from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.container import logs_tail  # pylint: disable=import-outside-toplevel
            return logs_tail(module.run_command, runtime_cli, container_name, params["log_lines"])
        if params["unit"]:
            return journal_tail(module.run_command, params["unit"], params["log_lines"])
        return file_tail(params["log_file"], params["log_lines"]) if params["log_file"] else []

    def startup():
        return parse_startup(_startup_lines(module, params, runtime_cli, container_name, since), time.time() - since)

    deadline = since + timeout
    call_end = time.time() + params["poll_for"] if params["poll_for"] > 0 else deadline
    status = "not polled yet"
    alive = None
    while True:
        reply = http_get(url + "/health", timeout=2.0)
        status = reply.describe()
        ready = reply.status == 200
        if ready and params["model"]:
            models = http_get(url + "/v1/models", timeout=5.0, headers=headers)
            listed = listed_models(models.body) if models.status == 200 else []
            if models.status == 401:  # up, and a key will not change by waiting: say so now
                return failure("api_key: %s answers /health but refuses /v1/models (HTTP 401): %s" % (
                    url, "it does not accept the API key given" if params["api_key"] else
                    "it was started with an API key (--api-key or VLLM_API_KEY) and none was given"
                    " (the role's vllm_server_api_key)"),
                    ready=False, alive=None, status="HTTP 401 on /v1/models", since=since, changed=False,
                    elapsed_s=round(time.time() - since, 2))
            if params["model"] not in listed:
                ready = False
                status = "HTTP 200 on /health, but /v1/models lists %s, not %s" % (", ".join(listed) or "nothing", params["model"])
        current = time.time()
        result = {"changed": False, "status": status, "since": since, "elapsed_s": round(current - since, 2), "timeout_s": round(timeout, 1)}
        if ready:
            result["startup"] = startup()
            _remember(params, result["startup"], lambda: created if created is not None else _judged(module, params, created)[1])
        if ready and params["generate_timeout"] > 0:
            _generates(params, url, result, log_tail)
        if ready:
            result.update(_after_ready(module, params, created))
            return dict(result, ready=True, alive=True if watcher else None,
                        msg="%s answered /health after %.1f s" % (url, current - since)), [], False
        if watcher is not None:
            alive, why = watcher()
            if not alive:
                result["startup"] = startup()
                return failure("the server %s while starting, after %.1f s (last /health: %s)%s%s; see log_tail"
                               % (why, current - since, status, _port_taken(url), _reached(result["startup"])),
                               ready=False, alive=False, log_tail=log_tail(), **result)
        if current >= deadline:
            result["startup"] = startup()
            return failure("%s was not ready after %g s (%slast /health: %s)%s; see log_tail"
                           % (url, round(timeout, 1), timeout_why + "; " if timeout_why else "", status, _reached(result["startup"])),
                           ready=False, alive=alive, log_tail=log_tail(), **result)
        if current >= call_end:
            return dict(result, ready=False, alive=alive, msg="still waiting for %s (%s)" % (url, status)), [], False
        time.sleep(min(params["interval"], max(0.0, min(deadline, call_end) - current)))


def _timeout(params):
    """(seconds from ``since`` the server has to become ready, why): with O(startup), a multiple of what the last
    start-ups of this configuration took on this host, between its floor and O(timeout); else O(timeout)."""
    wanted = params.get("startup")
    if not wanted or not params["state_file"]:
        return float(params["timeout"]), ""
    history = totals(read_startups(params["state_file"]), wanted["config_hash"])
    timeout, why = adaptive_timeout(history, params["timeout"], wanted["factor"], wanted["floor"])
    return timeout, why if history and why != "vllm_server_ready_timeout" else ""


def _remember(params, startup, started):
    """Keep this start-up beside the record (O(startup.remember)) when the server started since this run launched it
    (``started()`` its start time, read only then); a history that cannot be written changes nothing."""
    wanted = params.get("startup")
    if not wanted or not wanted["remember"] or not params["state_file"] or wanted["launched"] is None:
        return
    if not launched_here(wanted["launched"], started()):
        return
    try:
        write_startups(params["state_file"], remember(read_startups(params["state_file"]), wanted["config_hash"], startup, time.time()))
    except (OSError, RecordError):
        pass


def _reached(startup):
    """', the log's last start-up phase: weights' (vLLM's own lines), or '' when the log names none."""
    if not startup.get("last_phase"):
        return ""
    return ", the log's last start-up phase: %s (%s)" % (startup["last_phase"], startup["line"])


def _startup_lines(module, params, runtime_cli, container_name, since):
    """This start-up's lines of the server's log, by launch mode: the container's output, the unit's journal since
    ``since``, or the log file from the offset the launch recorded."""
    if runtime_cli and container_name:
        from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.container import logs_tail  # pylint: disable=import-outside-toplevel
        return logs_tail(module.run_command, runtime_cli, container_name, STARTUP_LINES)
    if params["unit"]:
        return journal_since(module.run_command, params["unit"], since)
    if not params["log_file"]:
        return []
    offset = None
    if params["state_file"]:
        try:
            record = read_record(params["state_file"]) or {}
        except RecordError:
            record = {}
        if record.get("pid") == params["pid"] and isinstance(record.get("log_offset"), int):
            offset = record["log_offset"]
    return file_since(params["log_file"], offset)


def _leaves(value):
    """Every scalar inside a dict or list (Ansible hides each one of a no_log option's)."""
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _hide_only_secrets(module, params):
    """Ansible hides every value of check.env and mark_good.config (no_log options) wherever it appears; keep only the
    secrets hidden: the values of secret environment names, the secret words of the kept argv (--api-key's value...)
    and api_key. One judgement for both options, so a value one of them shows cannot unhide another's secret."""
    shown, secrets = [], [params["api_key"]]
    extra = (params["check"] or {}).get("secret_env") or []
    envs = [(params["check"] or {}).get("env") or {}]
    if params["mark_good"]:
        config = params["mark_good"]["config"]
        envs.append(config.get("env") or {})
        argv = [str(word) for word in config.get("argv") or []]
        secrets.extend(secret_argv_values(argv))
        shown.extend(argv)
        shown.extend(_leaves({key: value for key, value in config.items() if key not in ("env", "argv")}))
    for env in envs:
        names = secret_env_names(env, extra)
        secrets.extend(env[name] for name in names)
        shown.extend(value for name, value in env.items() if name not in names)
    hide_only_secrets(module, shown, secrets)


def _generates(params, url, result, log_tail):
    """The generation check (one short completion); raises _Failed with the server's answer when no token came."""
    generation = check_generation(url, params["model"], params["generate_timeout"], params["api_key"])
    result["generation"] = generation.as_result()
    if not generation.ok:
        result["elapsed_s"] = round(time.time() - result["since"], 2)
        raise _Failed(generation.describe(url, params["generate_timeout"]), ready=False, alive=None, log_tail=log_tail(), **result)


def _server_of_mode(params):
    """With O(mode), the server to watch in that launch mode: the process of the record at O(state_file), or O(unit)."""
    if not params["mode"]:
        return
    params["mode"] = resolve_mode(params["mode"])
    if params["mode"] == "systemd":
        if not params["unit"]:
            raise SpecError("unit: mode=systemd needs the unit's name, got none")
        params["pid"] = params["create_time"] = None
        return
    params["unit"] = None
    if params["mode"] == "container":
        if not params["state_file"]:
            raise SpecError("state_file: mode=container needs the container's record, got none")
        params["pid"] = params["create_time"] = None
        return
    if params["pid"] is None and params["state_file"]:
        record = read_record(params["state_file"]) or {}
        params["pid"], params["create_time"] = record.get("pid"), record.get("create_time")
        if params["since"] is None:
            params["since"] = params["create_time"]


def _container_server(module, params):
    """With O(mode=container): the container's main process (host PID and start time) into O(pid) and O(create_time),
    read through its runtime as the record at O(state_file) names it; (the runtime's command, the container's name), else
    (None, None). Raises _Failed when the container does not run."""
    if params["mode"] != "container":
        return None, None
    # the container backend, compiled only by a run in the container mode (a module run compiles its imports from source)
    # pylint: disable-next=import-outside-toplevel
    from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.container import logs_tail, main_process
    _deps.require(module, _deps.PSUTIL)
    try:
        pid, created, cli, name = main_process(module, _deps.PSUTIL.module, params["state_file"])
    except (RecordError, ServerError) as exc:
        raise _Failed(str(exc), ready=False) from None
    if pid is None:
        raise _Failed("the container %s of %s does not run (the server exited before the wait began)" % (name, params["state_file"]),
                      ready=False, log_tail=logs_tail(module.run_command, cli, name, params["log_lines"]) if cli and name else [])
    params["pid"], params["create_time"] = pid, created
    return cli, name


def _launch_check(module, params, pid, create_time):
    """The launch check of vllm_server_check, on the server's PID, in a fresh NVML session of this process."""
    wanted = params["check"]
    _deps.require(module, _deps.PYNVML, _deps.PSUTIL)
    return run_launch_check(_deps.PYNVML.module, _deps.PSUTIL.module, pid, create_time, wanted["gpus"],
                            wanted["tensor_parallel_size"], wanted["env"], wanted["secret_env"])


def _judged(module, params, created):
    """(PID, start time) of the server judged ready: O(pid) as watched, or the unit's main PID now."""
    if params["pid"] is not None:
        return params["pid"], created
    if not params["unit"]:
        return None, None
    systemctl = module.get_bin_path("systemctl", required=True)
    rc, out, _err = module.run_command(show_argv(systemctl, params["unit"]))
    pid = main_pid(parse_show(out)) if rc == 0 else None
    psutil = _deps.PSUTIL.module
    return pid, start_time(psutil, pid) if psutil is not None else None


def _after_ready(module, params, created):
    """What follows a ready server in the same process: the launch check, the last known-good mark, the lock's release;
    raises _Failed when the check has no process to judge or the mark cannot be written."""
    pid, create_time = _judged(module, params, created)
    extra = {"pid": pid, "create_time": create_time}
    passed = True
    if params["check"]:
        if pid is None:
            raise _Failed("check: needs the server's process (pid, or a unit with a main PID), got none", ready=True, **extra)
        extra["check"] = _launch_check(module, params, pid, create_time)
        passed = extra["check"]["ok"]
    if params["mark_good"]:
        extra["marked_good"] = False
        if passed and not module.check_mode:
            try:
                config = dict(params["mark_good"]["config"])
                # the mode the server runs in, not "auto"
                config["mode"] = params["mode"] or resolve_mode(str(config.get("mode") or "process"))
                mark_good(params["mark_good"]["state_file"], good_config(config, "mark_good.config"), time.time())
            except RecordError as exc:
                raise _Failed(str(exc), ready=True, **extra) from exc
            extra["marked_good"] = True
    if params["release_lock"]:
        extra["released"] = False
        if passed:
            extra["released"] = release(params["release_lock"]["path"], params["release_lock"]["token"]).released
            if extra["released"]:
                extra["released_token"] = params["release_lock"]["token"]
    return extra


def _port_taken(url):
    """', port N is already in use by PID P (name)' when another process listens on the URL's port, else ''."""
    psutil = _deps.PSUTIL.module
    port = urlsplit(url).port
    if psutil is None or port is None:
        return ""
    try:
        listeners = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]
    except (psutil.Error, OSError):
        return ""
    if not listeners:
        return ""
    owners = []
    for conn in listeners:
        try:
            owners.append("PID %d (%s)" % (conn.pid, psutil.Process(conn.pid).name()) if conn.pid else "a process this user cannot see")
        except psutil.Error:
            owners.append("PID %d" % conn.pid)
    return ", and port %d is already in use by %s" % (port, ", ".join(sorted(set(owners))))


def _watcher(module, params):
    """(a function returning (alive, why_not) for the watched server, or None when nothing is watched; the watched PID's
    start time, or None); raises _Failed when the PID to watch runs no process."""
    if params["pid"] is not None:
        _deps.require(module, _deps.PSUTIL)
        psutil = _deps.PSUTIL.module
        pid = params["pid"]
        created = params["create_time"]
        if created is None:
            try:
                created = psutil.Process(pid).create_time()
            except psutil.Error as exc:
                raise _Failed("pid: no process %d runs (the server exited before the wait began)" % pid, ready=False,
                              log_tail=file_tail(params["log_file"], params["log_lines"]) if params["log_file"] else []) from exc

        def by_pid():
            proc = same_process(psutil, pid, created)
            return (True, "") if proc is not None else (False, "process %d exited" % pid)
        return by_pid, created
    if params["unit"]:
        systemctl = module.get_bin_path("systemctl", required=True)

        def by_unit():
            rc, out, _err = module.run_command(show_argv(systemctl, params["unit"]))
            return watch_unit(params["unit"], parse_show(out) if rc == 0 else {})
        return by_unit, None
    return None, None
