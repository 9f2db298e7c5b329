# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The unit_crash_loop filter: systemctl show's output in, the crash-loop line out (a controller-side test: filters
import ansible.errors, which the module_utils tests' environment does not have)."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.filter.unit_crash_loop import FilterModule, unit_crash_loop
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils._server.test_unit import show


def test_the_filter_reads_systemctl_output():
    text = show(ActiveState="activating", SubState="auto-restart", NRestarts="2", Result="exit-code", ExecMainCode="1",
                ExecMainStatus="1")
    assert unit_crash_loop(text).startswith("crash loop: 2 restarts, last exit status 1")
    assert unit_crash_loop(show()) == ""
    assert FilterModule().filters()["unit_crash_loop"] is unit_crash_loop
    with pytest.raises(AnsibleFilterError, match="unit_crash_loop"):
        unit_crash_loop({"NRestarts": "2"})
