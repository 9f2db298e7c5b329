# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Action for gpuops.fleet.vllm_ready: run the module in short steps and show, between them, what is awaited."""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

MODULE = "gpuops.fleet.vllm_ready"
# a wait given a state_file (the role's ready step) runs on the host through vllm_process's ready: the lock, the stop and
# the launch run that module in the same run, so its payload is built once on the controller for all four (a module's
# AnsiballZ build is most of a task's CPU on the controller)
THROUGH = "gpuops.fleet.vllm_process"

# seconds per module call: each call ends early when the server is ready or dies, so this only sets how often
# progress is shown; a call costs a module start-up on the host, so not much less than this
PROGRESS_EVERY_S = 10.0


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        # api_key is passed on to every call and never displayed (the module's no_log hides it in its results)
        args = dict(self._task.args)
        # the launch's own wait, when it made one (vllm_process's waited): its reply comes first
        waited = args.pop("waited", None)
        if self._play_context.check_mode:
            return self._wait(args, task_vars)
        step = args.get("poll_for") or PROGRESS_EVERY_S
        host = task_vars.get("inventory_hostname", "?") if task_vars else "?"
        reply = dict(waited) if isinstance(waited, dict) and waited else None
        for warning in (reply or {}).pop("warnings", None) or []:
            display.warning(str(warning))
        # the launch's time: the start-up is kept when this ready step follows that launch (a server that ran before is not)
        launched = (reply or {}).pop("launched_at", None)
        if launched is not None and isinstance(args.get("startup"), dict):
            args["startup"] = dict(args["startup"], launched=launched)
        while True:
            if reply is None:
                reply = self._wait(dict(args, poll_for=step), task_vars)
            if reply.get("failed") or reply.get("ready") or "since" not in reply:
                result.update(reply)
                return result
            args["since"] = reply["since"]
            display.display("  [%s] waiting for %s/health: %s after %.0f s (timeout %s s)"
                            % (host, str(args.get("url", "")).rstrip("/"), reply.get("status"), reply.get("elapsed_s", 0),
                               reply.get("timeout_s", args.get("timeout", 900))))
            reply = None

    def _wait(self, args, task_vars):
        """vllm_ready's module run with ``args``: through vllm_process's ready when it names a state_file."""
        if not args.get("state_file"):
            return self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        return self._execute_module(module_name=THROUGH, module_args={"state_file": args["state_file"], "ready": args},
                                    task_vars=task_vars)
