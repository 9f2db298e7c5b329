# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module gpuops.fleet.vllm_benchmark_report on run folders written here: the judgement of a margin against the
run-to-run spread, the NCCL_PROTO note, a missing matplotlib, a failed baseline, and report.html's sections of a
workload's results in chromium. Runs the module as the playbook does (real Ansible, on the controller, with the
controller's Python)."""

from __future__ import annotations

import json
import subprocess
import typing as t
from pathlib import Path

import pytest

from ansible_run import ansible_env, BIN
from report_fleet import assert_self_contained, chart_points, console_errors, dump_dom, numbers

MODULE = "gpuops.fleet.vllm_benchmark_report"


def run_report_module(run_dir: Path, step: str, **env: str) -> "subprocess.CompletedProcess[str]":
    """The module on the implicit localhost (the controller's Python), with ad-hoc ansible."""
    return subprocess.run([str(BIN / "ansible"), "localhost", "-m", MODULE, "-a", json.dumps({"path": str(run_dir), "step": step})],
                          env=ansible_env(**env), capture_output=True, text=True, timeout=120, check=False)


def write_run(run_dir: Path, configs: t.List[t.Dict[str, t.Any]], decode: t.Dict[str, t.List[t.Optional[float]]],
              hosts: t.Sequence[str] = ("h1",), leave: str = "best", **carried: t.Any) -> Path:
    """A run folder: decode[config] is the decode tok/s of each round on every host (None: a failed restart); `carried`
    goes into each measured cell's summary."""
    (run_dir / "raw").mkdir(parents=True)
    plan = {"hosts": list(hosts), "configs": configs, "baseline": configs[0]["name"],
            "repeats": len(next(iter(decode.values()))), "leave": leave, "started": "2026-01-01T00:00:00Z",
            "benchmark": {"endpoint": "completions", "input_len": 16, "output_len": 32, "num_requests": 4,
                          "concurrency": 2, "warmup_requests": 1}}
    (run_dir / "plan.json").write_text(json.dumps(plan))
    order = 0
    for host in hosts:
        for index in range(plan["repeats"]):
            for config in configs:
                order += 1
                value = decode[config["name"]][index]
                cell = {"host": host, "config": config["name"], "round": index + 1, "order": order,
                        "env": config.get("env", {}), "args": [], "started": "2026-01-01T00:00:%02dZ" % order}
                if value is None:
                    cell.update(status="failed", stage="restart", task="Wait for /health", error="exited while starting")
                else:
                    cell.update(status="ok", server={"pid": 100 + order},
                                summary=dict({"decode_tok_s": value, "median_tpot_ms": 1000.0 / value, "completed": 4,
                                              "failed": 0}, **carried))
                (run_dir / "raw" / ("%s__r%d__%s.json" % (host, index + 1, config["name"]))).write_text(json.dumps(cell))
    return run_dir


