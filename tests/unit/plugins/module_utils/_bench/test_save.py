# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The saved result (_bench/save): vllm bench serve's shape and file."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.metrics import run_metrics
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.save import vllm_result, write_results
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils._bench.test_metrics import outcome


def approx(value):
    return pytest.approx(value, rel=1e-9, abs=1e-9)


def test_vllm_result_shape_and_file(tmp_path):
    run = run_metrics([outcome(0, 0.1, 1.1, 11, [0.1] * 10, 3)], 2.0)
    run.update(repeat=1, server_generation_tokens=11, client_generation_tokens=11)
    saved = vllm_result(run, endpoint="chat", model="m1", num_requests=1, request_rate=float("inf"), concurrency=4)
    for key in ("date", "backend", "model_id", "num_prompts", "request_rate", "max_concurrency", "duration", "completed",
                "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
                "total_token_throughput", "mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "std_e2el_ms"):
        assert key in saved
    assert saved["backend"] == "openai-chat" and saved["request_rate"] == "inf" and saved["max_concurrency"] == 4
    assert saved["median_tpot_ms"] == approx(100.0) and saved["gpuops_fleet"]["decode_tok_s"] == approx(10.0)
    one = tmp_path / "one.json"
    write_results(str(one), [saved])
    assert json.loads(one.read_text()) == json.loads(json.dumps(saved))
    lines = tmp_path / "lines.json"
    write_results(str(lines), [saved, dict(saved, completed=0)])
    rows = [json.loads(line) for line in lines.read_text().splitlines()]
    assert [row["completed"] for row in rows] == [1, 0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lines.json", "one.json"]  # no temporary file left
