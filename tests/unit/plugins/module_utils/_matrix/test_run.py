# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark matrix report (_matrix/run) on run folders written here: every file from one report, check mode,
the servers left running, bad input."""

from __future__ import annotations

import csv
import json
import os

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._matrix import render
from ansible_collections.gpuops.fleet.plugins.module_utils._matrix.run import MatrixError, run_report

LL = {"name": "LL", "env": {"NCCL_PROTO": "LL"}}


def write_run(run_dir, configs, decode, hosts=("h1",), leave="best"):
    """A run folder: decode[config] holds the decode tok/s of each round on every host (None: a failed restart)."""
    os.makedirs(os.path.join(run_dir, "raw"))
    repeats = len(next(iter(decode.values())))
    load = {"endpoint": "completions", "input_len": 16, "output_len": 32, "num_requests": 4, "concurrency": 2, "warmup_requests": 1}
    plan = {"hosts": list(hosts), "configs": configs, "baseline": configs[0]["name"], "repeats": repeats, "leave": leave,
            "started": "2026-01-01T00:00:00Z", "benchmark": load}
    with open(os.path.join(run_dir, "plan.json"), "w", encoding="utf-8") as handle:
        json.dump(plan, handle)
    order = 0
    for host in hosts:
        for index in range(repeats):
            for config in configs:
                order += 1
                value = decode[config["name"]][index]
                cell = {"host": host, "config": config["name"], "round": index + 1, "order": order, "env": config.get("env", {}), "args": []}
                if value is None:
                    cell.update(status="failed", stage="restart", task="Wait for /health", error="exited | while\n starting")
                else:
                    cell.update(status="ok", server={"pid": 100 + order},
                                summary={"decode_tok_s": value, "median_tpot_ms": 1000.0 / value, "completed": 4, "failed": 0})
                with open(os.path.join(run_dir, "raw", "%s__r%d__%s.json" % (host, index + 1, config["name"])), "w") as handle:
                    json.dump(cell, handle)
    return str(run_dir)


def params(path, step="report", left_running=None):
    return {"path": str(path), "step": step, "left_running": left_running}


@pytest.fixture(autouse=True)
def no_matplotlib(monkeypatch):
    """The chart needs matplotlib, which the unit test environment may lack: draw nothing, say so."""
    monkeypatch.setattr(render, "chart_png", lambda report: (None, "skipped: not in unit tests"))


def test_a_config_with_a_failure_cannot_win_and_best_falls_back_to_the_baseline(tmp_path):
    run_dir = write_run(tmp_path / "run", [{"name": "base"}, LL], {"base": [None, None], "LL": [57.6, None]}, hosts=("h1", "h2"))
    result = run_report(params(run_dir), False)
    assert result["winner"]["config"] is None
    assert result["leave"] == {"mode": "best", "config": "base", "reason": "no configuration was measured without a failure: the baseline instead"}
    assert len(result["failures"]) == 6 and result["measurements"] == 8
    summary = result["summary_md"]
    assert "No winner" in summary and summary.count("| restart |") == 6
    assert "exited / while starting" in summary  # the table's separator cannot break a row, and neither can a newline


def test_report_writes_every_file_from_one_report_and_a_second_run_changes_nothing(tmp_path):
    run_dir = write_run(tmp_path / "run", [{"name": "base"}, LL], {"base": [47.3, 47.2], "LL": [57.6, 57.5]})
    first = run_report(params(run_dir), False)
    assert first["changed"] is True and first["winner"]["config"] == "LL" and first["winner"]["significant"] is True
    assert sorted(os.listdir(run_dir)) == ["plan.json", "raw", "report.html", "report.json", "results.csv", "summary.md"]
    with open(os.path.join(run_dir, "summary.md"), encoding="utf-8") as handle:
        summary = handle.read()
    assert summary == first["summary_md"] and "discourages setting `NCCL_PROTO` in production" in summary
    assert "chart: skipped: not in unit tests" in summary
    with open(os.path.join(run_dir, "report.json"), encoding="utf-8") as handle:
        report = json.load(handle)
    assert report["winner"] == first["winner"] and report["chart"] is None
    with open(os.path.join(run_dir, "results.csv"), newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["config"] for r in rows] == ["base", "LL", "base", "LL"] and rows[1]["decode_tok_s"] == "57.6"
    assert rows[0]["server_pid"] == "101" and rows[0]["env"] == "{}"
    second = run_report(params(run_dir), False)
    assert second["changed"] is False and second["changed_files"] == []


def test_check_mode_writes_nothing_and_still_says_who_wins(tmp_path):
    run_dir = write_run(tmp_path / "run", [{"name": "base"}, LL], {"base": [47.3], "LL": [57.6]})
    result = run_report(params(run_dir), True)
    assert result["changed"] is True and result["winner"]["config"] == "LL" and len(result["changed_files"]) == 4
    assert sorted(os.listdir(run_dir)) == ["plan.json", "raw"]


def test_left_running_adds_each_host_and_names_the_one_not_reached_idempotently(tmp_path):
    run_dir = write_run(tmp_path / "run", [{"name": "base"}, LL], {"base": [47.3], "LL": [57.6]}, hosts=("h1", "h2", "h3"))
    run_report(params(run_dir), False)
    left = [{"host": "h1", "config": "LL", "status": "ok", "pid": 4242, "action": "started"},
            {"host": "h2", "config": "LL", "status": "failed", "task": "Wait for /health", "msg": "exited\n  early"}]
    first = run_report(params(run_dir, "left_running", left), False)
    summary = first["summary_md"]
    assert summary.endswith("- h1: runs **LL** (server PID 4242, started)\n"
                            "- h2: FAILED to leave LL running at \"Wait for /health\": exited early\n"
                            "- h3: not reached (unreachable, or failed before the end)\n")
    with open(os.path.join(run_dir, "left_running.json"), encoding="utf-8") as handle:
        assert json.load(handle) == left
    with open(os.path.join(run_dir, "report.json"), encoding="utf-8") as handle:
        assert json.load(handle)["left_running"][0]["pid"] == 4242
    assert run_report(params(run_dir, "left_running", left), False)["changed"] is False
    # without the option, the folder's own left_running.json is read
    assert run_report(params(run_dir, "left_running"), False)["summary_md"] == summary


@pytest.mark.parametrize("setup, args, needle", [
    ("none", {}, "is not a folder"),
    ("empty", {}, "cannot read the plan"),
    ("bad_plan", {}, "is not a benchmark matrix plan"),
    ("run", {"left_running": []}, "left_running: only with step=left_running"),
    ("run", {"step": "left_running", "left_running": [{"host": "h1"}]}, "left_running: the option must be a list of {host, config, status"),
    ("run", {"step": "left_running"}, "cannot read what runs now"),
])
def test_bad_input_names_the_option_and_writes_nothing(tmp_path, setup, args, needle):
    run_dir = tmp_path / "run"
    if setup == "empty":
        run_dir.mkdir()
    elif setup == "bad_plan":
        run_dir.mkdir()
        (run_dir / "plan.json").write_text('{"hosts": []}')
    elif setup == "run":
        write_run(run_dir, [{"name": "base"}], {"base": [47.3]})
    before = sorted(os.listdir(run_dir)) if run_dir.exists() else None
    with pytest.raises(MatrixError, match=needle.replace("{", "\\{")):
        run_report(dict(params(run_dir), **args), False)
    assert (sorted(os.listdir(run_dir)) if run_dir.exists() else None) == before
