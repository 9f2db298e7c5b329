# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""report.html of a rollout (_rollout/page), written by vllm_rollout_report's final step from measurements written here:
the verdict, the gate's baseline against canary per host with the report's own figures, hostile names as text, nothing
fetched, and the sections of a workload's results exactly when the measurements carry them."""

from __future__ import annotations

import json
import os
import typing as t

from ansible_collections.gpuops.fleet.plugins.modules.vllm_rollout_report import build_report
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils._matrix.test_page import (
    CACHE, PER_TURN, SLIP, WORKLOAD, Tags, assert_self_contained, points)

SETTINGS = {"threshold_pct": 3, "ttft_threshold_pct": 10, "serial": 1, "repeats": 3}
HOST = "n1<i>\"'&"  # a host name with every character HTML cares about (no slash: it names a file)


def measure(folder: str, side: str, host: str, decode: t.Sequence[float], **summary: t.Any) -> None:
    os.makedirs(os.path.join(folder, side), exist_ok=True)
    runs = [{"decode_tok_s": d, "median_ttft_ms": 30.0 + i, "p99_ttft_ms": 40.0, "completed": 4, "p50_ttft_ms": 30.0, "p90_ttft_ms": 35.0,
             "p50_itl_ms": 1000.0 / d, "p90_itl_ms": 23.0, "p99_itl_ms": 25.0} for i, d in enumerate(decode)]
    with open(os.path.join(folder, side, host + ".json"), "w", encoding="utf-8") as handle:
        json.dump({"host": host, "runs": runs, "summary": summary}, handle)


def final(folder: str, status: str = "halted", **plan: t.Any) -> str:
    build_report({"path": folder, "step": "judge", "settings": SETTINGS, "batch": 1, "hosts": [HOST], "failures": [], "plan": {},
                  "fleet": [], "rollbacks": [], "outcome": {}}, False)
    result = build_report({"path": folder, "step": "final", "settings": {}, "batch": 1, "hosts": [], "failures": [],
                           "plan": {"hosts": [HOST, "n2"], "config_hash": "c0ffee" * 10, "config_shown": "NCCL_PROTO=<LL128>",
                                    "threshold_pct": 3, "ttft_threshold_pct": 10, "ttft_floor_ms": 20, **plan},
                           "fleet": [{"host": HOST, "runs": "good", "pid": 7}],
                           "rollbacks": [{"host": HOST, "status": "ok", "action": "restarted", "pid": 7, "config_hash": "ab" * 32,
                                          "ready_s": 1.5, "checks": ["generation"]}],
                           "outcome": {"status": status, "reason": "%s: decode tok/s per stream REGRESSION" % HOST}}, False)
    assert os.path.join(folder, "report.html") in result["files"]
    with open(os.path.join(folder, "report.html"), encoding="utf-8") as handle:
        return handle.read()


def test_the_page_shows_the_verdict_and_the_gate_with_the_reports_figures(tmp_path):
    folder = str(tmp_path)
    measure(folder, "baseline", HOST, [47.3, 47.2, 47.4])
    measure(folder, "canary", HOST, [45.5, 45.4, 45.6])
    text = final(folder)
    assert_self_contained(text)
    assert "<i>" not in text and "NCCL_PROTO=&lt;LL128&gt;" in text
    # the hosts in order, and the canary as the only gated batch
    assert '2 host(s) in order: <span id="plan-hosts">n1&lt;i&gt;&quot;&#x27;&amp;, n2</span>' in text
    assert "the first batch is the canary, the only batch gated by a benchmark" in text
    assert 'id="outcome" data-status="halted">ROLLOUT HALTED: n1&lt;i&gt;&quot;&#x27;&amp;: decode tok/s per stream REGRESSION' in text
    with open(os.path.join(folder, "report.json"), encoding="utf-8") as handle:
        metrics = {m["metric"]: m for m in json.load(handle)["batches"][0]["hosts"][0]["metrics"]}
    found = points(text, "gate-1-decode_tok_s")
    assert [(p["data-group"], p["data-series"]) for p in found] == [(HOST, "baseline"), (HOST, "canary")]
    assert [float(p["data-value"] or "nan") for p in found] == [metrics["decode_tok_s"]["baseline"], metrics["decode_tok_s"]["canary"]]
    assert [p["data-value"] for p in points(text, "gate-1-median_ttft_ms")] == ["31.0", "31.0"]
    rows = [a for tag, a in Tags(text).tags if tag == "tr" and a.get("data-metric")]
    assert [(r["data-host"], r["data-metric"], r["class"]) for r in rows] == [
        (HOST, "decode_tok_s", "regression"), (HOST, "median_ttft_ms", "ok"), (HOST, "p99_ttft_ms", "ok")]
    # the latency charts: one point per side and percentile
    assert [(p["data-group"], p["data-series"]) for p in points(text, "ttft-chart")] == [
        ("%s %s" % (HOST, side), q) for side in ("baseline", "canary") for q in ("p50", "p90", "p99")]
    assert "restarted to the last known-good configuration abababababab" in text and 'data-runs="good"' in text
    for section in ('id="workload"', 'id="per-turn"', 'id="slip"', 'id="prefix-cache"'):
        assert section not in text


def test_the_workloads_sections_appear_when_the_measurements_carry_them(tmp_path):
    folder = str(tmp_path)
    carried = {"workload": WORKLOAD, "per_turn": PER_TURN, "schedule_slip_ms": SLIP, "prefix_cache": CACHE}
    measure(folder, "baseline", HOST, [47.3, 47.2, 47.4], **carried)
    measure(folder, "canary", HOST, [57.5, 57.4, 57.6], **carried)
    text = final(folder, "passed", every_batch=True)
    assert_self_contained(text)
    assert "the first batch is the canary, every batch is gated by a benchmark" in text and "the only batch gated" not in text
    assert 'class="verdict good"' in text and text.count('class="workload"') == 1  # both sides ran the same workload
    assert [(p["data-group"], p["data-series"]) for p in points(text, "turn-chart")] == [
        ("turn %d" % turn, "%s %s" % (HOST, side)) for turn in (1, 2) for side in ("baseline", "canary")]
    assert 'id="slip-warning"' in text and 'id="prefix-cache-table"' in text
