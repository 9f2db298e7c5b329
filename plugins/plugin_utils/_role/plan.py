# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The plan of one run of the vllm_server role, from its variables, on the controller: what the server is (GPUs, argv,
environment, configuration hash, container), where its files are, how it is reached, and what every step's module is
given. The role computes it once per host and run (the ``plan`` entry point); its tasks and the playbooks read it.

A rollback passes the last known-good configuration (``good``): the server's argv, environment, GPUs, served name,
model and container then come from it, never from the variables, so that a new configuration given as extra vars
cannot leak into the rollback.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import hashlib
import json
import typing as t

from ansible_collections.gpuops.fleet.plugins.plugin_utils._masked_env import masked_env
from ansible_collections.gpuops.fleet.plugins.plugin_utils._names import CHECK, IDLE_THRESHOLD, ROLE_OLD, STATE, settle
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role import caches as server_caches
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role import group as groups
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role import lora
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.rules import broken
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.values import mapping, text, to_bool, to_float, to_int, words
from ansible_collections.gpuops.fleet.plugins.plugin_utils._secret_argv import argv_with_secrets

CONTAINER = "container"
# what of the container's spec is the run's, not the configuration's (a new port or GPU list is a new argv or env anyway)
NOT_HASHED = ("name", "env_file", "gpus", "port")


# the role's variables that the plan reads (its defaults, meta/argument_specs.yml); the benchmark's are the benchmark's
VARIABLES = (
    "vllm_server_state", "vllm_server_model", "vllm_server_served_model_name", "vllm_server_tensor_parallel_size",
    "vllm_server_port", "vllm_server_gpus", "vllm_server_env", "vllm_server_host_env", "vllm_server_env_overrides",
    "vllm_server_args", "vllm_server_command", "vllm_server_launch_mode", "vllm_server_ready_timeout",
    "vllm_server_ready_timeout_factor", "vllm_server_ready_timeout_floor",
    "vllm_server_ready_generate_timeout", "vllm_server_name", "vllm_server_state_dir",
    "vllm_server_log_dir", "vllm_server_health_host", "vllm_server_drain", "vllm_server_drain_timeout",
    "vllm_server_stop_timeout", "vllm_server_reclaim_all_holders", "vllm_server_reclaim_match", "vllm_server_reclaim_grace",
    "vllm_server_reclaim_timeout", "gpuops_fleet_idle_threshold_mib", "vllm_server_takeover_units",
    "vllm_server_check", "vllm_server_keep_failed_server", "vllm_server_lock_stale_after", "vllm_server_systemd_unit",
    "vllm_server_systemd_user", "vllm_server_systemd_enabled", "vllm_server_systemd_restart_sec",
    "vllm_server_systemd_start_limit_interval_sec", "vllm_server_systemd_start_limit_burst", "vllm_server_container_image",
    "vllm_server_container_runtime", "vllm_server_container_name", "vllm_server_container_cdi_kind",
    "vllm_server_container_network", "vllm_server_container_volumes", "vllm_server_container_run_options",
    "vllm_server_container_restart", "vllm_server_secret_env", "vllm_server_api_key", "vllm_server_allow_open",
    "vllm_server_mark_good", "vllm_server_cache_dir", lora.VARIABLE,
) + groups.VARIABLES + ROLE_OLD


# what the preflight's refusal may name (the gpu_reclaim option behind each, preflight.py)
GIVEN = ("vllm_server_gpus", "vllm_server_tensor_parallel_size", "vllm_server_reclaim_match", "vllm_server_reclaim_grace",
         "vllm_server_reclaim_timeout", "gpuops_fleet_idle_threshold_mib")


class PlanError(ValueError):
    """The variables break the role's rules; ``problems`` holds one message per rule."""

    def __init__(self, problems: t.List[str]) -> None:
        super().__init__("vllm_server: bad variables (nothing was stopped or touched): %s." % "; ".join(problems))
        self.problems = problems


