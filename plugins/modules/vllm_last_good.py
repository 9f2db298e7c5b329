#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_last_good
short_description: Keep, and read back, the last known-good configuration of a vLLM server
version_added: 0.2.0
description:
  - A server whose launch passed the ready step and the launch check is I(good). The role C(gpuops.fleet.vllm_server)
    keeps its whole configuration (command line, environment, GPUs, model, launch mode, configuration hash, since when)
    beside the server's record, in C(NAME.last-good), created mode C(0600) since it holds the environment's values.
  - V(read) returns it together with what runs now (the record's configuration hash and whether its process is alive),
    so a rollout can tell whether a host runs the new configuration, the good one, or neither; V(marked) keeps O(config)
    as the new last known-good configuration.
  - The role's C(rollback) entry point launches the configuration read here (O(include_values=true), on a task with
    C(no_log)); playbooks/rollout_vllm.yml marks a configuration good only after its benchmark gate passed.
  - Secrets are never returned unless O(include_values=true). RV(summary) has the argv's secret arguments masked and only
    the environment's names.
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: V(marked) writes nothing and reports the change it would make.
  diff_mode:
    support: none
    description: Nothing to show as a diff.
options:
  state_file:
    description: The server's record (C(vllm_server_state_dir)/C(NAME).json); the last known-good configuration is beside it.
    type: path
    required: true
  state:
    description: V(read) changes nothing; V(marked) keeps O(config) as the last known-good configuration.
    type: str
    choices: [read, marked]
    default: read
  config:
    description:
      - With O(state=marked), the configuration of the running server that passed its checks, with the keys C(argv) (list),
        C(env) (the environment the server was launched with, names to strings), C(gpus) (list of indices),
        C(config_hash), C(container) (in the container mode, how the container ran, as vllm_process's
        O(gpuops.fleet.vllm_process#module:container); else null), and, shown in reports, C(model), C(served_name), C(mode),
        C(tensor_parallel_size), C(port), C(name).
    type: dict
  secret_env:
    description: More names of C(env) in O(config) whose values are secrets, beyond those recognised by their name.
    type: list
    elements: str
    default: []
  mode:
    description:
      - The launch mode the server runs in (V(auto) is systemd when C(/run/systemd/system) exists, else process), returned
        as RV(mode). With O(state=marked), kept as the configuration's C(mode) when O(config) gives none or V(auto).
    type: str
    choices: [auto, process, systemd, container]
    default: auto
  include_values:
    description:
      - With O(state=read), also return RV(config), the whole configuration with the environment's values and the argv's
        secrets. Only for a task with C(no_log), whose result is used to launch the configuration again.
    type: bool
    default: false
requirements:
  - psutil on the managed host.
seealso:
  - module: gpuops.fleet.vllm_process
"""

EXAMPLES = r"""
- name: Read the last known-good configuration and what runs now
  gpuops.fleet.vllm_last_good:
    state_file: /var/lib/gpuops-fleet/vllm/vllm-8000.json
  register: good

- name: Say whether the running server runs it
  ansible.builtin.debug:
    msg: "{{ 'runs the last good configuration' if good.running_is_good else 'runs another configuration' }}"
"""

RETURN = r"""
mode:
  description: The launch mode O(mode) resolves to on this host (V(process), V(systemd) or V(container)).
  returned: always
  type: str
present:
  description: Whether a last known-good configuration is kept for this server.
  returned: always
  type: bool
summary:
  description:
    - The last known-good configuration without any value that may be secret (V(null) when none is kept), with the keys
      C(argv) (secret arguments masked), C(env_keys), C(gpus), C(model), C(served_name), C(mode), C(config_hash),
      C(tensor_parallel_size), C(port), C(name), C(container) (its C(run_options) masked as C(argv)), C(since) (seconds
      since the epoch).
  returned: always
  type: dict
config:
  description: With O(include_values=true), the whole configuration (V(null) when none is kept).
  returned: when include_values
  type: dict
running:
  description: Whether the recorded server process runs (V(null) in systemd mode, whose record names no process).
  returned: always
  type: bool
running_pid:
  description: The recorded server's PID when it runs.
  returned: always
  type: int
running_config_hash:
  description: The configuration hash of the server's record (V(null) without a record).
  returned: always
  type: str
running_is_good:
  description: Whether the record's configuration hash is the last known-good one.
  returned: always
  type: bool
running_startup:
  description:
    - The last start-up of the record's configuration that the ready step kept beside the record (C(NAME.startups)), with
      C(total_s), C(at) (seconds since the epoch) and C(phases) (each with C(name), C(seconds) and C(cache), as
      M(gpuops.fleet.vllm_ready) returns them in RV(gpuops.fleet.vllm_ready#module:startup)); null when none was kept.
  returned: always
  type: dict
"""

import json
import time
import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import failure, finish
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import hide_only_secrets, masked_argv, secret_argv_values, secret_env_names
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.mode import MODES, resolve_mode
from ansible_collections.gpuops.fleet.plugins.module_utils._server.record import (
    GOOD_KEYS, RecordError, good_config, good_summary, mark_good, read_last_good, read_startups, same_process,
)

ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "state_file": {"type": "path", "required": True},
    "state": {"type": "str", "choices": ["read", "marked"], "default": "read"},
    "config": {"type": "dict", "no_log": True},
    "include_values": {"type": "bool", "default": False},
    "secret_env": {"type": "list", "elements": "str", "default": [], "no_log": False},
    "mode": {"type": "str", "choices": list(MODES), "default": "auto"},
}


def _running(state_file: str, psutil: t.Any) -> t.Tuple[t.Optional[bool], t.Optional[int], t.Optional[str]]:
    """(runs, PID, configuration hash) of the server's record; a systemd record names no process (runs: None)."""
    try:
        with open(state_file, "r", encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return False, None, None
    if not isinstance(record, dict):
        return False, None, None
    config_hash = record.get("config_hash") if isinstance(record.get("config_hash"), str) else None
    if not isinstance(record.get("pid"), int) or not isinstance(record.get("create_time"), (int, float)):
        return None, None, config_hash
    proc = same_process(psutil, record["pid"], float(record["create_time"]))
    return proc is not None, (proc.pid if proc is not None else None), config_hash


def _config(raw: t.Optional[t.Mapping[str, t.Any]]) -> t.Dict[str, t.Any]:
    """O(config) in the types kept."""
    if not raw:
        raise RecordError("config: state=marked needs the configuration to keep, got %r" % (raw,))
    return good_config(raw, "config")


def _last_startup(state_file: str, config_hash: t.Optional[str]) -> t.Optional[t.Dict[str, t.Any]]:
    """The last start-up of ``config_hash`` kept beside the record, or None."""
    kept = read_startups(state_file).get(config_hash) if config_hash else None
    return kept[-1] if isinstance(kept, list) and kept and isinstance(kept[-1], dict) else None


def run(module: AnsibleModule) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """Only the secrets hidden, then the record read (and with state=marked, its configuration checked and kept)."""
    params = module.params
    raw = params["config"] or {}
    argv = [str(word) for word in raw.get("argv") or []] if isinstance(raw.get("argv"), list) else []
    env = raw.get("env") if isinstance(raw.get("env"), dict) else {}
    secret_names = secret_env_names(env, params["secret_env"])
    # only the secrets stay hidden in the result: a GPU index or a port that is also a word of argv stays readable
    hide_only_secrets(module, argv + [value for name, value in env.items() if name not in secret_names]
                      + [item for key, value in raw.items() if key not in ("argv", "env")
                         for item in (value if isinstance(value, list) else [value])],
                      secret_argv_values(argv) + [env[name] for name in secret_names])
    _deps.require(module, _deps.PSUTIL)
    psutil = _deps.PSUTIL.module
    state_file = params["state_file"]
    try:
        mode = resolve_mode(params["mode"])
        good = read_last_good(state_file)
        changed = False
        if params["state"] == "marked":
            raw_config = dict(params["config"] or {})
            if raw_config and raw_config.get("mode") in (None, "auto"):
                # the mode the server runs in, not "auto"
                raw_config["mode"] = mode
            wanted = _config(raw_config)
            changed = good is None or any(good.get(key) != wanted.get(key) for key in GOOD_KEYS)
            if changed and not module.check_mode:
                good = mark_good(state_file, wanted, time.time())
            elif changed:
                good = dict(wanted, since=time.time())
    except (RecordError, ValueError) as exc:
        return failure(str(exc))
    runs, pid, running_hash = _running(state_file, psutil)
    result: t.Dict[str, t.Any] = {
        "changed": changed, "mode": mode, "present": good is not None, "summary": good_summary(good, masked_argv),
        "running": runs, "running_pid": pid, "running_config_hash": running_hash,
        "running_is_good": good is not None and running_hash is not None and running_hash == good["config_hash"],
        "running_startup": _last_startup(state_file, running_hash),
    }
    if params["include_values"]:
        result["config"] = good
    return result, [], False


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result, warnings, failed = run(module)
    finish(module, result, warnings, failed)


if __name__ == "__main__":
    main()
