# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Action for gpuops.fleet.vllm_lock: record who runs (this controller, its ansible-playbook process), and take
over the lock of a run from this controller whose ansible-playbook process is gone (killed, interrupted)."""

from __future__ import annotations

import multiprocessing
import os
import secrets
import socket
import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpuops.fleet.plugins.module_utils._server.lock import who
from ansible_collections.gpuops.fleet.plugins.plugin_utils._lock_controller import controller_identity, holder_verdict, leftover_workers
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role import gate
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.preflight import plan_inputs

display = Display()

MODULE = "gpuops.fleet.vllm_lock"
# a lock with a reading (the role's) runs on the host through vllm_process's lock: the stop and the launch run that module
# in the same run, so its payload is built once on the controller for the three (a module's AnsiballZ build is most of
# a task's CPU on the controller)
READING_MODULE = "gpuops.fleet.vllm_process"
# the role's reading of what runs, registered on each host before its lock (read here for every host of a server group)
READ = "__vllm_server_read"
# how long a takeover waits for the task workers that a killed ansible-playbook left running (each ends after its task)
LEFTOVER_WAIT_S = 120.0


def playbook_pid() -> int:
    """The ansible-playbook process: a task runs in a worker forked from it, so the worker's parent.

    multiprocessing knows its parent only in such a worker; anywhere else (no worker) this process is the one.
    """
    parent = multiprocessing.parent_process()
    if parent is not None and parent.pid == os.getppid():
        return parent.pid
    return os.getpid()


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        if args.get("state", "locked") != "locked":
            if args.get("token") and args.get("released_token") == args.get("token"):
                # released already, by the task whose result names this token (the ready step): nothing to ask the host
                result.update(changed=False, acquired=False, released=False, holder=None, token=args["token"],
                              msg="already released by the task that released token %s" % args["token"])
                return result
            result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars))
            return result
        if isinstance(args.get("preflight"), dict) and gate.nodes(args["preflight"]):
            # a server across hosts: changed whole or left alone whole, judged on every host's reading before any lock
            whole = self._whole(args["preflight"], task_vars or {})
            if whole["failed"] or whole["unchanged"]:
                result.update(whole, changed=False, acquired=False)
                return result
        if isinstance(args.get("preflight"), dict):
            # the role's plan: only what the preflight's reading uses goes to the host (never the plan's secrets)
            args["preflight"] = plan_inputs(args["preflight"])
        # one token for this lock and every retry of it below, made here when the task gives none
        args.setdefault("token", None)
        args["token"] = args["token"] or secrets.token_hex(10)
        here = controller_identity(playbook_pid(), socket.gethostname())
        given = args.get("controller") if isinstance(args.get("controller"), dict) else {}
        args["controller"] = dict(here, **{key: value for key, value in given.items() if value is not None})
        reply = self._lock(args, task_vars)
        holder = reply.get("holder") if reply.get("failed") else None
        if isinstance(holder, dict) and holder.get("token") and not args.get("takeover"):
            gone, why = holder_verdict(holder, here)
            left = self._await_leftovers(holder, here, task_vars) if gone else []
            if left:
                gone, why = False, ("%s, but its task worker(s) PID %s still run there (a task under way when it died);"
                                    " wait for them to end, or end them" % (why, ", ".join(str(pid) for pid in left)))
            if gone:
                retry = self._lock(dict(args, takeover=holder["token"]), task_vars)
                if (retry.get("took_over") or {}).get("token") == holder["token"]:
                    retry.setdefault("warnings", []).append(
                        "took over the lock %s from the run of %s, since %s: %s (killed or interrupted)"
                        % (args.get("path"), who(holder), holder.get("since_utc") or holder.get("since"), why))
                reply = retry
            else:
                reply["msg"] = "%s Not taken over automatically: %s." % (reply.get("msg", ""), why)
        result.update(reply)
        return result

    @staticmethod
    def _whole(plan, task_vars):
        """gate.reading over the role's readings (``__vllm_server_read``) of every host of the plan's server group."""
        hostvars = task_vars.get("hostvars") or {}
        readings = {}
        for node in gate.nodes(plan):
            value = (hostvars.get(node) or {}).get(READ)
            readings[node] = {"reason": None} if isinstance(value, dict) and value.get("skipped") else (dict(value) if isinstance(value, dict) else None)
        own = task_vars.get(READ)
        return gate.reading(plan, own if isinstance(own, dict) and not own.get("skipped") else None, readings,
                            list(task_vars.get("ansible_play_batch") or []))

    def _lock(self, args, task_vars):
        """vllm_lock's module run with ``args`` (state locked): through vllm_process's lock when it reads what runs."""
        status = args.get("status")
        if not isinstance(status, dict):
            return self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        # vllm_process requires state_file: the reading's own (the lock's options check it)
        return self._execute_module(module_name=READING_MODULE, task_vars=task_vars,
                                    module_args={"state_file": status.get("state_file") or args.get("path"), "lock": args})

    @staticmethod
    def _await_leftovers(holder, here, task_vars):
        """Wait, bounded, until no task worker of the dead run runs on this controller; return those left."""
        there = holder.get("controller") or {}
        deadline = time.monotonic() + LEFTOVER_WAIT_S
        shown = 0.0
        while True:
            left = leftover_workers(there, here["pid"])
            if not left or time.monotonic() > deadline:
                return left
            if time.monotonic() - shown > 10:
                shown = time.monotonic()
                display.display("  [%s] waiting for the task worker(s) PID %s of the dead run %s to end before taking its lock"
                                % ((task_vars or {}).get("inventory_hostname", "?"), ", ".join(str(pid) for pid in left),
                                   holder.get("token")))
            time.sleep(0.5)
