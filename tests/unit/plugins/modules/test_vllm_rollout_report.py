# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuops.fleet.vllm_rollout_report: judge a batch from its measurement files, then write the report; check mode writes
nothing; bad settings fail naming the variable."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._rollout.decision import RolloutError
from ansible_collections.gpuops.fleet.plugins.modules.vllm_rollout_report import build_report

SETTINGS = {"threshold_pct": 3, "ttft_threshold_pct": 10, "serial": 1, "repeats": 3}


def measurement(folder, side, host, decode):
    os.makedirs(os.path.join(folder, side), exist_ok=True)
    runs = [{"decode_tok_s": d, "median_ttft_ms": 30.0, "p99_ttft_ms": 40.0, "completed": 4} for d in decode]
    with open(os.path.join(folder, side, host + ".json"), "w", encoding="utf-8") as handle:
        json.dump({"host": host, "runs": runs}, handle)


def params(path, **more):
    base = {"path": str(path), "step": "judge", "settings": SETTINGS, "batch": 1, "hosts": [], "failures": [], "plan": {},
            "fleet": [], "rollbacks": [], "outcome": {}}
    base.update(more)
    return base


def test_judge_then_final(tmp_path):
    measurement(str(tmp_path), "baseline", "n1", [47.3, 47.2, 47.4])
    measurement(str(tmp_path), "canary", "n1", [45.5, 45.4, 45.6])
    verdict = build_report(params(tmp_path, hosts=["n1"]), check_mode=False)
    assert verdict["halt"] and verdict["hosts"][0]["verdict"] == "regression"
    assert (tmp_path / "batches" / "01.json").exists()
    final = build_report(params(tmp_path, step="final", plan={"hosts": ["n1", "n2"], "dir": str(tmp_path)},
                                fleet=[{"host": "n1", "runs": "good", "pid": 7}], outcome={"status": "halted", "reason": "r"}), False)
    assert final["screen"][0] == "ROLLOUT HALTED: r"
    assert any("n2: not read" in line for line in final["screen"])
    assert "REGRESSION" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "summary.txt").read_text().splitlines() == final["screen"]


def test_check_mode_writes_nothing(tmp_path):
    measurement(str(tmp_path), "baseline", "n1", [47.3, 47.2, 47.4])
    measurement(str(tmp_path), "canary", "n1", [57.5, 57.4, 57.6])
    result = build_report(params(tmp_path, hosts=["n1"]), check_mode=True)
    assert result["changed"] and not result["halt"] and not (tmp_path / "batches").exists()


def test_bad_settings_fail_naming_the_variable(tmp_path):
    with pytest.raises(RolloutError, match="vllm_rollout_serial=0"):
        build_report(params(tmp_path, step="settings", settings=dict(SETTINGS, serial=0)), False)


def test_a_host_that_cannot_be_rolled_out_fails_the_host_step_naming_it(tmp_path):
    server = {"host": "n1", "name": "vllm-8000", "port": 8000, "tensor_parallel_size": 2, "state": "started"}
    assert not build_report(params(tmp_path, step="host", server=server, last_good={"port": 8000, "gpus": [0, 1]}), False)["halt"]
    with pytest.raises(RolloutError, match="nothing was touched: n1: no last known-good configuration is kept for vllm-8000"):
        build_report(params(tmp_path, step="host", server=server, last_good=None), False)


def test_a_batch_without_a_gate_writes_nothing_and_halts_on_a_failed_host(tmp_path):
    failed = {"host": "n2", "task": "Launch the server", "msg": "boom"}
    judged = build_report(params(tmp_path, batch=2, hosts=["n2"], gated=False, failures=[failed], so_far="batch 1 passed"), False)
    assert judged["halt"] and judged["rollout_reason"].startswith("batch 2 failed its gate: n2: Launch the server: boom.")
    assert not (tmp_path / "batches").exists()
    passed = build_report(params(tmp_path, batch=2, hosts=["n2"], gated=False, so_far="batch 1 passed"), False)
    assert not passed["halt"] and passed["rollout_reason"] == "batch 1 passed"


def test_the_final_step_tells_what_runs_where_and_a_mixed_fleet(tmp_path):
    fleet = [{"host": "n1", "running": True, "running_config_hash": "new", "running_is_good": False, "config_hash": "new", "pid": 7},
             {"host": "n2", "running": False, "running_config_hash": None, "running_is_good": False, "config_hash": "new", "pid": None}]
    final = build_report(params(tmp_path, step="final", plan={"hosts": ["n1", "n2"], "dir": str(tmp_path)}, fleet=fleet,
                                halted=True, reason="batch 2 failed its gate: n2."), False)
    report = json.loads((tmp_path / "report.json").read_text())
    assert [entry["runs"] for entry in report["fleet"]] == ["new", "down"], report["fleet"]
    assert "The fleet is MIXED: n1 run the new configuration" in final["summary_md"]
