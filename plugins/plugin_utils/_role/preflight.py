# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The preflight's verdict, on the controller, from gpu_reclaim's check-mode reading: whether the run may stop anything.

It refuses (and nothing is stopped) when the host cannot run this configuration (a GPU it lacks, a setting gpu_reclaim
refuses, no driver), when the stop would not free the server's GPUs (a holder it would leave; with state stopped
those are left alone and named instead), or when the server on the port requires an API key that the new
configuration drops (unless vllm_server_allow_open), or when which server listens cannot be told, or when the new
server could not use the place where the server it replaces keeps its model (caches.py). It fails closed
when the environment of the server on the port cannot be read (another user's process, no become): with no --api-key on
its command line and no key in the new configuration, whether it requires one is unknown, so it is refused unless
vllm_server_allow_open.

What gpu_reclaim is given (its options from the plan and the reading under the lock) is made in
module_utils/_reclaim/preflight.py, on the host by vllm_lock and here by the verdict.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import re
import typing as t

from ansible_collections.gpuops.fleet.plugins.plugin_utils._role import caches

# the plan's keys module_utils/_reclaim/preflight.py reads: all that vllm_lock's preflight option carries to the host
# (the plan's secrets stay on the controller)
PLAN_KEYS = ("state", "gpu_words", "reclaim", "port", "api_key_arg", "env_names", "secret_env", "caches")
# gpu_reclaim names its option first in a message ("gpus: ..."): the role names its variable instead
OPTION = re.compile(r"^([a-z_]+)(?=: )")
VARIABLES = {"match": "vllm_server_reclaim_match", "grace": "vllm_server_reclaim_grace", "timeout": "vllm_server_reclaim_timeout",
             "idle_threshold_mib": "gpuops_fleet_idle_threshold_mib"}


def _variable(option: str, plan: t.Mapping[str, t.Any]) -> str:
    variables = plan.get("given") or {}
    if option == "gpus":
        listed = variables.get("vllm_server_gpus")
        origin = "" if listed else " (from vllm_server_tensor_parallel_size=%s)" % variables.get("vllm_server_tensor_parallel_size")
        return "vllm_server_gpus=%s%s" % (json.dumps(plan["gpus"]), origin)
    name = VARIABLES[option]
    return "%s=%s" % (name, json.dumps(variables.get(name), default=str))


def _containers(boxes: t.Sequence[t.Mapping[str, t.Any]]) -> str:
    named = []
    for box in boxes:
        pod = ", pod %s" % box["pod_uid"] if box.get("pod_uid") else ""
        gpus = ",".join(str(gpu) for gpu in box.get("gpus") or [])
        named.append("%s container %s%s on GPU %s" % (box.get("runtime"), box.get("name") or str(box.get("id") or "")[:12], pod, gpus))
    return "; ".join(named)


def _unreadable(plan: t.Mapping[str, t.Any], reading: t.Mapping[str, t.Any]) -> str:
    msg = str(reading.get("msg") or "no message")
    found = OPTION.match(msg)
    named = ""
    if found and (found.group(1) == "gpus" or found.group(1) in VARIABLES):
        named = _variable(found.group(1), plan) + ": "
    return "vllm_server: nothing was stopped: the preflight could not check the server's GPUs: %s%s" % (named, msg)


def _holders(reading: t.Mapping[str, t.Any]) -> str:
    text = "vllm_server: nothing was stopped: the stop would not free the server's GPUs: %s. " % "; ".join(reading["would_fail"])
    boxes = reading.get("containers_refused") or []
    if boxes:
        return text + ("The role never stops a container it does not manage (%s): stop it through its runtime first, then run the role"
                       " again." % _containers(boxes))
    return text + "Set vllm_server_reclaim_all_holders=true to let the stop end every holder of these GPUs."


def _opens(plan: t.Mapping[str, t.Any], secured: t.Mapping[str, t.Any]) -> str:
    if secured.get("error"):
        return ("vllm_server: nothing was stopped: cannot tell which server listens on port %s, so whether it requires an API key: %s."
                % (plan["port"], secured["error"]))
    key = secured.get("running_key")
    where = " on its command line" if key == "--api-key" else " in its environment"
    return ("vllm_server: nothing was stopped: the server that listens on port %s (PID %s) requires an API key (%s%s) and the new"
            " configuration has none (no --api-key in vllm_server_args, no VLLM_API_KEY in vllm_server_env, vllm_server_host_env or"
            " vllm_server_env_overrides): the new server would answer /v1/* to anyone. -e vllm_server_env replaces the inventory's"
            " whole dict; change one variable with -e vllm_server_env_overrides instead, or set vllm_server_allow_open=true to open"
            " the server." % (plan["port"], (secured.get("listener") or {}).get("pid"), key, where))


def _unknown_key(plan: t.Mapping[str, t.Any], secured: t.Mapping[str, t.Any]) -> str:
    """Fail closed: the running server's environment could not be read, its command line has no --api-key and the new
    configuration has no key, so the run cannot tell whether it would open a server that requires one."""
    listener = secured.get("listener") or {}
    if not listener or listener.get("env_read") is not False or plan.get("allow_open"):
        return ""
    if secured.get("running_key") or secured.get("new_key"):
        return ""
    return ("vllm_server: nothing was stopped: the environment of the server that listens on port %s (PID %s) cannot be read"
            " by this user (another user's process), and neither its command line (no --api-key) nor the new configuration has an"
            " API key: whether it requires one (VLLM_API_KEY) is not known, and the new server would answer /v1/* to anyone. Run"
            " with become (-b, or ansible_become=true in the inventory) so that its environment can be read, or set"
            " vllm_server_allow_open=true to replace it with a server that requires no key." % (plan["port"], listener.get("pid")))


def refusal(plan: t.Mapping[str, t.Any], reading: t.Mapping[str, t.Any]) -> str:
    """Why nothing may be stopped, '' when the run may go on (``reading``: gpu_reclaim's check-mode result; the plan's
    ``given`` holds the variables a refusal names)."""
    if "would_fail" not in reading:
        return _unreadable(plan, reading)
    stopping = plan["state"] == "stopped"
    if reading["would_fail"] and not stopping:
        return _holders(reading)
    secured = {} if stopping else (reading.get("secured") or {})
    if secured.get("error") or (secured.get("opens") and not plan.get("allow_open")):
        return _opens(plan, secured)
    unknown = _unknown_key(plan, secured)
    if unknown or stopping or not plan.get("caches"):
        return unknown
    # where the new server keeps its caches: a model it could not reach is refused (caches.py)
    return caches.choose(plan, reading.get("caches"))["refusal"]


TAKEOVER_KEYS = ("pid", "create_time", "unit", "how")


def takeover_stop(status: t.Mapping[str, t.Any]) -> t.Optional[t.Dict[str, t.Any]]:
    """vllm_process's ``takeover`` for the stop: the server taken over (a container by its runtime and id)."""
    taken = status.get("takeover")
    if not taken:
        return None
    stop = {key: taken.get(key) for key in TAKEOVER_KEYS if key in taken}
    box = taken.get("container")
    if box:
        stop["container"] = {key: box.get(key) for key in ("runtime", "id", "name") if key in box}
    return stop


def plan_inputs(plan: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """vllm_lock's ``preflight``: the plan's keys the preflight's reading needs (PLAN_KEYS), and no other."""
    return {key: plan[key] for key in PLAN_KEYS if key in plan}
