# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark matrix's start-up per configuration (each cell's server.startup, as the role's vllm_server_result has
it): in report.json's figures, results.csv, summary.md's tables and report.html's; n/a where no start-up was read."""

from __future__ import annotations

import csv
import io
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._matrix import analysis, page, render


def up(total: float, cache: t.Optional[str], compile_s: float = 20.0) -> t.Dict[str, t.Any]:
    phases = [{"name": "weights", "seconds": 8.0, "gib": 0.23, "cache": None}]
    if cache:
        phases.append({"name": "compile", "seconds": compile_s, "gib": None, "cache": cache})
    return {"total_s": total, "phases": phases, "last_phase": phases[-1]["name"], "line": "start-up"}


def cells() -> t.List[t.Dict[str, t.Any]]:
    made = []
    for order, (name, startup) in enumerate([("LL", up(35.0, "miss")), ("LL128", up(16.0, "hit", 1.0)),
                                             ("Simple", up(16.5, "hit", 1.0)), ("eager", None)]):
        made.append({"host": "h1", "config": name, "round": 1, "order": order + 1, "status": "ok",
                     "summary": {"decode_tok_s": 50.0, "median_tpot_ms": 20.0}, "benchmark": {"runs": [{"completed": 4}]},
                     "server": {"pid": 100 + order, "startup": startup}})
    return made


def report() -> t.Dict[str, t.Any]:
    plan = {"hosts": ["h1"], "configs": [{"name": n} for n in ("LL", "LL128", "Simple", "eager")], "baseline": "LL",
            "repeats": 1, "started": "2026-01-01T00:00:00Z", "benchmark": {"endpoint": "completions"}}
    return analysis.analyse(plan, cells())


def test_startup_figures_per_configuration_and_for_the_fleet():
    made = report()
    assert made["fleet"]["LL"]["startup"] == {"startups": 1, "total_s": 35.0, "compile_s": 20.0, "compiled": 1, "cache_hits": 0}
    assert made["per_host"]["h1"]["configs"]["LL128"]["startup"]["cache_hits"] == 1
    assert made["fleet"]["eager"]["startup"] is None


def test_startup_words():
    words = analysis.startup_words
    assert words({"total_s": 35.04, "compiled": 1, "cache_hits": 0}) == "35.0 s (compiled)"
    assert words({"total_s": 16.0, "compiled": 0, "cache_hits": 3}) == "16.0 s (cache hit)"
    assert words({"total_s": 22.4, "compiled": 1, "cache_hits": 2}) == "22.4 s (1 compiled, 2 cache hits)"
    assert words({"total_s": 9.0, "compiled": 0, "cache_hits": 0}) == "9.0 s"
    assert words(None) == "n/a" and words({"total_s": None}) == "n/a"


def test_csv_markdown_and_page_show_the_startup():
    rows = {row["config"]: row for row in csv.DictReader(io.StringIO(render.results_csv(cells())))}
    assert (rows["LL"]["startup_s"], rows["LL"]["compile_cache"]) == ("35.0", "miss")
    assert (rows["LL128"]["startup_s"], rows["LL128"]["compile_cache"]) == ("16.0", "hit")
    assert (rows["eager"]["startup_s"], rows["eager"]["compile_cache"]) == ("", "")
    text = render.markdown(report())
    assert "| start-up |" in text and "| 35.0 s (compiled) |" in text and "| 16.0 s (cache hit) |" in text
    html = page.render_page(report())
    assert "<th>start-up</th>" in html
    assert '<td class="startup">35.0 s (compiled)</td>' in html and '<td class="startup">n/a</td>' in html
