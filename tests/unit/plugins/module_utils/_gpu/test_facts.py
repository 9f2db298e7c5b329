# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_facts' reading of a GPU holder (_gpu/facts.process_fact)."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.facts import process_fact
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import Holder


def test_process_fact_joins_holder_and_description():
    info = {"name": "VLLM::Worker_TP3", "cmdline": ["VLLM::Worker_TP3"], "username": "vllm", "state": "sleeping",
            "ppid": 1, "create_time": 1.0, "visible": True}
    assert process_fact(Holder(42, None, "compute"), info) == dict(info, pid=42, used_memory_mib=None, type="compute")
