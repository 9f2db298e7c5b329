# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_listener on real processes this test starts: a bash that runs a listener named like `vllm serve` (the
hand_started fixture, ended by the test's Popen handle and by PID)."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.modules import vllm_listener
from ansible_collections.gpuops.fleet.tests.unit.plugins.loopback_http import refused_port
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import call_main

psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.usefixtures("captured")


@pytest.mark.parametrize("args, needle", [
    ({"port": 0}, "port"),
    ({"port": 70000}, "port"),
    ({"port": 8000, "match": ["("]}, "match"),
    ({"port": 8000, "match": [""]}, "match"),
])
def test_bad_input_names_the_option(args, needle):
    result = call_main(vllm_listener, args)
    assert result["failed"] and needle in result["msg"], result


def test_nothing_listens():
    with refused_port() as port:
        result = call_main(vllm_listener, {"port": port})
    assert not result.get("failed") and result["listener"] is None and "nothing listens" in result["msg"]


def test_a_server_under_a_live_shell_may_be_taken_over(hand_started):
    """The server on the port, started under a shell that still runs: how it was started, its tree, its command with the
    key masked; refused, naming it, when it is not vLLM by the patterns given."""
    shell, server, port = hand_started
    found = call_main(vllm_listener, {"port": port})["listener"]
    assert (found["pid"], found["how"], found["by"], found["vllm"], found["takeover"]) == (server, "shell", shell.pid, True, True)
    assert "sk-unit-secret" not in json.dumps(found) and "--api-key ********" in found["command"]
    assert found["tree"] == [c.pid for c in psutil.Process(server).children(recursive=True)] and len(found["tree"]) == 1
    # not vLLM by these patterns: refused, naming it
    other = call_main(vllm_listener, {"port": port, "match": ["^nginx"]})["listener"]
    assert not other["takeover"] and "not a vLLM server" in other["refusal"] and "PID %d" % server in other["refusal"]