def _unset(value: t.Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def settled(variables: t.Mapping[str, t.Any]) -> t.Tuple[t.Dict[str, t.Any], t.List[str]]:
    """The variables under their current names, and a deprecation warning for each old name that is set
    (_names.ROLE_OLD): vllm_server_state with vllm_server_force_restart, vllm_server_check with vllm_server_verify_launch,
    gpuops_fleet_idle_threshold_mib with vllm_server_memory_threshold_mib. An unset vllm_server_tensor_parallel_size is
    the length of a non-empty vllm_server_gpus (no silent 1: with neither, the rules refuse)."""
    values, warnings = settle(variables, ROLE_OLD)
    out = {name: value for name, value in variables.items() if name not in ROLE_OLD}
    out.update({STATE: values["state"], CHECK: values["check"], IDLE_THRESHOLD: values["idle_threshold_mib"]})
    listed = out.get("vllm_server_gpus")
    if _unset(out.get("vllm_server_tensor_parallel_size")) and isinstance(listed, (list, tuple)) and listed:
        out["vllm_server_tensor_parallel_size"] = len(listed)
    return out, warnings


def server_gpus(variables: t.Mapping[str, t.Any], good: t.Optional[t.Mapping[str, t.Any]], workers: t.Optional[int] = None) -> t.List[int]:
    """The GPUs of the server on this host: the good configuration's, vllm_server_gpus, else 0 to ``workers`` - 1 (the
    host's share of a server across hosts) or to vllm_server_tensor_parallel_size - 1."""
    if good:
        return [to_int(gpu) for gpu in good.get("gpus") or []]
    listed = variables.get("vllm_server_gpus")
    if isinstance(listed, (list, tuple)) and listed:
        return [to_int(gpu) for gpu in listed]
    if workers is not None:
        return list(range(workers))
    if _unset(variables.get("vllm_server_tensor_parallel_size")):
        return []
    return list(range(max(to_int(variables.get("vllm_server_tensor_parallel_size")), 0)))


def server_argv(variables: t.Mapping[str, t.Any], node_flags: t.Sequence[str] = ()) -> t.List[str]:
    """The command, the model, the role's flags (a node's place in a server across hosts among them), the operator's."""
    return (words(variables.get("vllm_server_command"))
            + [text(variables.get("vllm_server_model")), "--tensor-parallel-size", text(variables.get("vllm_server_tensor_parallel_size")),
               "--port", text(variables.get("vllm_server_port"))]
            + list(node_flags) + words(variables.get("vllm_server_args")))


def server_env(variables: t.Mapping[str, t.Any], visible: str, node_env: t.Optional[t.Mapping[str, t.Any]] = None) -> t.Dict[str, t.Any]:
    """vllm_server_env_overrides over vllm_server_env over vllm_server_host_env over the node's own (VLLM_HOST_IP of a
    server across hosts), one variable each; CUDA_VISIBLE_DEVICES last."""
    env = dict(node_env or {})
    env.update(mapping(variables.get("vllm_server_host_env")))
    env.update(mapping(variables.get("vllm_server_env")))
    env.update(mapping(variables.get("vllm_server_env_overrides")))
    env["CUDA_VISIBLE_DEVICES"] = visible
    return env


def env_shown(env: t.Mapping[str, t.Any], secret_env: t.Iterable[str]) -> t.List[str]:
    """NAME=value of each variable, secrets masked, sorted by name without case (as the dictsort filter)."""
    shown = masked_env(env, [str(name) for name in secret_env])
    return ["%s=%s" % (name, value) for name, value in sorted(shown.items(), key=lambda item: str(item[0]).lower())]


def files(variables: t.Mapping[str, t.Any]) -> t.Dict[str, str]:
    name, state_dir = text(variables.get("vllm_server_name")), text(variables.get("vllm_server_state_dir"))
    log_dir = text(variables.get("vllm_server_log_dir")) or state_dir
    return {
        "state": "%s/%s.json" % (state_dir, name),
        "lock": "%s/%s.lock" % (state_dir, name),
        "log": "%s/%s.log" % (log_dir, name),
        "env": "%s/%s.env" % (state_dir, name),
        "unit": text(variables.get("vllm_server_systemd_unit")) or "gpuops-%s.service" % name,
    }


def container_spec(variables: t.Mapping[str, t.Any], good: t.Optional[t.Mapping[str, t.Any]], gpus: t.List[int],
                   env_file: str) -> t.Dict[str, t.Any]:
    """The container mode's whole spec; a rollback runs the container as the good configuration ran it (its image, runtime,
    volumes, ...), with this run's name, GPUs, port and environment file."""
    spec = {
        "runtime": text(variables.get("vllm_server_container_runtime")) or None,
        "image": variables.get("vllm_server_container_image"),
        "cdi_kind": variables.get("vllm_server_container_cdi_kind"),
        "network": variables.get("vllm_server_container_network"),
        "volumes": words(variables.get("vllm_server_container_volumes")),
        "run_options": words(variables.get("vllm_server_container_run_options")),
        "restart": variables.get("vllm_server_container_restart"),
    }
    if good and isinstance(good.get("container"), t.Mapping) and good["container"]:
        spec.update(good["container"])
    spec.update({"name": text(variables.get("vllm_server_container_name")) or "gpuops-%s" % text(variables.get("vllm_server_name")),
                 "gpus": gpus, "port": to_int(variables.get("vllm_server_port")), "env_file": env_file})
    return spec


def config_hash(argv: t.List[str], env: t.Mapping[str, t.Any], gpus: t.List[int], container: t.Optional[t.Mapping[str, t.Any]]) -> str:
    """sha256 of the configuration as JSON with sorted keys; in the container mode how the container runs is part of it."""
    config: t.Dict[str, t.Any] = {"argv": argv, "env": env, "gpus": gpus}
    if container is not None:
        config["container"] = {key: value for key, value in container.items() if key not in NOT_HASHED}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode("utf-8")).hexdigest()


