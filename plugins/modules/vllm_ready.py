#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_ready
short_description: Wait until a just-launched vLLM server is ready, check it, keep it as last known-good, release its lock
version_added: 0.2.0
description:
  - The end of a launch, in one module run on the host - four jobs, each after the one before succeeded - (1) wait until
    the server is ready and generates, (2) with O(check), check that it is the server that was launched (its own workers
    hold its GPUs, with its environment), (3) with O(mark_good), keep its configuration as the last known-good one, (4) with
    O(release_lock), release the run's lock. A failure at any of them leaves the later ones undone (the lock kept, for the
    undo). They share one module start-up because a restart's budget on the host is six module runs.
  - Polls C(GET /health) of the server every O(interval) seconds until it answers HTTP 200, then, with O(model), until
    C(/v1/models) lists that model.
  - Watches the server while it waits (the process O(pid) started at O(create_time), the systemd O(unit), or the container's main
    process with O(mode=container)); when it dies the task fails at once, not at the timeout, with the last lines of its log
    (O(log_file), the unit's journal, or the container's output).
  - Fails after O(timeout) seconds counted from O(since), with the log's last lines and the last answer of C(/health).
  - Once C(/health) and C(/v1/models) answer, sends one short completion (a few tokens, C(POST /v1/completions)) and fails unless
    it comes back with tokens within O(generate_timeout) seconds. vLLM's API server answers C(/health) and C(/v1/models) while its
    engine core is dead or hung, so only a request that generates proves the server serves.
  - The action plugin of the same name calls this module in steps of at most O(poll_for) seconds and prints, between steps,
    what it waits for and for how long, so a start-up that takes minutes is not one silent task.
  - Every request goes straight to O(url) from the managed host, not through a proxy set in its environment, and an
    C(https) URL's certificate is checked against the host's CA store.
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Waits for nothing in check mode and says so (a server a check run did not start cannot become ready).
  diff_mode:
    support: none
    description: Nothing to show as a diff.
  action:
    support: full
    description: The action plugin repeats the module and reports progress on the controller.
