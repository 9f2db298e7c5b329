# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The checks of the vllm_server role's variables that its argument spec cannot express (a value against another, a
pattern, a range), judged on the controller before anything on a host is touched.

``broken(variables, gpus)`` returns the message of each rule that fails, in the order below, and only those: the role
fails with all of them at once, naming each variable and its value.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import regexes
from ansible_collections.gpuops.fleet.plugins.module_utils._vllm_flags import runs_on_ray, spans_hosts
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.values import to_float, to_int, to_json

Rule = t.Callable[[t.Mapping[str, t.Any], t.List[int]], t.Optional[str]]

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$")
HOST = re.compile(r"^[A-Za-z0-9_.:\[\]-]+$")
USER = re.compile(r"^[a-z_][a-z0-9_-]*[$]?$")
CONTAINER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
CDI_KIND = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
ENV_NAME = re.compile(r"^[^=\x00]+$")
SECONDS = re.compile(r"^\s*[0-9]+(\.[0-9]*)?\s*$")
ENV_VARIABLES = "vllm_server_env / vllm_server_host_env / vllm_server_env_overrides"


def _shown(variables: t.Mapping[str, t.Any], name: str) -> str:
    return "%s=%s" % (name, to_json(variables.get(name)))


def _between(name: str, low: float, high: float, what: str, whole: bool = False) -> Rule:
    def rule(variables: t.Mapping[str, t.Any], _gpus: t.List[int]) -> t.Optional[str]:
        value = to_int(variables.get(name)) if whole else to_float(variables.get(name))
        return None if low <= value <= high else "%s %s" % (_shown(variables, name), what)
    return rule


def _above(name: str, low: float, high: t.Optional[float], what: str) -> Rule:
    def rule(variables: t.Mapping[str, t.Any], _gpus: t.List[int]) -> t.Optional[str]:
        value = to_float(variables.get(name))
        return None if value > low and (high is None or value <= high) else "%s %s" % (_shown(variables, name), what)
    return rule


def _matches(name: str, pattern: t.Pattern[str], what: str, empty_ok: bool = False) -> Rule:
    def rule(variables: t.Mapping[str, t.Any], _gpus: t.List[int]) -> t.Optional[str]:
        value = variables.get(name)
        text = "" if value is None else str(value)
        if (empty_ok and text == "") or pattern.search(text):
            return None
        return "%s %s" % (_shown(variables, name), what)
    return rule


def _size_unset(variables: t.Mapping[str, t.Any]) -> bool:
    value = variables.get("vllm_server_tensor_parallel_size")
    return value is None or (isinstance(value, str) and value.strip() == "")


def _size_known(variables: t.Mapping[str, t.Any], _gpus: t.List[int]) -> t.Optional[str]:
    """No silent size: an unset size is the length of vllm_server_gpus (the plan derives it), and with neither set the run
    is refused."""
    if not _size_unset(variables):
        return None
    return ("vllm_server_tensor_parallel_size and vllm_server_gpus are both unset: set vllm_server_gpus to the server's GPUs"
            " (the tensor-parallel size is then their number) or vllm_server_tensor_parallel_size (the server then uses GPUs 0"
            " to size-1)")


def _size_at_least_one(variables: t.Mapping[str, t.Any], gpus: t.List[int]) -> t.Optional[str]:
    if _size_unset(variables):
        return None
    return _between("vllm_server_tensor_parallel_size", 1, float("inf"), "must be at least 1", whole=True)(variables, gpus)


def _gpus_unique(variables: t.Mapping[str, t.Any], gpus: t.List[int]) -> t.Optional[str]:
    return None if len(set(gpus)) == len(gpus) else "%s names a GPU twice" % _shown(variables, "vllm_server_gpus")


def _gpus_positive(variables: t.Mapping[str, t.Any], gpus: t.List[int]) -> t.Optional[str]:
    return None if all(gpu >= 0 for gpu in gpus) else "%s holds a negative index" % _shown(variables, "vllm_server_gpus")


def _gpus_match_size(variables: t.Mapping[str, t.Any], gpus: t.List[int]) -> t.Optional[str]:
    share = variables.get("_local_workers")
    if share is not None:  # a node of a server across hosts (the plan's group.py): its share of the workers
        if len(gpus) == share:
            return None
        return ("vllm_server_gpus=%s lists %d GPU(s) but this host's share of the server of vllm_server_nodes_group=%s is %d"
                " worker(s) (one GPU each): list exactly %d GPU(s), or leave vllm_server_gpus empty for GPUs 0 to %d"
                % (to_json(gpus), len(gpus), to_json(variables.get("vllm_server_nodes_group")), share, share, share - 1))
    size = to_int(variables.get("vllm_server_tensor_parallel_size"))
    if size < 1 or len(gpus) == size:
        return None
    return ("vllm_server_gpus=%s lists %d GPU(s) but vllm_server_tensor_parallel_size=%s: vLLM would use only the first %d and the"
            " launch check requires every listed GPU held by one worker each; list exactly %d GPU(s) or set the size to %d"
            % (to_json(gpus), len(gpus), to_json(variables.get("vllm_server_tensor_parallel_size")), size, size, len(gpus)))


