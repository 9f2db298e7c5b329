# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Action for gpuops.fleet.vllm_server_plan: the plan of a run of the vllm_server role, from its variables, on the
controller (nothing runs on the host)."""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpuops.fleet.plugins.plugin_utils._names import COLLECTION, REMOVED_IN
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role import group as groups
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.plan import VARIABLES, PlanError, build, rollback_refusal, settled

display = Display()


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("good",))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        variables = {name: self._templar.template(task_vars[name]) for name in VARIABLES if name in task_vars}
        # an old name still works, with a warning that names the new one (one release)
        variables, deprecations = settled(variables)
        for message in deprecations:
            display.deprecated(message, version=REMOVED_IN, collection_name=COLLECTION)
        host = str(task_vars.get("inventory_hostname") or "")
        members = self._members(task_vars, variables, host)
        good = self._task.args.get("good")
        if good is not None and not isinstance(good, dict):
            return dict(result, failed=True, msg="good: expected vllm_last_good's result (a dict), got %s" % type(good).__name__)
        if good is not None:
            refusal = rollback_refusal(variables, good.get("summary"), str(good.get("mode") or ""), members)
            if refusal:
                return dict(result, failed=True, msg="vllm_server rollback: nothing was stopped: %s" % refusal)
        try:
            plan = build(variables, good.get("config") if good else None, bool(self._task.check_mode), host, members)
        except PlanError as exc:
            return dict(result, failed=True, msg=str(exc), problems=exc.problems)
        result.update(plan, changed=False)
        # the plan holds the server's environment and API key: kept for the role's tasks, never shown
        result["_ansible_no_log"] = True
        return result

    def _members(self, task_vars, variables, host):
        """The inventory as a server across hosts needs it (group.Members): every group, and the variables of each host
        of this host's groups. A variable a host leaves unset is this run's (the role's default, or a group's value
        they share), but vllm_server_nodes_group, which is that host's own or none."""
        if not str(variables.get(groups.GROUP) or "").strip():
            return None
        listed = {name: list(hosts) for name, hosts in (task_vars.get("groups") or {}).items()}
        hostvars = task_vars.get("hostvars") or {}
        names = {other for name, hosts in listed.items() if name not in ("all", "ungrouped") and host in hosts for other in hosts}
        names.update(listed.get(str(variables.get(groups.GROUP)).strip()) or [])
        read = set(groups.SAME + groups.VARIABLES + ("ansible_host", "vllm_server_health_host"))
        seen = {}
        for name in names:
            if name == host:
                seen[name] = dict(variables, ansible_host=task_vars.get("ansible_host"))
                continue
            theirs = hostvars.get(name) or {}
            values = dict(variables, **{groups.GROUP: None, "ansible_host": None})
            for key in read:
                if key in theirs:
                    values[key] = self._templar.template(theirs[key])
            seen[name] = values
        return groups.Members(listed, seen)
