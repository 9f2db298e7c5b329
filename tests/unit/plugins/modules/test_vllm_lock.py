# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_lock's documentation: it documents its argument spec (so does vllm_process), and the suboptions of
status.generate, status.listener and status.decide word for word as vllm_process documents its own options of those names
(one argument spec serves both: _server/status.py). A doc fragment cannot hold them once for both: Ansible merges a
fragment into a module's options one level deep (an option's keys), vllm_lock nests them under status, and a fragment's
text must be a literal string (ansible-test's yamllint sanity test reads it from the source)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.modules import vllm_lock, vllm_process
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import (
    assert_documented_as_specified, documented_options,
)

KEYS = ("type", "elements", "default", "choices", "required")


@pytest.mark.parametrize("module", [vllm_lock, vllm_process], ids=["vllm_lock", "vllm_process"])
def test_documented_options_are_the_argument_spec(module):
    assert_documented_as_specified(documented_options(module.DOCUMENTATION), module.ARGUMENT_SPEC, keys=KEYS)


def test_status_suboptions_are_documented_as_vllm_process_documents_its_own():
    process = documented_options(vllm_process.DOCUMENTATION)
    status = documented_options(vllm_lock.DOCUMENTATION)["status"]["suboptions"]
    for name in ("generate", "listener", "decide"):
        assert set(status[name]["suboptions"]) == set(process[name]["suboptions"]), name
        for key, option in process[name]["suboptions"].items():
            if (name, key) == ("listener", "unit"):
                # the option that names the server's unit: unit in vllm_process, status.unit in vllm_lock
                option = dict(option, description=option["description"].replace("O(unit)", "O(status.unit)"))
            assert status[name]["suboptions"][key] == option, (name, key)
