# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Action for gpuops.fleet.fleet_names: the playbooks' settings under their current names, and a deprecation warning
for each old name the host sets (on the controller; nothing runs on the host)."""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpuops.fleet.plugins.plugin_utils._names import COLLECTION, IDLE_THRESHOLD, OLD, REMOVED_IN, STATE, settle

display = Display()


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False
    _requires_connection = False
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("old",))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        old = self._task.args.get("old")
        if not isinstance(old, list) or not all(isinstance(name, str) for name in old):
            return dict(result, failed=True, msg="old: expected a list of variable names, got %r" % (old,))
        unknown = [name for name in old if name not in OLD]
        if unknown:
            return dict(result, failed=True, msg="old: %s is no deprecated name of gpuops.fleet (known: %s)"
                        % (", ".join(unknown), ", ".join(sorted(OLD))))
        wanted = set(old) | {IDLE_THRESHOLD, STATE}
        variables = {name: self._templar.template(task_vars[name]) for name in wanted if name in task_vars}
        settled, deprecations = settle(variables, old)
        for message in deprecations:
            display.deprecated(message, version=REMOVED_IN, collection_name=COLLECTION)
        result.update(settled, changed=False, deprecated=[name for name in old if variables.get(name) is not None])
        return result
