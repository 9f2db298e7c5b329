# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation budget: one per host per window, at most M hosts at once, K failures then a person, dry run, and
one audit JSON line per decision and end."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._watch import budget as b


class World:
    def __init__(self, **policy):
        self.now = 1000.0
        self.lines = []
        self.budget = b.Budget(b.Policy(**policy), lambda: self.now, self.lines.append)

    def audit(self):
        return [json.loads(line) for line in self.lines]


def test_one_remediation_per_host_per_window():
    w = World(window_s=600, max_hosts=5)
    assert w.budget.decide("n1", "engine_dead").action == b.REMEDIATE
    assert w.budget.decide("n1", "engine_dead").action == b.SKIP  # still running
    w.budget.finished("n1", ok=True)
    w.now += 599
    later = w.budget.decide("n1", "server_down")
    assert later.action == b.SKIP and "at most one per 600 s" in later.reason
    w.now += 1
    assert w.budget.decide("n1", "server_down") == b.Decision(b.REMEDIATE, "n1", "server_down", "gpuops.fleet.restart_vllm",
                                                              "run gpuops.fleet.restart_vllm")


def test_at_most_m_hosts_at_once():
    w = World(max_hosts=2)
    assert [w.budget.decide(h, "orphaned_gpu_memory").action for h in ("n1", "n2", "n3")] == [b.REMEDIATE, b.REMEDIATE, b.SKIP]
    assert "2 host(s) already remediated at once (n1, n2), at most 2" in w.audit()[-1]["reason"]
    w.budget.finished("n2", ok=True)
    assert w.budget.decide("n3", "orphaned_gpu_memory").action == b.REMEDIATE


def test_k_failures_then_a_person():
    w = World(window_s=60, max_failures=2)
    assert w.budget.decide("n1", "engine_dead").action == b.REMEDIATE
    assert not w.budget.finished("n1", ok=False, detail="not ready")
    w.now += 60
    assert w.budget.decide("n1", "engine_dead").action == b.REMEDIATE
    assert w.budget.finished("n1", ok=False)
    w.now += 3600
    held = w.budget.decide("n1", "engine_dead")
    assert held.action == b.PERSON and "2 remediations in a row failed" in held.reason and held.playbook is None
    w.budget.release("n1", "alice")
    assert w.budget.decide("n1", "engine_dead").action == b.REMEDIATE


def test_a_success_resets_the_failures_and_old_failures_are_forgotten():
    w = World(window_s=1, max_failures=2, failure_window_s=100)
    for ok in (False, True, False):
        assert w.budget.decide("n1", "server_down").action == b.REMEDIATE
        assert not w.budget.finished("n1", ok=ok)
        w.now += 10
    w.now += 100  # the last failure is older than the failure window
    assert w.budget.decide("n1", "server_down").action == b.REMEDIATE
    assert not w.budget.finished("n1", ok=False)


def test_a_condition_without_a_playbook_needs_a_person():
    w = World()
    found = w.budget.decide("n1", "gpu_lost", {"gpu": 7})
    assert found.action == b.PERSON and "no playbook remediates gpu_lost" in found.reason and not w.budget.running


def test_dry_run_runs_nothing_but_keeps_the_pace():
    w = World(dry_run=True, window_s=600, max_hosts=1)
    first = w.budget.decide("n1", "engine_dead")
    assert first.action == b.DRY_RUN and first.playbook == "gpuops.fleet.restart_vllm" and not w.budget.running
    assert w.budget.decide("n2", "engine_dead").action == b.DRY_RUN  # nothing runs, so no host blocks another
    assert w.budget.decide("n1", "engine_dead").action == b.SKIP
    assert all(line["dry_run"] for line in w.audit())


def test_every_decision_and_end_is_one_audit_line_with_its_evidence():
    w = World()
    w.budget.decide("n1", "orphaned_gpu_memory", {"gpu": 3, "pid": 4242, "name": "VLLM::Worker_TP1"})
    w.budget.finished("n1", ok=True, detail="freed 5000 MiB")
    first, second = w.audit()
    assert first == {"event": "decision", "host": "n1", "at": 1000.0, "dry_run": False, "running": ["n1"], "condition": "orphaned_gpu_memory",
                     "evidence": {"gpu": 3, "pid": 4242, "name": "VLLM::Worker_TP1"}, "action": "remediate",
                     "reason": "run gpuops.fleet.gpu_cleanup", "playbook": "gpuops.fleet.gpu_cleanup"}
    assert second["event"] == "finished" and second["ok"] and second["running"] == [] and second["person_needed"] is False
    assert all("\n" not in line for line in w.lines)


@pytest.mark.parametrize("field, value, said", [
    ("window_s", 0, "window_s: 0 must be a number of seconds above 0"),
    ("max_hosts", 0, "max_hosts: 0 must be a whole number, 1 or more"),
    ("max_failures", True, "max_failures: True"),
    ("failure_window_s", "1h", "failure_window_s: '1h'"),
    ("dry_run", "yes", "dry_run: 'yes' must be true or false"),
])
def test_a_bad_policy_is_named(field, value, said):
    with pytest.raises(ValueError, match="^" + said):
        b.Budget(b.Policy(**{field: value}))
