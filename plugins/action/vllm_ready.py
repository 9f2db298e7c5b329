# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Action for gpuops.fleet.vllm_ready: run the module in short steps and show, between them, what is awaited."""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

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
        if self._play_context.check_mode:
            return self._execute_module(module_name="gpuops.fleet.vllm_ready", module_args=args, task_vars=task_vars)
        step = args.get("poll_for") or PROGRESS_EVERY_S
        host = task_vars.get("inventory_hostname", "?") if task_vars else "?"
        while True:
            reply = self._execute_module(module_name="gpuops.fleet.vllm_ready", module_args=dict(args, poll_for=step),
                                         task_vars=task_vars)
            if reply.get("failed") or reply.get("ready") or "since" not in reply:
                result.update(reply)
                return result
            args["since"] = reply["since"]
            display.display("  [%s] waiting for %s/health: %s after %.0f s (timeout %s s)"
                            % (host, str(args.get("url", "")).rstrip("/"), reply.get("status"), reply.get("elapsed_s", 0),
                               args.get("timeout", 900)))
