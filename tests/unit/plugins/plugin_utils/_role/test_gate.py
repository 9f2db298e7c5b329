# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A server across hosts changes whole or not at all: the verdicts over every host's step."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.plugin_utils._role import gate

PLAN = {"host": "n1", "group": {"name": "glm5_a", "nodes": ["n1", "n2"], "size": 2}}
ONE = {"host": "n1", "group": None}
BOTH = ["n1", "n2"]


def test_the_server_is_left_alone_only_when_every_host_runs_this_configuration():
    same = {"n1": {"reason": ""}, "n2": {"reason": ""}}
    assert gate.reading(PLAN, same["n1"], same, BOTH)["unchanged"] is True
    degraded = dict(same, n2={"reason": "it does not run"})
    said = gate.reading(PLAN, same["n1"], degraded, BOTH)
    assert said["unchanged"] is False and not said["failed"] and said["nodes"] == {"n2": "it does not run"}
    forced = {"n1": {"reason": None}, "n2": {"reason": None}}
    assert gate.reading(PLAN, None, forced, BOTH)["unchanged"] is False
    lost = dict(same, n2={"unreachable": True, "msg": "ssh: no route"})
    assert "n2 was unreachable: ssh: no route" in gate.reading(PLAN, same["n1"], lost, BOTH)["msg"]


def test_a_host_left_out_of_the_run_refuses_the_whole_run():
    said = gate.reading(PLAN, {"reason": ""}, {"n1": {"reason": ""}, "n2": None}, ["n1"])
    assert said["failed"] and "gpu" not in said["msg"] and "n2 is not in this run: nothing was stopped on any host" in said["msg"]


def test_a_server_of_one_host_is_judged_on_its_own_reading():
    assert gate.reading(ONE, {"reason": ""}, {}, ["n1"])["unchanged"] is True
    assert gate.reading(ONE, {"reason": "drifted"}, {}, ["n1"])["unchanged"] is False
    assert gate.reading(ONE, None, {}, ["n1"])["unchanged"] is False
    assert not gate.preflight(ONE, {}, ["n1"])["failed"] and not gate.ready(ONE, {}, ["n1"])["failed"]


def test_nothing_stops_unless_every_other_host_passed_its_preflight():
    assert not gate.preflight(PLAN, {"n1": {}, "n2": {"failed": False}}, BOTH)["failed"]
    refused = gate.preflight(PLAN, {"n1": {}, "n2": {"failed": True, "msg": "GPU 0 is held by PID 9"}}, ["n1"])
    assert refused["failed"] and refused["msg"] == "nothing was stopped on any host of server group glm5_a: n2: GPU 0 is held by PID 9"
    never = gate.preflight(PLAN, {"n1": {}, "n2": None}, ["n1"])
    assert "n2 is not in this run" in never["msg"] and "before the preflight" in never["msg"]


def test_a_launch_is_kept_only_when_every_host_is_ready():
    assert not gate.ready(PLAN, {"n2": {"failed": False}}, BOTH)["failed"]
    failed = gate.ready(PLAN, {"n2": {"failed": True, "msg": "the server exited while starting"}}, ["n1"])
    assert failed["failed"] and failed["refused"] == ["n2: the server exited while starting"]