def _command(variables: t.Mapping[str, t.Any], _gpus: t.List[int]) -> t.Optional[str]:
    command = variables.get("vllm_server_command")
    return None if isinstance(command, (list, tuple)) and command else "%s must not be empty" % _shown(variables, "vllm_server_command")


def _model(variables: t.Mapping[str, t.Any], _gpus: t.List[int]) -> t.Optional[str]:
    if variables.get("vllm_server_state") == "stopped" or str(variables.get("vllm_server_model") or ""):
        return None
    return ("vllm_server_model is required to start a server (got %s): set it to the model to serve, or"
            " vllm_server_state=stopped" % to_json(variables.get("vllm_server_model")))


def _server_words(variables: t.Mapping[str, t.Any]) -> t.List[t.Any]:
    """The new server's command line as the plan builds it, but the model and the role's own flags."""
    return list(variables.get("vllm_server_command") or []) + list(variables.get("vllm_server_args") or [])


def _not_on_ray(variables: t.Mapping[str, t.Any], _gpus: t.List[int]) -> t.Optional[str]:
    if not runs_on_ray(_server_words(variables)):
        return None
    return ("vllm_server_args: --distributed-executor-backend ray runs the server on a Ray cluster, which this role does not"
            " manage: it never signals Ray's processes, so it could neither stop such a server whole nor prove its GPUs free;"
            " leave the backend to vLLM (one host) or serve across hosts with --distributed-executor-backend mp")


def _one_host(variables: t.Mapping[str, t.Any], _gpus: t.List[int]) -> t.Optional[str]:
    ranks = spans_hosts(_server_words(variables))
    if not ranks:
        return None
    return ("vllm_server_args: %s are the role's own flags of a server across hosts, set from the inventory: name the"
            " inventory group of the server's hosts, in rank order, with vllm_server_nodes_group (and"
            " vllm_server_pipeline_parallel_size or vllm_server_data_parallel_size), and leave these flags out" % ranks)


def _no_nul_words(variables: t.Mapping[str, t.Any], _gpus: t.List[int]) -> t.Optional[str]:
    words = [str(word) for name in ("vllm_server_command", "vllm_server_args") for word in (variables.get(name) or [])]
    words += [str(variables.get("vllm_server_model") or ""), str(variables.get("vllm_server_served_model_name") or "")]
    if not any("\x00" in word for word in words):
        return None
    return ("vllm_server_command, vllm_server_model, vllm_server_served_model_name or vllm_server_args holds a NUL byte, which no"
            " program can receive in its arguments (the words are not shown: they may hold a secret)")


def _env_items(variables: t.Mapping[str, t.Any]) -> t.List[t.Tuple[t.Any, t.Any]]:
    items = []
    for name in ("vllm_server_host_env", "vllm_server_env", "vllm_server_env_overrides"):
        value = variables.get(name)
        items += list(value.items()) if isinstance(value, t.Mapping) else []
    return items


def _env_names(variables: t.Mapping[str, t.Any], _gpus: t.List[int]) -> t.Optional[str]:
    bad = [str(key) for key, _value in _env_items(variables) if not ENV_NAME.match(str(key))]
    if not bad:
        return None
    return ("%s: the name(s) %s cannot be environment variables (a name must be non-empty, without '=' or a NUL byte)"
            % (ENV_VARIABLES, to_json(bad)))


def _env_values(variables: t.Mapping[str, t.Any], _gpus: t.List[int]) -> t.Optional[str]:
    bad = [str(key) for key, value in _env_items(variables) if isinstance(value, str) and "\x00" in value]
    if not bad:
        return None
    return "%s: the value of %s holds a NUL byte, which no environment can carry (the value is not shown)" % (ENV_VARIABLES, to_json(bad))


def _generate_timeout(variables: t.Mapping[str, t.Any], _gpus: t.List[int]) -> t.Optional[str]:
    value = variables.get("vllm_server_ready_generate_timeout")
    number = (isinstance(value, (int, float)) and not isinstance(value, bool)) or bool(SECONDS.match(str(value)))
    if number and 0 <= to_float(value) <= 3600:
        return None
    return "%s must be 0 (no generation check) to 3600 seconds" % _shown(variables, "vllm_server_ready_generate_timeout")


