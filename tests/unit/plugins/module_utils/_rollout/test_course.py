# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The course of a rollout: who can be rolled out, when a batch halts it and why, what runs where, how it ends."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._rollout.course import batch_course, cannot_roll_out, outcome, runs

SERVER = {"name": "vllm-8000", "port": 8000, "tensor_parallel_size": 2, "state": "started"}
GOOD = {"port": 8000, "gpus": [0, 1]}


@pytest.mark.parametrize("server, good, words", [
    (SERVER, GOOD, ""),
    (SERVER, {"port": "8000", "gpus": [0, 1]}, ""),
    (SERVER, None, "node-1: no last known-good configuration is kept for vllm-8000, so a rollback would have nothing to launch"),
    (dict(SERVER, port=8001), GOOD, "vllm_server_port=8001 but the server listens on 8000: a rollout changes a configuration"),
    (dict(SERVER, tensor_parallel_size=4), GOOD, "vllm_server_tensor_parallel_size=4 but the server runs on 2 GPU(s)"),
    (dict(SERVER, state="stopped"), GOOD, "vllm_server_state=stopped: a rollout starts servers"),
    (dict(SERVER, tensor_parallel_size=4, workers=2), GOOD, ""),  # a host's share of a server across hosts
    (dict(SERVER, workers=1), GOOD, "vllm_server_tensor_parallel_size=2 (1 worker(s) on this host) but the server runs on 2 GPU(s)"),
])
def test_who_can_be_rolled_out(server, good, words):
    said = cannot_roll_out("node-1", server, good)
    assert (said.startswith("rollout_vllm: nothing was touched: node-1: ") and words in said) if words else said == ""


def test_a_gated_batch_halts_on_its_gate_and_names_the_hosts_rolled_back():
    halt, reason = batch_course(1, ["a"], True, {"halt": True, "reason": "a: decode tok/s per stream fell 9%"}, [], "")
    assert halt and reason == ("batch 1 (the canary: a) failed its gate: a: decode tok/s per stream fell 9%. Rolled back: a; the hosts"
                               " of later batches were not touched.")


def test_a_gated_batch_that_passes_adds_its_figures_to_the_reason():
    halt, reason = batch_course(2, ["b", "c"], True, {"halt": False, "reason": "b: +1%; c: +2%"}, [], "batch 1 (the canary: a) passed: a: +0%")
    assert not halt and reason == "batch 1 (the canary: a) passed: a: +0%; batch 2 passed: b: +1%; c: +2%"


def test_a_batch_without_a_gate_halts_only_when_a_host_failed():
    assert batch_course(3, ["d"], False, None, [], "so far") == (False, "so far")
    halt, reason = batch_course(3, ["d", "e"], False, None, [{"host": "e", "task": "Launch the server", "msg": "boom"}], "so far")
    assert halt and reason == "batch 3 failed its gate: e: Launch the server: boom. Rolled back: d, e; the hosts of later batches were not touched."


@pytest.mark.parametrize("running, running_hash, good, expected", [
    (False, None, False, "down"),
    (True, "new", False, "new"),
    (None, "new", False, "new"),  # a unit's record names no process
    (True, "old", True, "good"),
    (True, "old", False, "other"),
])
def test_what_runs_where(running, running_hash, good, expected):
    assert runs(running, running_hash, good, "new") == expected


def test_how_a_rollout_ends():
    assert outcome(False, False, "", [], ["a"]) == {"status": "passed", "reason": "every batch rolled out"}
    assert outcome(False, False, "batch 1 passed", ["a"], ["a"])["reason"] == "every batch rolled out; batch 1 passed"
    assert outcome(False, True, "halted.", ["a"], ["a", "b"])["reason"] == (
        "halted. The fleet is MIXED: a run the new configuration, the others do not.")
    assert outcome(False, True, "halted.", [], ["a", "b"]) == {"status": "halted", "reason": "halted."}
    assert outcome(True, False, "", [], ["a"])["status"] == "check mode"