def api_key(variables: t.Mapping[str, t.Any], argv_key: str, env: t.Mapping[str, t.Any]) -> str:
    """The key the role sends to /v1/*: vllm_server_api_key, else the argv's --api-key, else VLLM_API_KEY."""
    return text(variables.get("vllm_server_api_key")) or argv_key or text(env.get("VLLM_API_KEY") or "")


def generate_args(variables: t.Mapping[str, t.Any], url: str, served: str, key: str) -> t.Optional[t.Dict[str, t.Any]]:
    """One short completion for a server that may be left alone (/health alone keeps one whose engine core died)."""
    timeout = to_float(variables.get("vllm_server_ready_generate_timeout"))
    if variables.get("vllm_server_state") != "started" or timeout <= 0:
        return None
    return {"url": url, "model": served, "timeout": timeout, "api_key": key or None}


def reclaim_args(variables: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """gpu_reclaim's settings, the same for the preflight (check mode) and the reclaim after the stop."""
    every = to_bool(variables.get("vllm_server_reclaim_all_holders"))
    return {"match": None if every else words(variables.get("vllm_server_reclaim_match")), "orphans_only": not every,
            "grace": to_float(variables.get("vllm_server_reclaim_grace")), "timeout": to_float(variables.get("vllm_server_reclaim_timeout")),
            "memory_threshold_mib": to_int(variables.get(IDLE_THRESHOLD))}


def _decided_state(variables: t.Mapping[str, t.Any]) -> str:
    return text(variables.get("vllm_server_state")) or "started"


def status_args(variables: t.Mapping[str, t.Any], where: t.Mapping[str, str], digest: str, url: str,
                container: t.Optional[t.Mapping[str, t.Any]], generate: t.Optional[t.Mapping[str, t.Any]],
                node: t.Optional[t.Mapping[str, t.Any]] = None, adapters: t.Optional[t.Mapping[str, t.Any]] = None) -> t.Dict[str, t.Any]:
    """The reading of what runs (vllm_process state=status; vllm_lock's status): the managed server, the server to take
    over (the listener on the port; on a headless node of a server across hosts, which serves no API, the headless rank
    joined to its head), taken over or refused, the decision, and for a server that may be left alone one short
    completion (a headless node: its head's)."""
    across = None
    if node and node["size"] > 1:
        across = {"group": node["name"], "size": node["size"], "head": node["addresses"][0] if node["headless"] else None,
                  "port": to_int(variables.get(groups.NODES_PORT)) if node["headless"] else None}
    return {
        "mode": text(variables.get("vllm_server_launch_mode")) or "auto",
        "unit": where["unit"],
        "state_file": where["state"],
        "config_hash": digest,
        "health_url": url + "/health",
        "container": {"name": container["name"], "runtime": container["runtime"]} if container else None,
        "listener": dict({"port": to_int(variables.get("vllm_server_port")), "match": words(variables.get("vllm_server_reclaim_match")),
                          "stop_units": to_bool(variables.get("vllm_server_takeover_units"))}, **({"across": across} if across else {})),
        "decide": {"state": _decided_state(variables), "force": _decided_state(variables) == "restarted"},
        "generate": generate,
        # a server whose LoRA adapters change at run time (lora.py): the reading compares them too
        "adapters": adapters,
    }


def build(variables: t.Mapping[str, t.Any], good: t.Optional[t.Mapping[str, t.Any]] = None,
          check_mode: bool = False, host: str = "", members: t.Optional[groups.Members] = None) -> t.Dict[str, t.Any]:
    """The plan (see the role's argument spec, entry point ``plan``). Raises PlanError naming every broken rule.
    ``host`` and ``members`` (the inventory's groups and each host's variables) place a node of a server across hosts."""
    good = dict(good) if good else None
    variables, _warnings = settled(variables)
    node, problems = groups.place(host, variables, members or groups.Members({}, {}))
    workers = node["local_workers"] if node else None
    gpus = server_gpus(variables, good, workers)
    problems += broken(dict(variables, **({"_local_workers": workers} if workers is not None else {})), gpus)
    if not good:
        problems += lora.problems(variables.get(lora.VARIABLE), variables.get("vllm_server_args"))
    if problems:
        raise PlanError(problems)
    mode = text(variables.get("vllm_server_launch_mode")) or "auto"
    where = files(variables)
    visible = ",".join(str(index) for index in (range(len(gpus)) if mode == CONTAINER else gpus))
    whole = bool(node) and node["size"] > 1
    # the LoRA adapters: --lora-modules at launch; with runtime updating (managed) out of the hash, compared by the reading
    adapters = lora.adapters((good or {}).get("lora_adapters") if good else variables.get(lora.VARIABLE))
    argv = list(good["argv"]) if good else server_argv(variables, node["flags"] if node else ()) + lora.launch_words(adapters)
    env = dict(good["env"]) if good else server_env(variables, visible, node["env"] if node else None)
    managed = bool(good.get("lora_managed")) if good else lora.managed(variables.get("vllm_server_args"), env, whole)
    container = container_spec(variables, good, gpus, where["env"]) if mode == CONTAINER else None
    secrets = argv_with_secrets(argv)
    served = (text(good.get("served_name")) if good
              else text(variables.get("vllm_server_served_model_name")) or text(variables.get("vllm_server_model")))
    secret_env = words(variables.get("vllm_server_secret_env"))
    port = to_int(variables.get("vllm_server_port"))
    # a node of a server across hosts waits on the head's API (which serves once every rank joined)
    url = "http://%s:%d" % (node["api_host"] if node else text(variables.get("vllm_server_health_host")), port)
    key = api_key(variables, secrets["api_key"], env)
    # what the role shows of the environment: the operator's variables (CUDA_VISIBLE_DEVICES is the GPUs, shown apart)
    shown_env = mapping(variables.get("vllm_server_env"))
    shown_env.update(mapping(variables.get("vllm_server_env_overrides")))
    shown_env = dict(good["env"]) if good else shown_env
    digest = config_hash(lora.hashed_argv(argv, managed), env, gpus, container)
    state = text(variables.get("vllm_server_state")) or "started"
    generate = generate_args(variables, url, served, key)
    checked = to_bool(variables.get(CHECK)) and not check_mode
    adapter_option = (lora.status_option(adapters, url, key, to_float(variables.get("vllm_server_ready_generate_timeout")) or 60.0,
                                         {"host": host, "name": text(variables.get("vllm_server_name")), "url": url}, where["lock"])
                      if managed else None)
    return {
        "name": text(variables.get("vllm_server_name")),
        "host": host,
        "state": state,
        "force": state == "restarted",
        "mode": mode,
        "port": port,
        "url": url,
        "gpus": gpus,
        "gpu_words": [str(gpu) for gpu in gpus],
        "tensor_parallel_size": to_int(variables.get("vllm_server_tensor_parallel_size")),
        # the workers on this host (one per GPU): the tensor-parallel size, or this host's share of a server across hosts
        "local_workers": len(gpus),
        # this host's place in a server across hosts (vllm_server_nodes_group), None for a server of one host
        "group": node,
        # a server across two or more hosts: each step's gate reads every host's result (gate.py)
        "whole": whole,
        "group_name": node["name"] if whole else "",
        # who a benchmark of this server measures: the head of a server across hosts (the others serve no API of their own)
        "measured_by": node["head"] if whole else host,
        "measures": not (whole and node["headless"]),
        # kept in the server's record (its metadata): the fleet page shows the group's hosts as one server
        "record_group": {"name": node["name"], "rank": node["rank"], "size": node["size"], "head": node["head"],
                         "head_url": "http://%s:%d" % (node["addresses"][0], port)} if whole else {},
        "model": text(good.get("model")) if good else text(variables.get("vllm_server_model")),
        "served_name": served,
        "argv": argv,
        "argv_masked": secrets["masked"],
        "exec_env": secrets["exec_env"],
        "exec_start": secrets["exec_start"],
        "env": env,
        "env_shown": env_shown(shown_env, secret_env),
        "check_env": dict(good["env"]) if good else dict(shown_env, CUDA_VISIBLE_DEVICES=visible),
        "secret_env": secret_env,
        "api_key": key,
        "api_key_arg": bool(secrets["api_key"]),
        "env_names": [name for name, value in env.items() if value is not None and value != ""],
        "config_hash": digest,
        "container": container,
        "files": where,
        # where the caches live: the role's places, and what the inventory sets (the preflight decides, caches.py)
        "caches": server_caches.planned(variables, env, argv),
        "state_file": where["state"],
        "rollback": bool(good),
        "generate": generate,
        "status": status_args(variables, where, digest, url, container, generate, node, adapter_option),
        # the LoRA adapters wanted, and whether they change at run time without a restart (lora.py)
        "lora_adapters": adapters,
        "lora_managed": managed,
        "reclaim": reclaim_args(variables),
        "memory_threshold_mib": to_int(variables.get(IDLE_THRESHOLD)),
        # the variables a refusal names, as the operator wrote them
        "given": {name: variables.get(name) for name in GIVEN},
        # a headless node has no API to drain: it stops once its head stopped (drained) and no longer answers
        "drain": to_bool(variables.get("vllm_server_drain")) and not (node and node["headless"]),
        "stop_after": url + "/health" if node and node["headless"] else "",
        "keep_failed": to_bool(variables.get("vllm_server_keep_failed_server")),
        "allow_open": to_bool(variables.get("vllm_server_allow_open")),
        # the launch check and the last known-good mark (the rollout holds the mark back with vllm_server_mark_good=false)
        "check": checked,
        # a node of a server across hosts keeps its launch as good, and releases its lock, only once every node is ready
        "mark_good": checked and to_bool(variables.get("vllm_server_mark_good", True)) and not whole,
        "mark_good_whole": checked and to_bool(variables.get("vllm_server_mark_good", True)) and whole,
        "release_in_ready": not whole,
        # kept as the last known-good configuration once a launch passed ready and the check (the mode: the one it runs in)
        "good_config": {"argv": argv, "env": env, "gpus": gpus, "config_hash": digest, "served_name": served, "mode": mode,
                        "model": text(good.get("model")) if good else text(variables.get("vllm_server_model")),
                        "tensor_parallel_size": to_int(variables.get("vllm_server_tensor_parallel_size")), "port": port,
                        "name": text(variables.get("vllm_server_name")), "container": container,
                        "lora_adapters": adapters, "lora_managed": managed},
    }


def rollback_refusal(variables: t.Mapping[str, t.Any], summary: t.Optional[t.Mapping[str, t.Any]], mode_now: str,
                     members: t.Optional[groups.Members] = None) -> str:
    """Why a rollback cannot launch the last known-good configuration (``summary``: vllm_last_good's, None when none is
    kept; ``mode_now``: the launch mode this run resolves to), '' when it can: a rollback replaces a configuration, it does
    not move a server."""
    variables, _warnings = settled(variables)
    name, size, port = variables.get("vllm_server_name"), to_int(variables.get("vllm_server_tensor_parallel_size")), variables.get("vllm_server_port")
    if not summary:
        state_dir = text(variables.get("vllm_server_state_dir"))
        return ("no last known-good configuration is kept for %s (%s/%s.last-good): it is kept once a launch passed ready and the check"
                % (name, state_dir, name))
    if variables.get("vllm_server_state") == "stopped":
        return "vllm_server_state=stopped: a rollback starts the server (state started)"
    if summary.get("mode") != mode_now:
        return "the last known-good configuration ran in launch mode %s, this run uses %s" % (summary.get("mode"), mode_now)
    gpus = list(summary.get("gpus") or [])
    group = text(variables.get(groups.GROUP)).strip()
    if group and members is not None:  # a node of a server across hosts runs its share of the workers
        size = groups.local_workers(variables, len(members.groups.get(group) or []))
    if len(gpus) != size:
        return ("the last known-good configuration has tensor_parallel_size=%s (GPU %s), vllm_server_tensor_parallel_size=%s"
                % (summary.get("tensor_parallel_size"), ", ".join(str(gpu) for gpu in gpus), text(variables.get("vllm_server_tensor_parallel_size"))))
    if text(summary.get("port")) != text(port):
        return "the last known-good configuration listens on port %s, vllm_server_port=%s" % (summary.get("port"), text(port))
    return ""
