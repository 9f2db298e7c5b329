#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_process
short_description: Run an inference server as a detached process, with a record that makes later stops exact
version_added: 0.2.0
description:
  - Starts a server (for example C(vllm serve MODEL ...)) as a detached process in a session and process group of its own,
    its environment as given, its output appended to a log file, and writes a record (a JSON state file) holding its PID,
    its start time and a hash of its configuration.
  - Later runs trust the record only when the PID still names the process started at the recorded time, so a reused PID is
    never taken for the server, and never signalled.
  - This is the C(process) launch mode of the role C(gpuops.fleet.vllm_server) for hosts without systemd (containers, test
    hosts); the role's C(systemd) mode uses a unit instead.
  - No shell is involved; O(argv) is executed as given, so no value can be turned into shell code.
  - Secrets are never written out or returned. The value of an environment variable whose name has a word KEY, APIKEY,
    TOKEN, SECRET(S), PASSWORD, PASSWD or CREDENTIAL(S) (any case, such as C(HF_TOKEN) or C(VLLM_API_KEY)) or is listed
    in O(secret_env), and the value of an argument such as C(--api-key K), C(--api-key=K) or C(--hf-token K), are shown as
    C(********) in the task's result, in the record and in the launch line of the log. The record and the log are created
    mode C(0600).
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Starts and stops nothing; the task reports the change a real run would make.
  diff_mode:
    support: none
    description: Nothing to show as a diff.
