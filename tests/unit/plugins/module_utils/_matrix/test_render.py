# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark matrix's files (_matrix/render): the results CSV."""

from __future__ import annotations

import csv
import io
import json

from ansible_collections.gpuops.fleet.plugins.module_utils._matrix import render


def test_results_csv_quotes_what_needs_it():
    text = render.results_csv([{"host": "h1", "config": "a,b", "status": "failed", "error": 'say "no"\nnow', "env": {"K": "v"}}])
    row = next(csv.DictReader(io.StringIO(text)))
    assert row["config"] == "a,b" and row["error"] == 'say "no" now' and json.loads(row["env"]) == {"K": "v"}


def test_workload_text_names_a_workload_other_than_synthetic():
    workload_text = render.workload_text
    assert workload_text(None) == "" and workload_text({}) == "" and workload_text({"kind": "synthetic"}) == ""
    assert workload_text({"kind": "dataset", "file": "/d.jsonl", "max_prompt_len": None}) == " Workload: dataset (file /d.jsonl)."
    assert workload_text({"kind": "sessions"}) == " Workload: sessions."


def test_a_measurement_whose_requests_failed_is_a_failed_row_of_results_csv():
    run = {"completed": 1, "failed": 3, "failed_by_reason": {"http_error": 3}, "median_tpot_ms": 11.0}
    cell = {"host": "n1", "config": "dies", "round": 1, "status": "ok", "summary": {"decode_tok_s": 90.0, "completed": 1, "failed": 3},
            "benchmark": {"runs": [run]}}
    row = render.csv_row(cell)
    assert (row["status"], row["stage"], row["error"]) == ("requests failed", "benchmark", "3 of 4 requests failed (http_error: 3)")
    assert render.csv_row(dict(cell, benchmark={"runs": [dict(run, failed=0)]}))["status"] == "ok"
