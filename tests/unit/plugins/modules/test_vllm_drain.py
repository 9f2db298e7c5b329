# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_drain as Ansible runs it: bad input fails naming the option, before anything is asked of the server."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.modules import vllm_drain
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import call_main

pytestmark = pytest.mark.usefixtures("captured")


@pytest.mark.parametrize("args, needle", [
    ({"url": "ftp://host"}, "url"),
    ({"url": "http://127.0.0.1:1", "timeout": 1e9}, "timeout"),
    ({"url": "http://127.0.0.1:1", "interval": 0}, "interval"),
])
def test_bad_input_names_the_option(args, needle):
    result = call_main(vllm_drain, args)
    assert result["failed"] and needle in result["msg"], result
