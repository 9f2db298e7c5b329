# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Action for gpuops.fleet.vllm_server_verdict: the vllm_server role's verdicts, on the controller. The preflight, the
reclaim and the verify judge what the lock's, the stop's and the reclaim's module runs read on the host, and read the
host themselves (gpu_reclaim, gpu_facts) only when those did not; the result and the failure only read the steps'
registered results."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.preflight import reading_args, reclaim_args
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role import caches, gate, outcome, preflight, verify

STEPS = ("preflight", "reclaim", "verify", "result", "failure", "rollback", "group_ready")
# a server across hosts: the ready gate reads what every node's ready step registered (gate.py); the preflight's reads
# every node's lock (each lock's module run made that node's preflight reading); vllm_lock's action judges the readings
# the results the vllm_server role registers, read when the task gives no ``steps`` (the role's tasks and this action
# are one collection's: these names are private to both)
REGISTERED = {"lock": "__vllm_server_lock", "read": "__vllm_server_read", "preflight": "__vllm_server_preflight",
              "stopped": "__vllm_server_stopped", "reclaim": "__vllm_server_reclaim", "verify": "__vllm_server_verified",
              "launched": "__vllm_server_launched", "ready": "__vllm_server_ready", "last_good": "__vllm_server_last_good",
              "result": "vllm_server_result"}


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("step", "plan", "steps", "failed_task", "failed_result"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = self._task.args
        step, plan = args.get("step"), args.get("plan")
        steps = args.get("steps") if args.get("steps") is not None else self._registered(task_vars or {})
        if step not in STEPS:
            return dict(result, failed=True, msg="step: expected one of %s, got %r" % (", ".join(STEPS), step))
        if not isinstance(plan, dict) or "gpus" not in plan:
            return dict(result, failed=True, msg="plan: expected the role's plan (vllm_server_plan), got %s" % type(plan).__name__)
        if step == "group_ready":
            return dict(result, **dict({"changed": False}, **self._whole_ready(plan, task_vars or {})))
        steps = {key: (value if isinstance(value, dict) and not value.get("skipped") else None) for key, value in steps.items()}
        steps.setdefault("status", outcome.status_of(steps.get("lock"), steps.get("read")))
        host = (task_vars or {}).get("inventory_hostname", "?")
        if step == "preflight":
            result.update(self._preflight(plan, steps.get("status") or {}, steps.get("lock"), task_vars))
            if not result.get("failed") and gate.nodes(plan):
                result.update(self._whole_preflight(plan, task_vars or {}))
        elif step == "reclaim":
            # the reclaim's own result, changed included: the stop's module run reclaimed (vllm_process's reclaim)
            return dict(result, **self._reclaim(steps, task_vars))
        elif step == "verify":
            result.update(self._verify(host, plan, steps, task_vars))
        elif step == "result":
            result.update(outcome.result(host, plan, steps, bool(self._task.check_mode)))
        elif step == "rollback":
            result.update(outcome.rollback(host, plan, steps))
        else:
            failed = args.get("failed_result") if isinstance(args.get("failed_result"), dict) else {}
            result.update(outcome.failure(plan, str(args.get("failed_task") or "?"), failed, steps))
        result["changed"] = False
        return result

    @staticmethod
    def _registered(task_vars):
        return {step: task_vars[name] for step, name in REGISTERED.items() if isinstance(task_vars.get(name), dict)}

    @staticmethod
    def _ready_gate(plan, task_vars):
        """gate.ready over what every node's ready step registered (hostvars); a check that failed after ready fails it."""
        hostvars = task_vars.get("hostvars") or {}
        results = {}
        for node in gate.nodes(plan):
            value = (hostvars.get(node) or {}).get(REGISTERED["ready"])
            results[node] = dict(value) if isinstance(value, dict) and not value.get("skipped") else None
            check = (results[node] or {}).get("check")
            if isinstance(check, dict) and not check.get("ok"):
                results[node] = dict(results[node], failed=True, msg=check.get("msg"))
        return gate.ready(plan, results, list(task_vars.get("ansible_play_batch") or []))

    @staticmethod
    def _whole_preflight(plan, task_vars):
        """Nothing stops on any node of a server across hosts unless every node may stop: each other node's preflight
        judged here, in this node's preflight task, on the reading that node's lock made (its plan and lock, hostvars)."""
        hostvars = task_vars.get("hostvars") or {}
        results = {}
        for node in gate.nodes(plan):
            if node == plan.get("host"):
                continue
            theirs = hostvars.get(node) or {}
            lock, their_plan = theirs.get(REGISTERED["lock"]), theirs.get("vllm_server_plan")
            if not isinstance(lock, dict) or not isinstance(their_plan, dict):
                results[node] = None
            elif lock.get("failed") or lock.get("unreachable"):
                results[node] = {"failed": True, "msg": "its lock: %s" % (lock.get("msg") or "failed")}
            elif not isinstance(lock.get("preflight"), dict):
                results[node] = {"failed": True, "msg": "its lock made no preflight reading"}
            else:
                refused = preflight.refusal(their_plan, lock["preflight"])
                results[node] = {"failed": bool(refused), "msg": refused}
        return gate.preflight(plan, results, list(task_vars.get("ansible_play_batch") or []))

    def _whole_ready(self, plan, task_vars):
        """group_ready, then (when every host is ready and the plan keeps it) this host's last known-good mark, in the
        same task: a mark the group's readiness held back."""
        judged = self._ready_gate(plan, task_vars)
        if judged["failed"] or not plan.get("mark_good_whole") or self._task.check_mode:
            return judged
        marked = self._module("gpuops.fleet.vllm_last_good", {"state": "marked", "state_file": plan["state_file"],
                                                              "secret_env": plan["secret_env"], "config": plan["good_config"]},
                              task_vars, check_mode=False)
        if marked.get("failed"):
            return {"failed": True, "msg": "every host of server group %s is ready, but keeping this host's configuration as its"
                                           " last known-good one failed: %s" % (plan["group"]["name"], marked.get("msg"))}
        return dict(judged, marked=True, changed=bool(marked.get("changed")))

    def _module(self, name, module_args, task_vars, check_mode):
        """Run ``name`` on the host, in check mode or not, whatever this task's mode."""
        was = self._task.check_mode
        self._task.check_mode = check_mode
        try:
            return self._execute_module(module_name=name, module_args=module_args, task_vars=task_vars)
        finally:
            self._task.check_mode = was

    def _reclaim(self, steps, task_vars):
        """The reclaim after the stop: the one the stop's module run made (vllm_process's ``reclaim``), else gpu_reclaim
        with the preflight's settings."""
        reading = (steps.get("stopped") or {}).get("reclaim")
        if isinstance(reading, dict):
            return dict(reading)
        settings = (steps.get("preflight") or {}).get("reclaim_args")
        if not isinstance(settings, dict):
            return {"failed": True, "msg": "reclaim: no settings to reclaim with (the preflight's reclaim_args)"}
        return self._module("gpuops.fleet.gpu_reclaim", settings, task_vars, check_mode=bool(self._task.check_mode))

    def _preflight(self, plan, status, lock, task_vars):
        settings = reclaim_args(plan, status)
        # the lock's module run made the check-mode reading with the same options (vllm_lock's preflight)
        reading = (lock or {}).get("preflight")
        if isinstance(reading, dict):
            reading = dict(reading)
        else:
            reading = self._module("gpuops.fleet.gpu_reclaim", reading_args(plan, status), task_vars, check_mode=True)
        reading.pop("changed", None)
        refusal = preflight.refusal(plan, reading)
        if refusal:
            # what blocks, in words: the reading's lists would name the server's own workers too
            return {"failed": True, "msg": refusal, "would_fail": reading.get("would_fail") or [],
                    "containers_refused": reading.get("containers_refused") or []}
        if plan.get("caches") and plan["state"] != "stopped":
            # where the new server keeps its caches (the launch adds caches.env to its environment, creates caches.dirs)
            reading["cache_reading"] = reading.get("caches")
            reading["caches"] = caches.choose(plan, reading.get("caches"))
        reading.update(failed=False, msg=reading.get("msg") or "the stop would free the server's GPUs",
                       reclaim_args=settings, takeover_stop=preflight.takeover_stop(status),
                       # the launch mode as the run's first reading resolved it, for every later step
                       mode=status.get("mode") or plan["mode"])
        return reading

    def _verify(self, host, plan, steps, task_vars):
        gpus = verify.fresh_reading(steps.get("reclaim"))
        fresh = gpus is not None
        if gpus is None:
            reading = self._module("gpuops.fleet.gpu_facts", {"gpus": plan["gpu_words"]}, task_vars, check_mode=False)
            if reading.get("failed"):
                return dict(reading, msg="reading the server's GPUs failed: %s" % reading.get("msg"))
            gpus = (reading.get("ansible_facts") or {}).get("gpus") or []
        alone = verify.left_alone_pids(plan, steps.get("reclaim"), steps.get("preflight"))
        judged = verify.verdict(host, plan, gpus, alone, steps.get("reclaim"), bool(self._task.check_mode))
        if judged["failed"]:
            return {"failed": True, "msg": judged["msg"], "busy_gpus": [gpu.get("index") for gpu in judged["busy"]]}
        return dict(judged, fresh=fresh)
