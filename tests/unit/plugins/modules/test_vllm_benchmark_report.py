# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_benchmark_report's main(): its options, check mode, and a bad run folder failing with the option named."""

from __future__ import annotations

import os

from ansible_collections.gpuops.fleet.plugins.module_utils._matrix import render
from ansible_collections.gpuops.fleet.plugins.modules import vllm_benchmark_report
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils._matrix.test_run import LL, write_run
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import call_main, capture


def test_report_then_check_mode_then_a_bad_step(tmp_path, monkeypatch):
    monkeypatch.setattr(render, "chart_png", lambda report: (None, "skipped: not in unit tests"))
    capture(monkeypatch)
    run_dir = write_run(tmp_path / "run", [{"name": "base"}, LL], {"base": [47.3, 47.2], "LL": [57.6, 57.5]})
    result = call_main(vllm_benchmark_report, {"path": run_dir})
    assert result["failed"] is False and result["changed"] is True and result["leave"]["config"] == "LL"
    assert sorted(os.path.basename(f) for f in result["files"]) == ["report.html", "report.json", "results.csv", "summary.md"]
    os.unlink(os.path.join(run_dir, "summary.md"))
    checked = call_main(vllm_benchmark_report, {"path": run_dir, "_ansible_check_mode": True})
    assert checked["changed"] is True and checked["changed_files"] == [os.path.join(run_dir, "summary.md")]
    assert not os.path.exists(os.path.join(run_dir, "summary.md"))
    bad = call_main(vllm_benchmark_report, {"path": run_dir, "step": "left-running"})
    assert bad["failed"] is True and "step" in bad["msg"] and "left-running" in bad["msg"]


def test_a_folder_that_is_not_a_run_fails_naming_path(tmp_path, monkeypatch):
    capture(monkeypatch)
    result = call_main(vllm_benchmark_report, {"path": str(tmp_path / "nowhere")})
    assert result["failed"] is True and result["msg"].startswith("path: ") and "nowhere" in result["msg"]
