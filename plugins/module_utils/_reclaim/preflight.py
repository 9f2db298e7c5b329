# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What the vllm_server role's preflight and its reclaim after the stop give gpu_reclaim, from the plan of the run and
the reading under the lock: made on the host by vllm_lock (the lock, the reading and the preflight's check-mode reclaim
in one module run), and on the controller by the role's verdict (plugin_utils/_role/preflight.py), the same functions.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t


def secured_args(plan: t.Mapping[str, t.Any], status: t.Mapping[str, t.Any]) -> t.Optional[t.Dict[str, t.Any]]:
    """gpu_reclaim's ``secured``: the server on the port against the new configuration, by names only (whether its argv
    has --api-key, the names of its environment with a value, whether a detached process inherits the task's
    environment); none with state stopped."""
    if plan["state"] == "stopped":
        return None
    return {"port": plan["port"], "api_key_arg": plan["api_key_arg"], "env_names": plan["env_names"],
            "inherit_env": (status.get("mode") or "process") == "process", "secret_env": plan["secret_env"]}


def own_containers(status: t.Mapping[str, t.Any]) -> t.List[str]:
    """The stop's own containers: the role's (container mode) and one taken over on the port."""
    found = [status["container_id"]] if status.get("container_id") else []
    box = (status.get("takeover") or {}).get("container") or {}
    return found + ([box["id"]] if box.get("id") else [])


def reclaim_owner(status: t.Mapping[str, t.Any]) -> t.Optional[t.Dict[str, t.Any]]:
    """gpu_reclaim's owner: the server taken over, else the running server (PID and start time), so that its workers are
    this server's and a live job's vLLM is left alone and named."""
    taken = status.get("takeover")
    if taken:
        return {"pid": int(taken["pid"]), "create_time": taken.get("create_time")}
    if status.get("running") and status.get("pid") is not None:
        return {"pid": int(status["pid"]), "create_time": status.get("create_time")}
    return None


def reclaim_args(plan: t.Mapping[str, t.Any], status: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """gpu_reclaim's options for the preflight and the reclaim after the stop: the same, so that a setting it would
    refuse is refused before anything stops. A holder in a container the role does not manage is refused, never
    signalled nor stopped."""
    settings = plan["reclaim"]
    args = {"gpus": plan["gpu_words"], "orphans_only": settings["orphans_only"], "grace": settings["grace"],
            "timeout": settings["timeout"], "idle_threshold_mib": settings["memory_threshold_mib"], "containers": "refuse"}
    if settings["match"] is not None:
        args["match"] = settings["match"]
    owner = reclaim_owner(status)
    if owner is not None:
        args["owner"] = owner
    return args


def reading_args(plan: t.Mapping[str, t.Any], status: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """gpu_reclaim's options for the preflight's check-mode reading: the reclaim's, the stop's own containers (which the
    stop ends, so no refusal), and ``secured`` (whether the new configuration would open the server on the port)."""
    args = reclaim_args(plan, status)
    args["managed_containers"] = own_containers(status)
    secured = secured_args(plan, status)
    if secured is not None:
        args["secured"] = secured
    return args


def replaced_pid(status: t.Mapping[str, t.Any]) -> t.Optional[int]:
    """The server whose caches the new one keeps: the one taken over, else the running one (its main process); None when
    none runs. A container taken over is not read: the places its environment names are inside the container."""
    taken = status.get("takeover")
    if taken:
        return None if taken.get("container") else int(taken["pid"])
    if status.get("running") and status.get("pid") is not None:
        return int(status["pid"])
    return None


def cache_reading(plan: t.Mapping[str, t.Any], status: t.Mapping[str, t.Any]) -> t.Optional[t.Dict[str, t.Any]]:
    """_host.caches.reading for the role's cache decision (plugin_utils/_role/caches.py): where the server the launch
    replaces keeps its caches, as whom the new one runs, and whether it may use those places (``old``, ``new``), with
    the launch ``mode``, whether that server is ``taken`` over, and whether it runs ``in_container``; None with state
    stopped or a plan without ``caches``."""
    caches = plan.get("caches")
    if plan.get("state") == "stopped" or not isinstance(caches, t.Mapping):
        return None
    # the controller (the verdict) imports this file for the functions above, never the host's readings
    from ansible_collections.gpuops.fleet.plugins.module_utils._host import caches as host_caches  # pylint: disable=import-outside-toplevel
    mode = str(status.get("mode") or "process")
    found = host_caches.reading(replaced_pid(status), mode, str(caches.get("user") or ""), list((caches.get("default") or {}).values()),
                                str(caches.get("container_user") or ""))
    found.update(mode=mode, taken=bool(status.get("takeover")), in_container=bool((status.get("takeover") or {}).get("container")))
    return found


def preflight_reading(module: t.Any, plan: t.Mapping[str, t.Any],
                      status: t.Mapping[str, t.Any]) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """On the host, in the lock's module run: gpu_reclaim in check mode with reading_args (it changes nothing), as
    (its result, warnings, whether it could not run), with ``caches`` (cache_reading) beside its keys."""
    # the controller (the verdict) imports this file for the functions above, never the reclaim's code
    from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.run import reclaim_in_module  # pylint: disable=import-outside-toplevel
    reading, warnings, unreadable = reclaim_in_module(module, reading_args(plan, status), True, beside=True)
    caches = cache_reading(plan, status)
    if caches is not None:
        reading = dict(reading, caches=caches)
    return reading, warnings, unreadable