options:
  url:
    description: Base URL of the server, for example V(http://127.0.0.1:8000).
    type: str
    required: true
  model:
    description: When set, also wait until C(/v1/models) lists this model id.
    type: str
  api_key:
    description:
      - Sent as C(Authorization Bearer) with the C(/v1/models) request, for a server started with C(--api-key) or C(VLLM_API_KEY)
        (which answers C(/v1/*) with HTTP 401 without it; C(/health) needs no key). Never shown or returned.
      - When the server answers C(/health) but refuses C(/v1/models) with HTTP 401, the task fails at once, naming this option.
      - Sent with the generation check's completion too.
    type: str
  generate_timeout:
    description:
      - Seconds the generation check waits for its completion (a few tokens, C(POST /v1/completions) with O(model), not streamed,
        once the server answers C(/health) and lists O(model)).
      - The task fails, naming the generation check and the server's answer (trimmed, the API key masked), when the completion is not
        answered in time, or with an HTTP error such as 500 (the answer of a vLLM whose engine core died, C(EngineDeadError)), an
        error body, or no generated token; nothing after the ready step runs then (no O(check), no O(mark_good), the lock is kept).
      - V(0) skips the generation check (a server that cannot generate, such as an embedding model).
    type: float
    default: 60
  pid:
    description: PID of the server process to watch (the process-mode server, or a systemd unit's main PID).
    type: int
  create_time:
    description: Start time of O(pid) (seconds since the epoch, as psutil reads it), so a reused PID is not taken for the server.
    type: float
  unit:
    description:
      - A systemd unit to watch instead of a PID; the task fails as soon as it is no longer active or activating, or as soon as
        its server died and systemd waits to restart it (C(Restart=on-failure)), naming the crash loop (restarts, last exit).
    type: str
  log_file:
    description: The server's log file, whose last lines are shown on failure.
    type: path
  log_lines:
    description: How many log lines to show on failure.
    type: int
    default: 30
  timeout:
    description: Seconds, counted from O(since), before the task fails. Real TP=8 start-ups take minutes.
    type: float
    default: 900
  since:
    description: When the wait started (seconds since the epoch on the managed host); default the start of this task.
    type: float
  poll_for:
    description: At most this many seconds in this call; V(0) waits until ready or O(timeout).
    type: float
    default: 0
  interval:
    description: Seconds between two polls of C(/health).
    type: float
    default: 0.1
  check:
    description:
      - Once the server is ready, run the launch check of M(gpuops.fleet.vllm_server_check) on O(pid), or with O(unit) on the
        unit's main PID read once it is ready (with O(mode=container), the container's main process), in the same process
        (a fresh NVML session of its own, joined with the server's process tree) and return it as RV(check). The task does
        not fail on the check; the role's own task judges RV(check) and names what did not hold.
      - The ready step and its check in one task save the host a module start-up in a restart.
    type: dict
    suboptions:
      gpus:
        description:
          - Indices of the GPUs the server was given (as in C(CUDA_VISIBLE_DEVICES)).
        type: list
        elements: int
        required: true
      tensor_parallel_size:
        description: How many GPU-holding workers the server must have.
        type: int
        required: true
      env:
        description: Environment variables the server process must have, with these values (secret values never shown).
        type: dict
        default: {}
      secret_env:
        description: More names of O(check.env) whose values are secrets, beyond those recognised by their name.
        type: list
        elements: str
        default: []
  mark_good:
    description:
      - When O(check) held, keep this configuration as the server's last known-good one, as M(gpuops.fleet.vllm_last_good)
        with O(gpuops.fleet.vllm_last_good#module:state=marked) does (C(NAME.last-good) beside the record, mode 0600), and
        return RV(marked_good).
    type: dict
    suboptions:
      state_file:
        description: The server's record; the last known-good configuration is kept beside it.
        type: path
        required: true
      config:
        description: The configuration to keep (argv, env, gpus, config_hash, model, served_name, mode, tensor_parallel_size, port, name).
        type: dict
        required: true
  mode:
    description:
      - The launch mode of the server to watch, instead of O(pid) or O(unit) alone (V(auto) is systemd when C(/run/systemd/system)
        exists, else process). V(process) watches the process of the record at O(state_file) (its PID and start time);
        V(systemd) watches O(unit) (its main PID for O(check)); V(container) watches the main process (as the host numbers
        it) of the container that the record at O(state_file) names, read through its runtime (C(inspect)).
      - The last known-good configuration of O(mark_good) is kept with this mode.
    type: str
    choices: [auto, process, systemd, container]
  state_file:
    description: With O(mode=process) and no O(pid), or O(mode=container), the record (JSON) of the server, as M(gpuops.fleet.vllm_process) writes it.
    type: path
  release_lock:
    description:
      - When the server is ready and O(check) (if given) held, release this run's lock of the server (as
        M(gpuops.fleet.vllm_lock) with O(gpuops.fleet.vllm_lock#module:state=unlocked)) and return RV(released). On any
        failure the lock is left held, for the caller to undo the launch under it and release it.
    type: dict
    suboptions:
      path:
        description: The lock file.
        type: path
        required: true
      token:
        description: The run's token; only a lock it holds is released.
        type: str
        required: true
requirements:
  - psutil on the managed host, to watch O(pid).
  - nvidia-ml-py and the NVIDIA driver's C(libnvidia-ml.so.1), with O(check).
seealso:
  - module: gpuops.fleet.vllm_process
"""

EXAMPLES = r"""
- name: Wait for an embedding server (it cannot generate, so no generation check)
  gpuops.fleet.vllm_ready:
    url: http://127.0.0.1:8001
    model: BAAI/bge-m3
    generate_timeout: 0

- name: Wait for the server launched by vllm_process, failing early if it dies
  gpuops.fleet.vllm_ready:
    url: http://127.0.0.1:8000
    model: meta-llama/Llama-3.1-70B-Instruct
    pid: "{{ launched.pid }}"
    create_time: "{{ launched.create_time }}"
    log_file: "{{ launched.log_file }}"
    timeout: 1200
"""

RETURN = r"""
ready:
  description: Whether the server answered /health with 200 (and listed O(model)).
  returned: always
  type: bool
status:
  description: The last answer of /health, such as V(HTTP 503) or V(connection refused).
  returned: always
  type: str
elapsed_s:
  description: Seconds since O(since).
  returned: always
  type: float
since:
  description: The start of the wait (seconds since the epoch on the managed host); pass it to the next call.
  returned: always
  type: float
alive:
  description: Whether the watched server still ran at the last poll (null when nothing is watched).
  returned: always
  type: bool
generation:
  description:
    - The generation check's completion once the server was ready, with C(ok), C(tokens) (generated, as the server counted them),
      C(elapsed_s), C(status) (its HTTP status, null when none came), and on failure C(problem) and C(answer) (the server's answer,
      trimmed, the API key masked).
  returned: when the server answered /health and listed O(model), and O(generate_timeout) is above 0
  type: dict
log_tail:
  description: The last lines of the server's log, on failure.
  returned: failure
  type: list
  elements: str
check:
  description:
    - With O(check), once ready, the launch check with the keys that M(gpuops.fleet.vllm_server_check) returns (C(ok), C(checks),
      C(workers)) and its C(msg).
  returned: when ready and O(check) is given
  type: dict
marked_good:
  description: With O(mark_good), whether the configuration was kept as the last known-good one (V(false) when the check failed).
  returned: when ready and O(mark_good) is given
  type: bool
released:
  description: With O(release_lock), whether this task released the lock.
  returned: when ready and O(release_lock) is given
  type: bool
released_token:
  description: With O(release_lock), the token of the lock this task released.
  returned: when this task released the lock
  type: str
pid:
  description:
    - The PID of the server judged ready (O(pid), or the main PID of O(unit) once ready); null when neither is given or the
      unit has no main process.
  returned: when ready
  type: int
create_time:
  description: That process's start time (seconds since the epoch, as psutil reads it); null when unknown.
  returned: when ready
  type: float
"""

import time
import typing as t
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError, between, failure, finish, http_url
from ansible_collections.gpuops.fleet.plugins.module_utils._server.log_tail import file_tail, journal_tail
from ansible_collections.gpuops.fleet.plugins.module_utils._http.request import http_get
from ansible_collections.gpuops.fleet.plugins.module_utils._server.answers import listed_models
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import hide_only_secrets, secret_argv_values, secret_env_names
from ansible_collections.gpuops.fleet.plugins.module_utils._server.check import run_launch_check
from ansible_collections.gpuops.fleet.plugins.module_utils._server.generation import GENERATE_TIMEOUT_MAX_S, check_generation
from ansible_collections.gpuops.fleet.plugins.module_utils._server.lock import release
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.mode import MODES, resolve_mode
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.process import ServerError
from ansible_collections.gpuops.fleet.plugins.module_utils._server.record import RecordError, good_config, mark_good, read_record, same_process
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
}


def check_params(params: t.Mapping[str, t.Any]) -> str:
    """The server's base URL (no trailing slash), once every option is in range; raises SpecError naming option and value."""
    url = http_url("url", params["url"])
    for option, low, high in (("timeout", 0, 86400), ("poll_for", 0, 86400), ("generate_timeout", 0, GENERATE_TIMEOUT_MAX_S),
                              ("interval", 0.01, 60), ("log_lines", 0, 10000)):
        between(option, params[option], low, high)
    return url


class _Failed(Exception):
    """The run fails with ``msg`` and the rest of ``result``: raised where a step ends the run early."""

    def __init__(self, msg: str, **result: t.Any) -> None:
        super().__init__(msg)
        self.result = dict(result, msg=msg)


def run(module: AnsibleModule) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """Only the secrets hidden, the options checked, then /health polled until the server is ready, dies, or time runs out."""
    params = module.params
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

    def log_tail():
        if runtime_cli and container_name:
            from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.container import logs_tail  # pylint: disable=import-outside-toplevel
            return logs_tail(module.run_command, runtime_cli, container_name, params["log_lines"])
        if params["unit"]:
            return journal_tail(module.run_command, params["unit"], params["log_lines"])
        return file_tail(params["log_file"], params["log_lines"]) if params["log_file"] else []

    deadline = since + params["timeout"]
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
        result = {"changed": False, "status": status, "since": since, "elapsed_s": round(current - since, 2)}
        if ready and params["generate_timeout"] > 0:
            _generates(params, url, result, log_tail)
        if ready:
            result.update(_after_ready(module, params, created))
            return dict(result, ready=True, alive=True if watcher else None,
                        msg="%s answered /health after %.1f s" % (url, current - since)), [], False
        if watcher is not None:
            alive, why = watcher()
            if not alive:
                return failure("the server %s while starting, after %.1f s (last /health: %s)%s; see log_tail"
                               % (why, current - since, status, _port_taken(url)),
                               ready=False, alive=False, log_tail=log_tail(), **result)
        if current >= deadline:
            return failure("%s was not ready after %g s (last /health: %s); see log_tail" % (url, params["timeout"], status),
                           ready=False, alive=alive, log_tail=log_tail(), **result)
        if current >= call_end:
            return dict(result, ready=False, alive=alive, msg="still waiting for %s (%s)" % (url, status)), [], False
        time.sleep(min(params["interval"], max(0.0, min(deadline, call_end) - current)))


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


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=[("pid", "unit")],
        required_by={"create_time": "pid"},
        supports_check_mode=True,
    )
    result, warnings, failed = run(module)
    finish(module, result, warnings, failed)


if __name__ == "__main__":
    main()
