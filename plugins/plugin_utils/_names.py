# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One name per idea: the collection's variables that were renamed, what replaces each, and the values they settle.

An old name still works until REMOVED_IN, with a deprecation warning that names it and its successor
(``Display.deprecated``, from the action plugins that read the variables: gpuops.fleet.vllm_server_plan for the role's,
gpuops.fleet.fleet_names for the playbooks'). When the new name is set too, the new name wins.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.values import to_bool

COLLECTION = "gpuops.fleet"
REMOVED_IN = "0.3.0"

IDLE_THRESHOLD = "gpuops_fleet_idle_threshold_mib"
IDLE_THRESHOLD_DEFAULT = 1024
STATE = "vllm_server_state"
CHECK = "vllm_server_check"
BECOME = "Ansible's become (-b, or ansible_become=true in the inventory)"


class Old(t.NamedTuple):
    setting: str  # the key of settle()'s result it feeds
    instead: str  # what the warning says to use instead


# every old name, with the setting it feeds and what replaces it
OLD: t.Dict[str, Old] = {
    "vllm_restart_become": Old("become", BECOME),
    "gpu_cleanup_become": Old("become", BECOME),
    "vllm_benchmark_become": Old("become", BECOME),
    "vllm_rollout_become": Old("become", BECOME),
    "gpuops_fleet_prepare_become": Old("become", BECOME),
    "vllm_server_memory_threshold_mib": Old("idle_threshold_mib", IDLE_THRESHOLD),
    "gpu_reclaim_memory_threshold_mib": Old("idle_threshold_mib", IDLE_THRESHOLD),
    "gpu_report_threshold_mib": Old("idle_threshold_mib", IDLE_THRESHOLD),
    "gpu_facts_idle_mib": Old("idle_threshold_mib", IDLE_THRESHOLD),
    "vllm_server_force_restart": Old("state", "%s=restarted" % STATE),
    "vllm_restart_force": Old("state", "%s=restarted" % STATE),
    "vllm_server_verify_launch": Old("check", CHECK),
}

# the old names the role itself reads (the playbooks name theirs to the lookup gpuops.fleet.fleet_names); restart_vllm.yml
# passes vllm_server_state through to the role, which reads its deprecated vllm_restart_force as well
ROLE_OLD = ("vllm_server_memory_threshold_mib", "vllm_server_force_restart", "vllm_restart_force", "vllm_server_verify_launch")


def _defined(variables: t.Mapping[str, t.Any], name: str) -> bool:
    return name in variables and variables[name] is not None


def deprecation(old: str) -> str:
    """The warning for one old name (Display.deprecated adds the collection and the version it is removed in)."""
    return "The variable %s is deprecated and will be removed in %s %s; use %s instead" % (
        old, COLLECTION, REMOVED_IN, OLD[old].instead)


def settle(variables: t.Mapping[str, t.Any], olds: t.Iterable[str]) -> t.Tuple[t.Dict[str, t.Any], t.List[str]]:
    """The settings that ``olds`` (old names, keys of OLD) feed, from ``variables``, and the deprecation warning of each
    old name that is set.

    - ``become``: the first old become variable set, as a boolean; None when none is (then Ansible's own become rules).
    - ``idle_threshold_mib``: gpuops_fleet_idle_threshold_mib, else the first old name set, else 1024 (as written).
    - ``state``: vllm_server_state (default started); an old force variable set true turns started into restarted.
    - ``check``: vllm_server_check, else vllm_server_verify_launch, else true.
    """
    olds = [name for name in olds if name in OLD]
    used = [name for name in olds if _defined(variables, name)]
    first = {}
    for name in used:
        first.setdefault(OLD[name].setting, name)
    settled: t.Dict[str, t.Any] = {}
    settings = set(OLD[name].setting for name in olds)
    if "become" in settings:
        settled["become"] = to_bool(variables[first["become"]]) if "become" in first else None
    if "idle_threshold_mib" in settings:
        if _defined(variables, IDLE_THRESHOLD):
            settled["idle_threshold_mib"] = variables[IDLE_THRESHOLD]
        elif "idle_threshold_mib" in first:
            settled["idle_threshold_mib"] = variables[first["idle_threshold_mib"]]
        else:
            settled["idle_threshold_mib"] = IDLE_THRESHOLD_DEFAULT
    if "state" in settings:
        state = variables.get(STATE) if _defined(variables, STATE) and str(variables.get(STATE)) != "" else "started"
        forced = any(to_bool(variables[name]) for name in used if OLD[name].setting == "state")
        settled["state"] = "restarted" if forced and state == "started" else state
    if "check" in settings:
        if _defined(variables, CHECK):
            settled["check"] = variables[CHECK]
        else:
            settled["check"] = variables[first["check"]] if "check" in first else True
    return settled, [deprecation(name) for name in used]