def _reclaim_match(variables: t.Mapping[str, t.Any], _gpus: t.List[int]) -> t.Optional[str]:
    patterns = variables.get("vllm_server_reclaim_match")
    if not isinstance(patterns, (list, tuple)):
        return "vllm_server_reclaim_match=%s must be a list of regular expressions" % to_json(patterns)
    errors = []
    for pattern in patterns:
        try:
            regexes("vllm_server_reclaim_match", [pattern])
        except SpecError as exc:
            errors.append(str(exc))
    return "; ".join(errors) or None


def _start_limit(variables: t.Mapping[str, t.Any], _gpus: t.List[int]) -> t.Optional[str]:
    interval = to_int(variables.get("vllm_server_systemd_start_limit_interval_sec"))
    restart = to_int(variables.get("vllm_server_systemd_restart_sec"))
    burst = to_int(variables.get("vllm_server_systemd_start_limit_burst"))
    if interval == 0 or interval > restart * burst:
        return None
    return ("%s must be 0 (no start limit: a crashing server is restarted for ever) or more than vllm_server_systemd_restart_sec x"
            " vllm_server_systemd_start_limit_burst (%d s): starts at least %d s apart never reach %d within a shorter interval, so"
            " the limit would never stop a crash loop"
            % (_shown(variables, "vllm_server_systemd_start_limit_interval_sec"), restart * burst, restart, burst + 1))


def _container_image(variables: t.Mapping[str, t.Any], _gpus: t.List[int]) -> t.Optional[str]:
    if variables.get("vllm_server_launch_mode") != "container" or variables.get("vllm_server_state") == "stopped":
        return None
    if str(variables.get("vllm_server_container_image") or ""):
        return None
    return "%s must name an image with vllm_server_launch_mode=container" % _shown(variables, "vllm_server_container_image")


def _absolute(name: str, what: str, empty_ok: bool = False) -> Rule:
    return _matches(name, re.compile(r"^/"), what, empty_ok)


RULES: t.Tuple[Rule, ...] = (
    _matches("vllm_server_name", NAME, "must be letters, digits, '_', '.', '@' or '-' (it names files)"),
    _between("vllm_server_port", 1, 65535, "must be 1-65535", whole=True),
    _size_known,
    _size_at_least_one,
    _gpus_unique,
    _gpus_positive,
    _gpus_match_size,
    _command,
    _model,
    _not_on_ray,
    _one_host,
    _no_nul_words,
    _env_names,
    _env_values,
    _above("vllm_server_ready_timeout", 0, None, "must be positive"),
    _between("vllm_server_ready_timeout_factor", 0, 100, "must be 0 (off) to 100"),
    _between("vllm_server_ready_timeout_floor", 0, 86400, "must be 0 to 86400 seconds"),
    _generate_timeout,
    _between("vllm_server_drain_timeout", 0, float("inf"), "must be 0 or more seconds"),
    _between("vllm_server_stop_timeout", 0, 3600, "must be 0 to 3600 seconds"),
    _above("vllm_server_reclaim_grace", 0, 600, "must be more than 0 and at most 600 seconds"),
    _above("vllm_server_reclaim_timeout", 0, 3600, "must be more than 0 and at most 3600 seconds"),
    _between("gpuops_fleet_idle_threshold_mib", 0, 1048576, "must be 0 to 1048576 MiB", whole=True),
    _reclaim_match,
    _above("vllm_server_lock_stale_after", 0, None, "must be positive"),
    _matches("vllm_server_health_host", HOST, "must be a host name or an address"),
    _matches("vllm_server_systemd_user", USER, "must be a user name", empty_ok=True),
    _between("vllm_server_systemd_restart_sec", 1, 86400, "must be 1 to 86400 seconds", whole=True),
    _between("vllm_server_systemd_start_limit_burst", 1, 1000, "must be 1 to 1000 starts", whole=True),
    _start_limit,
    _absolute("vllm_server_state_dir", "must be an absolute path"),
    _absolute("vllm_server_log_dir", "must be empty (the state directory) or an absolute path", empty_ok=True),
    _container_image,
    _matches("vllm_server_container_name", CONTAINER_NAME, "must be letters, digits, '_', '.' or '-'", empty_ok=True),
    _matches("vllm_server_container_cdi_kind", CDI_KIND, "must be a CDI kind, VENDOR/CLASS such as nvidia.com/gpu"),
    _matches("vllm_server_container_network", CONTAINER_NAME, "must be host or a network's name"),
)


def broken(variables: t.Mapping[str, t.Any], gpus: t.List[int]) -> t.List[str]:
    """The message of each rule that ``variables`` (the role's, with ``gpus`` as the plan settles them) fail, in order."""
    return [message for message in (rule(variables, gpus) for rule in RULES) if message]
