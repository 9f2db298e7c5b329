# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""vllm_lock's task on the host: its options checked, the lock taken (with ``status``, what runs read under it, and with
``preflight``, the preflight's check-mode reclaim) or released.

Run by vllm_lock, and by vllm_process given ``lock`` (the role's lock, so that a restart's lock, stop and launch share one
module payload, built once per run on the controller). The listener reading and the preflight's reclaim come from
_reclaim, which this package does not import: the module passes them in (``read_listener``, ``preflight``), as it passes
``read_listener`` to status.read_server.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import secrets
import typing as t

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError, failure
from ansible_collections.gpuops.fleet.plugins.module_utils._host.listener import DEFAULT_MATCH, ListenerError
from ansible_collections.gpuops.fleet.plugins.module_utils._server.adapters import change
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.process import ServerError
from ansible_collections.gpuops.fleet.plugins.module_utils._server.lock import LockHeld, acquire, release, who
from ansible_collections.gpuops.fleet.plugins.module_utils._server.record import RecordError
from ansible_collections.gpuops.fleet.plugins.module_utils._server.status import check_options, read_server, status_options

# the preflight's check-mode reclaim: (module, the plan's preflight inputs, the reading under the lock) ->
# (gpu_reclaim's result, warnings, whether it could not run)
Preflight = t.Callable[[t.Any, t.Mapping[str, t.Any], t.Mapping[str, t.Any]], t.Tuple[t.Dict[str, t.Any], t.List[str], bool]]

ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "path": {"type": "path", "required": True},
    "state": {"type": "str", "choices": ["locked", "unlocked"], "default": "locked"},
    "token": {"type": "str", "no_log": False},
    "released_token": {"type": "str", "no_log": False},
    "owner": {"type": "str"},
    "play": {"type": "str"},
    "controller": {"type": "dict", "options": {
        "host": {"type": "str"},
        "user": {"type": "str"},
        "pid": {"type": "int"},
        "pid_start": {"type": "str"},
        "argv_sha": {"type": "str"},
        "boot_id": {"type": "str"},
        "machine_id": {"type": "str"},
        "pid_namespace": {"type": "str"},
    }},
    "takeover": {"type": "str", "no_log": False},
    "stale_after": {"type": "float", "default": 7200},
    "status": {"type": "dict", "options": status_options(DEFAULT_MATCH)},
    "preflight": {"type": "dict"},
}


def validated(given: t.Mapping[str, t.Any], prefix: str) -> t.Dict[str, t.Any]:
    """``given`` (vllm_lock's options, as vllm_process's ``lock``) checked against ARGUMENT_SPEC, defaults filled in, as
    AnsibleModule does for vllm_lock; raises SpecError naming the first bad option under ``prefix``."""
    checked = ArgumentSpecValidator(ARGUMENT_SPEC).validate(dict(given))
    if checked.error_messages:
        raise SpecError("%s%s" % (prefix, checked.error_messages[0]))
    return checked.validated_parameters


def check_params(params: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """The controller's details that are set, once every option is usable; raises SpecError naming option and value."""
    if params["token"] is None and params["state"] == "locked":
        params["token"] = secrets.token_hex(10)
    if not (params["token"] or "").strip():
        raise SpecError("token: must not be empty%s" % (" to release the lock" if params["state"] == "unlocked" else ""))
    if params["stale_after"] <= 0:
        raise SpecError("stale_after: expected a positive number of seconds, got %r" % params["stale_after"])
    if params["status"]:
        check_options(params["status"], "status.")
    controller = {key: value for key, value in (params["controller"] or {}).items() if value is not None}
    if controller.get("pid") is not None and controller["pid"] <= 0:
        raise SpecError("controller.pid: expected a positive PID, got %r" % controller["pid"])
    return controller


def _read(module: t.Any, options: t.Mapping[str, t.Any], read_listener: t.Callable[..., t.Any]) -> t.Dict[str, t.Any]:
    """What runs now, read under the lock (vllm_process's state=status reading)."""
    _deps.require(module, _deps.PSUTIL)
    return read_server(module, _deps.PSUTIL.module, options, read_listener)


def adapt(module: t.Any, params: t.Mapping[str, t.Any], result: t.Dict[str, t.Any]) -> bool:
    """Apply the reading's adapter difference (adapters.change; only previewed in check mode), release the lock, and say
    so in ``result`` (adapted, acquired false, released, changed, adapters, msg, diff, the fact vllm_server_result).
    Returns whether it failed (the server then serves the adapters it served before)."""
    fields, failed = change(params["status"]["adapters"], result["status"], module.check_mode)
    released = release(params["path"], params["token"]).released
    result.update(fields, acquired=False, released=released)
    return failed


def run(module: t.Any, params: t.Dict[str, t.Any], read_listener: t.Callable[..., t.Any],
        preflight: Preflight) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """The options checked, then the lock taken (with status, what runs read under it) or released."""
    try:
        controller = check_params(params)
    except SpecError as exc:
        return failure(str(exc))
    details = {"controller": controller or None, "play": params["play"]}
    owner = params["owner"] or who(details, with_run=False)
    try:
        if params["state"] == "locked":
            outcome = acquire(params["path"], owner, params["token"], params["stale_after"], takeover=params["takeover"],
                              details=details)
        elif params["released_token"] == params["token"]:
            return {"changed": False, "acquired": False, "released": False, "holder": None, "token": params["token"],
                    "msg": "already released by the task that released token %s" % params["token"]}, [], False
        else:
            outcome = release(params["path"], params["token"])
    except LockHeld as exc:
        return failure(str(exc), changed=False, acquired=False, released=False, holder=exc.holder)
    except OSError as exc:
        return failure("path: cannot use the lock file %s: %s" % (params["path"], exc), changed=False)
    result: t.Dict[str, t.Any] = {"changed": False, "acquired": outcome.acquired, "released": outcome.released, "holder": outcome.holder,
                                  "token": params["token"]}
    if params["state"] == "locked":
        result["took_over"] = outcome.took_over
    failed = False
    if params["state"] == "locked" and params["status"]:
        try:
            result["status"] = _read(module, params["status"], read_listener)
        except (RecordError, ListenerError, SpecError, ServerError) as exc:
            # a failed task takes no lock: the one just taken is released again before failing
            if isinstance(exc, ServerError) and exc.result:
                result["status"] = exc.result
            result.update(msg=str(exc), acquired=False,
                          released=release(params["path"], params["token"]).released if outcome.acquired else False)
            failed = True
        if not failed and (result["status"].get("adapters") or {}).get("change"):
            # only the LoRA adapters differ: changed through the server's API under this lock, released here
            failed = adapt(module, params, result)
        elif not failed and params["preflight"] is not None:
            # the preflight's check-mode reclaim, whatever this task's mode: it changes nothing
            reading, warnings, unreadable = preflight(module, params["preflight"], result["status"])
            result["preflight"] = dict(reading, failed=unreadable, warnings=warnings)
    return result, [outcome.warning] if outcome.warning else [], failed