def report(run_dir: Path, **env: str) -> t.Dict[str, t.Any]:
    proc = run_report_module(run_dir, "report", **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((run_dir / "report.json").read_text())


def test_a_margin_within_the_spread_is_called_noise_and_no_nccl_note_without_nccl_proto(tmp_path):
    configs = [{"name": "base"}, {"name": "big-batch", "env": {"VLLM_X": "1"}}]
    run_dir = write_run(tmp_path / "run", configs, {"base": [50.0, 52.0, 48.0], "big-batch": [51.0, 50.5, 50.8]})
    result = report(run_dir)
    assert result["winner"]["config"] == "big-batch" and result["winner"]["significant"] is False
    assert result["winner"]["margin_tok_s"] == pytest.approx(0.8) and result["winner"]["spread_tok_s"] == 4.0
    summary = (run_dir / "summary.md").read_text()
    assert "NOT larger than the run-to-run spread (4.00 tok/s): within noise" in summary
    assert "NCCL_PROTO" not in summary
    assert "| big-batch | VLLM_X=1 | 3 / 3 | 50.80 | 50.50 - 51.00 | +1.6% |" in summary


def test_without_matplotlib_the_chart_is_skipped_with_a_note(tmp_path):
    blocker = tmp_path / "block" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('matplotlib blocked by the test')\n")
    configs = [{"name": "base"}, {"name": "LL", "env": {"NCCL_PROTO": "LL"}}]
    run_dir = write_run(tmp_path / "run", configs, {"base": [47.3, 47.2], "LL": [57.6, 57.5]})
    result = report(run_dir, PYTHONPATH=str(tmp_path / "block"))
    assert result["chart"] is None and not (run_dir / "chart.png").exists()
    summary = (run_dir / "summary.md").read_text()
    assert "chart: skipped: matplotlib is not importable" in summary
    assert "Winner: **LL**" in summary and "discourages setting `NCCL_PROTO` in production" in summary
    # and with it, the chart is there
    other = write_run(tmp_path / "run2", configs, {"base": [47.3, 47.2], "LL": [57.6, 57.5]})
    assert report(other)["chart"] == "chart.png"
    assert (other / "chart.png").read_bytes()[:4] == b"\x89PNG"


def test_a_failed_baseline_and_a_partly_failed_config_cannot_win_and_best_falls_back(tmp_path):
    configs = [{"name": "base"}, {"name": "LL", "env": {"NCCL_PROTO": "LL"}}]
    run_dir = write_run(tmp_path / "run", configs, {"base": [None, None], "LL": [57.6, None]}, hosts=("h1", "h2"))
    result = report(run_dir)
    assert result["winner"]["config"] is None
    assert result["leave"] == {"mode": "best", "config": "base",
                               "reason": "no configuration was measured without a failure: the baseline instead"}
    assert len(result["failures"]) == 6
    with open(run_dir / "results.csv") as handle:
        assert len(handle.read().strip().splitlines()) == 1 + 8
    summary = (run_dir / "summary.md").read_text()
    assert "No winner" in summary and summary.count("| restart |") == 6


def test_left_running_is_added_to_the_summary(tmp_path):
    configs = [{"name": "base"}, {"name": "LL", "env": {"NCCL_PROTO": "LL"}}]
    run_dir = write_run(tmp_path / "run", configs, {"base": [47.3], "LL": [57.6]}, hosts=("h1", "h2", "h3"))
    report(run_dir)
    (run_dir / "left_running.json").write_text(json.dumps([
        {"host": "h1", "config": "LL", "status": "ok", "pid": 4242, "action": "started"},
        {"host": "h2", "config": "LL", "status": "failed", "task": "Wait for /health", "msg": "exited"}]))
    proc = run_report_module(run_dir, "left_running")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = (run_dir / "summary.md").read_text()
    assert "- h1: runs **LL** (server PID 4242, started)" in summary
    assert '- h2: FAILED to leave LL running at "Wait for /health": exited' in summary
    assert "- h3: not reached" in summary
    assert json.loads((run_dir / "report.json").read_text())["left_running"][0]["pid"] == 4242


def test_the_page_shows_a_workloads_sections_in_a_browser(tmp_path):
    # hand-made results of a session workload replayed from a file: the sections appear, with the figures of report.json
    workload = {"kind": "sessions", "file": "/data/chats <1>.jsonl", "sha256": "9f86d081884c7d65" + "0" * 48, "requests": 16,
                "prompt_len": {"min": 10, "p50": 200, "p90": 700, "max": 900}, "output_len": {"min": 8, "p50": 32, "p90": 32, "max": 32}}
    per_turn = [{"turn": 1, "requests": 8, "ttft_ms": {"mean": 52.0, "p50": 50.0, "p90": 58.0, "p99": 60.0}, "cached_tokens": 0},
                {"turn": 2, "requests": 8, "ttft_ms": {"mean": 14.0, "p50": 13.0, "p90": 16.0, "p99": 18.0}, "cached_tokens": 1600}]
    configs = [{"name": "base"}, {"name": "LL", "env": {"NCCL_PROTO": "LL"}}]
    run_dir = write_run(tmp_path / "run", configs, {"base": [47.3, 47.2], "LL": [57.6, 57.5]}, hosts=("h1", "h2"), workload=workload,
                        per_turn=per_turn, schedule_slip_ms={"mean": 4.0, "p50": 1.0, "p90": 9.0, "p99": 25.0, "max": 31.0},
                        prefix_cache={"queries": 3200, "hits": 1600, "hit_rate": 0.5})
    result = report(run_dir)
    page = run_dir / "report.html"
    assert_self_contained(page)
    dom, _raw, stderr = dump_dom(page)
    assert not console_errors(stderr), console_errors(stderr)
    shown = dom.find("section", id="workload").find("p", class_="workload")
    assert shown.attrs["data-sha256"] == workload["sha256"]
    assert shown.text() == "sessions workload, file /data/chats <1>.jsonl, sha256 9f86d081884c, 16 request(s)"
    assert numbers(dom.find("tr", data_length="prompt_len")) == [10.0, 200.0, 700.0, 900.0]
    points = chart_points(dom, "turn-chart")
    assert [(p.attrs["data-group"], p.attrs["data-series"], p.attrs["data-value"]) for p in points] == [
        ("turn 1", "base", "50.0"), ("turn 1", "LL", "50.0"), ("turn 2", "base", "13.0"), ("turn 2", "LL", "13.0")]
    turn_row = dom.find("table", id="turn-table").find("tr", data_series="LL", data_turn="2")
    assert numbers(turn_row) == [8.0, 14.0, 13.0, 16.0, 18.0, 1600.0] == [
        result["fleet"]["LL"]["per_turn"][1][k] if k in ("requests", "cached_tokens") else result["fleet"]["LL"]["per_turn"][1]["ttft_ms"][k]
        for k in ("requests", "mean", "p50", "p90", "p99", "cached_tokens")]
    warning = dom.find("p", id="slip-warning").text()
    assert warning.startswith("The client, not the server, was late: p99 schedule slip 25.0 ms for base, 25.0 ms for LL")
    # summed over the 4 measurements (2 hosts x 2 rounds)
    assert numbers(dom.find("table", id="prefix-cache-table").find("tr", data_series="base")) == [12800.0, 6400.0, 50.0]
    assert result["fleet"]["base"]["prefix_cache"] == {"queries": 12800.0, "hits": 6400.0, "hit_rate": 0.5}
