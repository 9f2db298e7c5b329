# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The unhealthy_gpus filter: gpu_facts in, the indices of unhealthy GPUs out; bad input named."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.filter.unhealthy_gpus import FilterModule as UnhealthyModule, unhealthy_gpus
from ansible_collections.gpuops.fleet.tests.unit.plugins.filter.test_free_gpus import FACTS, gpu


def test_unhealthy_gpus():
    assert unhealthy_gpus(FACTS) == [4, 5, 7]
    assert unhealthy_gpus({"gpus": [gpu(0, clocks_event_reasons=["hw_slowdown"])]}) == []
    assert UnhealthyModule().filters()["unhealthy_gpus"] is unhealthy_gpus


def test_unhealthy_bad_input():
    with pytest.raises(AnsibleFilterError, match="unhealthy_gpus: expected"):
        unhealthy_gpus(42)