options:
  state:
    description:
      - V(running) starts the server unless the recorded one runs with the same O(config_hash) (then nothing changes). A recorded
        server that runs with another configuration makes the task fail (stop it first).
      - V(stopped) ends the recorded server (SIGTERM, then SIGKILL for its whole tree after O(stop_timeout)) and removes the record.
      - V(status) only reads the record and checks the process.
    type: str
    choices: [running, stopped, status]
    default: status
  state_file:
    description: Path of the record. Each server needs its own.
    type: path
    required: true
  argv:
    description:
      - The command, one word per element. Required with O(state=running).
      - Secret arguments (see the description) are masked wherever the command is shown or recorded; the other words are shown.
    type: list
    elements: str
  env:
    description:
      - Environment variables for the server, added to the environment this task runs with.
      - The values of secret names (see the description and O(secret_env)) are never shown; the other values are.
    type: dict
    default: {}
  secret_env:
    description:
      - More names of O(env) whose values are secrets, beyond those recognised by their name.
    type: list
    elements: str
    default: []
  log_file:
    description: File that receives the server's stdout and stderr (appended). Required with O(state=running).
    type: path
  chdir:
    description: Working directory of the server.
    type: path
  config_hash:
    description:
      - An opaque string that identifies the configuration (the role passes a hash of command, model, sizes, GPUs, arguments
        and environment). Stored in the record; with O(state=running) or O(state=status), compared with the recorded one.
    type: str
  metadata:
    description: Extra facts to keep in the record (for example the port and GPUs), returned by later runs.
    type: dict
    default: {}
  stop_timeout:
    description: Seconds to wait after SIGTERM before the server's remaining tree gets SIGKILL.
    type: float
    default: 30
  health_url:
    description:
      - With O(state=status), also ask this URL (the server's C(/health)) when the recorded server runs, and return RV(healthy),
        so one task tells whether the server runs, with which configuration, and whether it answers.
    type: str
  generate:
    description:
      - With O(state=status), when the recorded server runs, has O(config_hash) and answers O(health_url) (when given) with
        HTTP 200, also send it the generation check of M(gpuops.fleet.vllm_ready) (one short completion, C(POST /v1/completions))
        and return RV(generates) and RV(generation). vLLM's API server answers C(/health) while its engine core is dead, so a
        reading that decides whether a running server is left alone needs a completion too.
      - The reading and the check in one task save the host a module start-up.
    type: dict
    suboptions:
      url:
        description: Base URL of the server, for example V(http://127.0.0.1:8000).
        type: str
        required: true
      model:
        description: The model to ask (the server's served model name).
        type: str
      api_key:
        description: Sent as C(Authorization Bearer) with the completion; never shown or returned.
        type: str
      timeout:
        description: Seconds the completion may take; V(0) skips the check.
        type: float
        default: 60
  drain_url:
    description:
      - With O(state=stopped), the server's base URL (for example V(http://127.0.0.1:8000)); before the stop, wait up to
        O(drain_timeout) seconds until its C(/metrics) shows no request running or waiting, as M(gpuops.fleet.vllm_drain) does,
        and return RV(drained). Only when the recorded server runs; in check mode the metrics are read once.
      - The drain and the stop in one task save the host a module start-up in a restart.
    type: str
  drain_timeout:
    description: Seconds the drain before the stop waits at most (see O(drain_url)); the requests still in flight then are cut.
    type: float
    default: 60
  takeover:
    description:
      - With O(state=stopped), stop this process instead of the recorded server - a server taken over, found listening on
        the server's port (M(gpuops.fleet.vllm_listener)) but never launched by this module. It is drained first with
        O(drain_url), then its whole tree is stopped as the recorded server's is (SIGTERM, then SIGKILL after
        O(stop_timeout)); its parent (a shell, tmux, screen) is not signalled. The record, if any, is left as it is.
      - A process that no longer runs with this start time is not stopped (RV(stopped) is empty).
    type: dict
    suboptions:
      pid:
        description: Its PID.
        type: int
        required: true
      create_time:
        description: Its start time (seconds since the epoch, as psutil reads it); another process with the PID is never signalled.
        type: float
        required: true
requirements:
  - psutil on the managed host.
seealso:
  - module: gpuops.fleet.vllm_ready
  - module: gpuops.fleet.gpu_reclaim
"""

EXAMPLES = r"""
- name: Launch vLLM on GPUs 0-3 as a detached process
  gpuops.fleet.vllm_process:
    state: running
    state_file: /var/lib/gpuops-fleet/vllm/vllm-8000.json
    log_file: /var/log/gpuops-fleet/vllm-8000.log
    argv: [vllm, serve, meta-llama/Llama-3.1-70B-Instruct, --tensor-parallel-size, "4", --port, "8000"]
    env:
      CUDA_VISIBLE_DEVICES: "0,1,2,3"
      NCCL_PROTO: LL
  register: launched

- name: Stop it (by recorded PID and start time)
  gpuops.fleet.vllm_process:
    state: stopped
    state_file: /var/lib/gpuops-fleet/vllm/vllm-8000.json
"""

RETURN = r"""
running:
  description: Whether the recorded server runs at the end of the task (in check mode, whether it would).
  returned: always
  type: bool
pid:
  description: PID of the server (null when none runs).
  returned: always
  type: int
  sample: 41234
create_time:
  description: Start time of the server process (seconds since the epoch, as psutil reads it).
  returned: always
  type: float
config_hash:
  description: The configuration hash of the record (null without a record).
  returned: always
  type: str
config_matches:
  description: Whether O(config_hash) equals the recorded one (null when either is missing).
  returned: always
  type: bool
launched:
  description: Whether this task started the server.
  returned: always
  type: bool
log_file:
  description: The server's log file (from the record when there is one).
  returned: always
  type: str
healthy:
  description: With O(health_url), whether the running server answered it with HTTP 200 (null when not asked or not running).
  returned: always
  type: bool
health:
  description: With O(health_url), its answer, such as V(HTTP 200), V(HTTP 503) or V(connection refused) (null when not asked).
  returned: always
  type: str
generates:
  description:
    - With O(generate), whether the running server answered the short completion with tokens in time (null when not asked,
      that is without O(generate), with its timeout V(0), or for a server that does not run, has another configuration or fails
      O(health_url)).
  returned: always
  type: bool
generation:
  description:
    - With O(generate), the completion as M(gpuops.fleet.vllm_ready) returns it (C(ok), C(tokens), C(elapsed_s), C(status), and
      on failure C(problem) and C(answer), trimmed, the API key masked); null when not asked.
  returned: always
  type: dict
record:
  description:
    - The record as found at the start of the task (null when there was none). Its C(argv) has secret arguments masked and
      its C(env_keys) lists the names of the environment, never a value.
  returned: always
  type: dict
env_keys:
  description: The names of O(env) (every value stays on the host).
  returned: always
  type: list
  elements: str
  sample: [CUDA_VISIBLE_DEVICES, HF_TOKEN, NCCL_PROTO]
secret_env_keys:
  description: The names of O(env) whose values are treated as secrets.
  returned: always
  type: list
  elements: str
  sample: [HF_TOKEN]
stopped:
  description: With O(state=stopped), each process of the server's tree that ended.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID.
      type: int
      returned: always
    name:
      description: Name (process title where one is set, such as C(VLLM::Worker_TP0)).
      type: str
      returned: always
    signal:
      description: The signal this task sent it before it exited, or V(null) when it exited after its server was signalled.
      type: str
      returned: always
    seconds:
      description: Seconds from the stop's first signal to its exit.
      type: float
      returned: always
drained:
  description:
    - With O(state=stopped) and O(drain_url), when the recorded server ran, the drain before the stop, with the keys that
      M(gpuops.fleet.vllm_drain) returns (C(answered), C(running_at_start), C(cut), C(drained), C(waited_s), C(msg)).
  returned: when drained
  type: dict
"""

import os
import time
import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError, between, http_url
from ansible_collections.gpuops.fleet.plugins.module_utils._server.generation import GENERATE_OPTIONS, GENERATE_TIMEOUT_MAX_S
from ansible_collections.gpuops.fleet.plugins.module_utils._server.answers import drain
from ansible_collections.gpuops.fleet.plugins.module_utils._server.process import LaunchError, launch_detached, read_status, stop_tree
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import (
    hide_only_secrets, masked_argv, secret_argv_values, secret_env_names,
)
from ansible_collections.gpuops.fleet.plugins.module_utils._server.record import (
    RecordError, carry_last_good, recorded_process, remove_record, same_process, string_env, write_record,
)


ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "state": {"type": "str", "choices": ["running", "stopped", "status"], "default": "status"},
    "state_file": {"type": "path", "required": True},
    "argv": {"type": "list", "elements": "str", "no_log": True},
    "env": {"type": "dict", "default": {}, "no_log": True},
    "secret_env": {"type": "list", "elements": "str", "default": [], "no_log": False},
    "log_file": {"type": "path"},
    "chdir": {"type": "path"},
    "config_hash": {"type": "str"},
    "metadata": {"type": "dict", "default": {}},
    "stop_timeout": {"type": "float", "default": 30},
    "health_url": {"type": "str"},
    "drain_url": {"type": "str"},
    "drain_timeout": {"type": "float", "default": 60},
    "takeover": {"type": "dict", "options": {"pid": {"type": "int", "required": True}, "create_time": {"type": "float", "required": True}}},
    "generate": {"type": "dict", "options": GENERATE_OPTIONS},
}


def check_params(params: t.Mapping[str, t.Any], argv: t.Sequence[str]) -> None:
    """Raises SpecError naming the option and the value when one cannot be used."""
    if params["state"] == "running" and not argv:
        raise SpecError("argv: the command must have at least one word, got %r" % (list(argv),))
    between("stop_timeout", params["stop_timeout"], 0, 3600, "seconds")
    between("drain_timeout", params["drain_timeout"], 0, 86400, "seconds")
    if params["drain_url"] is not None:
        http_url("drain_url", params["drain_url"])
    if params["takeover"] is not None:
        between("takeover.pid", params["takeover"]["pid"], 2, 2 ** 22, "")
    if params["generate"]:
        http_url("generate.url", params["generate"]["url"])
        between("generate.timeout", params["generate"]["timeout"], 0, GENERATE_TIMEOUT_MAX_S, "seconds")


def _environment(extra):
    env = dict(os.environ)
    env.update(string_env(extra))
    return env


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "running", ["argv", "log_file"])],
        supports_check_mode=True,
    )
    params = module.params
    argv = params["argv"] or []
    secret_names = secret_env_names(params["env"], params["secret_env"])
    hide_only_secrets(module, list(argv) + [value for name, value in params["env"].items() if name not in secret_names],
                      secret_argv_values(argv) + [params["env"][name] for name in secret_names])
    shown_argv = masked_argv(argv)
    try:
        check_params(params, argv)
    except SpecError as exc:
        module.fail_json(msg=str(exc))
    _deps.require(module, _deps.PSUTIL)
    psutil = _deps.PSUTIL.module
    wanted = params["config_hash"]
    try:
        # /health (and a completion) only for state=status: the other states act on the record, whatever the server answers
        reading = params["state"] == "status"
        # a server taken over is stopped whatever the record holds (in systemd mode, the role's unit configuration record,
        # not a process record): its record is neither read nor touched
        taking_over = params["takeover"] is not None and params["state"] == "stopped"
        status = read_status(psutil, None if taking_over else params["state_file"], wanted, params["health_url"] if reading else None,
                             params["generate"] if reading else None)
    except RecordError as exc:
        module.fail_json(msg=str(exc))
    record = status["record"]
    taken = params["takeover"]
    if taking_over:
        # a server taken over: this process, not the record's (status read none)
        proc = same_process(psutil, taken["pid"], taken["create_time"])
    else:
        proc = recorded_process(psutil, record)
    recorded_hash = status["config_hash"]
    result = dict(status, changed=False, launched=False, stopped=[],
                  log_file=(record or {}).get("log_file") or params["log_file"],
                  env_keys=sorted(params["env"]), secret_env_keys=secret_names)
    if params["state"] == "status":
        module.exit_json(**result)

    if params["state"] == "stopped":
        if params["drain_url"] and proc is not None:
            # the requests in flight finish first (read once in check mode): the stop and its drain in one task
            result["drained"] = drain(params["drain_url"].rstrip("/"), params["drain_timeout"], 0.5, wait=not module.check_mode)
            if result["drained"]["cut"] and not module.check_mode:
                module.warn(result["drained"]["msg"] + ": a restart now cuts them")
        if proc is None:
            if record is not None and not module.check_mode:
                remove_record(params["state_file"])
                result["msg"] = "the recorded server (PID %s) no longer runs; record removed" % record.get("pid")
            module.exit_json(**result)
        result["changed"] = True
        if module.check_mode:
            result["running"] = False
            module.exit_json(msg="would stop PID %d" % proc.pid, **result)
        stopped = stop_tree(psutil, proc, params["stop_timeout"])
        result["stopped"] = [s._asdict() for s in stopped]
        still = same_process(psutil, taken["pid"], taken["create_time"]) if taken is not None else recorded_process(psutil, record)
        if still is not None:
            module.fail_json(msg="PID %d survived SIGTERM and SIGKILL (state %s)" % (still.pid, still.status()), **result)
        if taken is None:
            remove_record(params["state_file"])
        result.update(running=False, pid=None, create_time=None)
        module.exit_json(msg="stopped PID %d and %d process(es) of its tree" % (proc.pid, max(0, len(stopped) - 1)), **result)

    # state == running
    if proc is not None:
        if wanted is not None and recorded_hash != wanted:
            module.fail_json(msg="PID %d already runs from %s with another configuration (hash %s, wanted %s): stop it first"
                             % (proc.pid, params["state_file"], recorded_hash, wanted), **result)
        module.exit_json(msg="PID %d already runs with this configuration" % proc.pid, **result)
    result["changed"] = True
    if module.check_mode:
        result["running"] = True
        module.exit_json(msg="would launch %s" % " ".join(shown_argv), **result)
    try:
        pid = launch_detached(argv, _environment(params["env"]), params["log_file"], params["chdir"], shown_argv=shown_argv)
    except LaunchError as exc:
        module.fail_json(msg="argv: %s" % exc, **result)
    try:
        create_time = psutil.Process(pid).create_time()
    except psutil.Error:
        module.fail_json(msg="the server (PID %d) exited at once; see %s" % (pid, params["log_file"]), **result)
    new_record = {
        "pid": pid, "create_time": create_time, "config_hash": wanted, "argv": shown_argv,
        "env_keys": sorted(params["env"]), "log_file": params["log_file"], "launched_at": time.time(),
        "metadata": params["metadata"],
        # the last known-good configuration (beside the record) by hash and since when: no value of it
        "last_good": carry_last_good(params["state_file"]),
    }
    write_record(params["state_file"], new_record)
    result.update(running=True, pid=pid, create_time=create_time, config_hash=wanted, config_matches=True if wanted else None,
                  launched=True, log_file=params["log_file"])
    module.exit_json(msg="launched PID %d" % pid, **result)


if __name__ == "__main__":
    main()
