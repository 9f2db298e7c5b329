# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report's files (_report/render): the page escapes and masks, the files agree, no CSV cell is a formula."""

from __future__ import annotations

import csv
import io
import json

from ansible_collections.gpuops.fleet.plugins.module_utils._report import model, render
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils._report.test_model import results


def test_page_escapes_and_masks_and_files_agree():
    report = model.build_report(results(), 1024, 0)
    files = render.render_all(report)
    page = files["index.html"]
    assert page.count("<script>") == 1 and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "sekrit" not in "".join(files.values())
    assert "http://" not in page.replace("http-equiv", "") and "https://" not in page and "@import" not in page
    assert "another PID namespace" in page and "NOT RUNNING" in page and "abcdef012345" in page and "HTTP 200" in page
    gpus = list(csv.DictReader(io.StringIO(files["gpus.csv"])))
    holders = list(csv.DictReader(io.StringIO(files["holders.csv"])))
    assert len(gpus) == 8 == page.count('<tr class="gpu ') and len(holders) == 4 == page.count('<li class="holder"')
    assert json.loads(files["report.json"])["summary"] == report["summary"]
    assert "- hosts: 1 answered, 1 unreachable, 1 failed (of 3)" in files["summary.md"]
    assert "`b-host`: 7" in files["summary.md"]


def test_csv_cells_are_never_formulas():
    report = model.build_report([("=cmd|' /C calc'!A0", None)], 1024, 0)
    assert "\n'=cmd" in render.render_gpus_csv(report) or render.render_gpus_csv(report).count("\n") == 1
    assert render.cell("=1+1") == "'=1+1" and render.cell("-x") == "'-x" and render.cell(-1) == -1
