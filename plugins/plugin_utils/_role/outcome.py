# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What a run of the vllm_server role did on a host (vllm_server_result), and what a launch that failed left behind
(vllm_server_failure, with the undo's words), on the controller, from the steps' registered results.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

Result = t.Mapping[str, t.Any]
TAKEN_OVER = "a server this role did not start listens on port %s: taken over"


def _get(result: t.Optional[Result], key: str, default: t.Any = None) -> t.Any:
    value = (result or {}).get(key)
    return default if value is None else value


def status_of(lock: t.Optional[Result], read: t.Optional[Result]) -> t.Dict[str, t.Any]:
    """The reading a run acts on: the lock's (under the lock) once taken, else the one without the lock, else none."""
    if isinstance((lock or {}).get("status"), t.Mapping):
        return dict(lock["status"])
    if read and "mode" in read:
        return dict(read)
    return {}


def old_pid(status: Result) -> t.Optional[int]:
    """The server this run replaced: the one taken over, else the managed one that ran."""
    taken = status.get("takeover")
    if taken:
        return taken.get("pid")
    return status.get("pid") if status.get("running") else None


def action(plan: Result, status: Result) -> str:
    if plan["state"] == "stopped":
        return "stopped"
    return "restarted" if old_pid(status) is not None else "started"


def would_launch(plan: Result, status: Result, check_mode: bool) -> str:
    """In check mode, the launch a real run would make (secrets masked); '' otherwise."""
    if not check_mode or plan["state"] == "stopped":
        return ""
    pid = old_pid(status)
    text = ("would stop PID %s and launch " % pid) if pid is not None else "would launch "
    text += " ".join(plan["argv_masked"])
    if plan["env_shown"]:
        text += " with " + " ".join(plan["env_shown"])
    return text + " on GPU " + ", ".join(str(gpu) for gpu in plan["gpus"])


def taken_over(status: Result, stopped: t.Optional[Result]) -> t.Optional[t.Dict[str, t.Any]]:
    taken = status.get("takeover")
    if not taken:
        return None
    stop = _get(stopped, "takeover_stopped", {})
    return {"pid": taken.get("pid"), "command": taken.get("command"), "how": taken.get("how"), "started": taken.get("started"),
            "unit": taken.get("unit"), "unit_disabled": bool(stop.get("unit_disabled")), "container": taken.get("container"),
            "stopped_pids": [proc.get("pid") for proc in stop.get("stopped") or []], "drained": stop.get("drained") or {}}


def _mib(gpus: t.Iterable[t.Mapping[str, t.Any]], key: str) -> int:
    return sum(int(gpu.get(key) or 0) for gpu in gpus)


def result(host: str, plan: Result, steps: t.Mapping[str, t.Optional[Result]], check_mode: bool) -> t.Dict[str, t.Any]:
    """vllm_server_result (the role's argument spec documents each key) from the steps' results: status (the reading
    acted on), preflight, stopped, reclaim, verify, launched, ready."""
    status = steps.get("status") or {}
    preflight, reclaim, verify = steps.get("preflight") or {}, steps.get("reclaim") or {}, steps.get("verify") or {}
    ready, launched = steps.get("ready") or {}, steps.get("launched") or {}
    stopped = list(_get(steps.get("stopped"), "stopped", [])) + list(_get(reclaim, "killed", []))
    before = _mib(_get(preflight, "gpus", []), "memory_used_mib_before")
    after = _mib(_get(verify, "gpus", []), "memory_used_mib")
    stopping = plan["state"] == "stopped"
    foreign = reclaim.get("foreign") if reclaim.get("foreign") is not None else preflight.get("foreign") or []
    reason = status.get("reason") or ""
    if status.get("takeover") and reason == "no managed server ran":
        reason = TAKEN_OVER % plan["port"]
    check = ready.get("check") or {}
    return {
        "host": host, "name": plan["name"], "action": action(plan, status), "check_mode": check_mode,
        "would_end": [proc.get("name") for proc in _get(preflight, "would_kill", [])],
        "would_free_mib": before, "would_stop_pid": old_pid(status),
        "would_launch": would_launch(plan, status, check_mode),
        "left_alone": [entry.get("reason") for entry in foreign] if stopping else [],
        "reason": reason, "left_gpus": _get(verify, "left", []),
        "drained": _get(steps.get("stopped"), "drained", {}),
        "stopped": [proc.get("name") for proc in stopped], "stopped_pids": [proc.get("pid") for proc in stopped],
        "freed_mib": max(before - after, 0),
        "ready_s": ready.get("elapsed_s"),
        # the start-up by phase, read from the server's log by the ready step (_server/startup.py); None without a wait
        "startup": ready.get("startup"),
        "pid": ready.get("pid") if ready.get("pid") is not None else launched.get("pid"),
        "workers": check.get("workers") or [], "checks": check.get("checks") or [],
        "url": plan["url"],
        "crash_loop": "unit %s: %s" % (plan["files"]["unit"], status["crash_loop"]) if status.get("crash_loop") else "",
        "taken_over": taken_over(status, steps.get("stopped")),
        # where the new server keeps its caches, and why there (caches.py): '' when nothing is launched
        "caches": "" if stopping else str((preflight.get("caches") or {}).get("shown") or ""),
    }


def start_again(status: Result, stopped: t.Optional[Result]) -> str:
    """After a launch that failed: the server this run took over stays stopped, and how to start it by hand."""
    taken, stop = status.get("takeover"), _get(stopped, "takeover_stopped", None)
    if not taken or not stop:
        return ""
    text = "; the server taken over (PID %s, started %s) stays stopped, this run does not start it again: " % (taken.get("pid"), taken.get("started"))
    box = taken.get("container")
    if box:
        return text + "start its container again with `%s start %s`" % (box.get("runtime"), box.get("name") or str(box.get("id") or "")[:12])
    if taken.get("unit") and stop.get("unit_disabled"):
        return text + "start its unit again with `systemctl enable --now %s`" % taken["unit"]
    return text + "its command line was `%s` (secrets masked)" % taken.get("command")


def failure(plan: Result, task: str, failed: Result, steps: t.Mapping[str, t.Optional[Result]]) -> t.Dict[str, t.Any]:
    """vllm_server_failure: the step that failed, its message and the server's log tail, the new server's PID, and
    what the role does about it (undo: the new server stopped and its GPUs verified, or kept with
    vllm_server_keep_failed_server)."""
    launched, ready = steps.get("launched") or {}, steps.get("ready") or {}
    pid = launched.get("pid")
    undo = "the new server" + (" (PID %s)" % pid if pid else "")
    if plan["keep_failed"]:
        undo += " was left as it is, with its GPUs (vllm_server_keep_failed_server=true)"
    else:
        undo += (" was stopped and GPU %s verified free (vllm_server_keep_failed_server=true leaves it for debugging)"
                 % ", ".join(str(gpu) for gpu in plan["gpus"]))
    undo += start_again(steps.get("status") or {}, steps.get("stopped"))
    return {"task": task or "?", "msg": failed.get("msg") or "no message", "log_tail": failed.get("log_tail") or [],
            "new_pid": ready.get("pid") if ready.get("pid") is not None else pid, "undo": undo}


def rollback(host: str, plan: Result, steps: t.Mapping[str, t.Optional[Result]]) -> t.Dict[str, t.Any]:
    """vllm_server_rollback_result: what the rollback entry point did (the run's result, the last known-good
    configuration's hash and since when it is good, the new server's checks)."""
    done, ready = steps.get("result") or {}, steps.get("ready") or {}
    check = ready.get("check") or {}
    good = (steps.get("last_good") or {}).get("summary") or {}
    return {"host": host, "name": plan["name"], "action": done.get("action"), "config_hash": plan["config_hash"],
            "good_since": good.get("since"), "env_shown": plan["env_shown"],
            "pid": ready.get("pid") if ready.get("pid") is not None else done.get("pid"),
            "ready_s": ready.get("elapsed_s"), "startup": ready.get("startup"), "checks": check.get("checks") or [],
            "workers": check.get("workers") or [], "stopped_pids": done.get("stopped_pids") or []}
