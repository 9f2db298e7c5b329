# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout report's start-up of the canary against the baseline's (each measurement file's startup): on the screen,
in summary.md and on the page; n/a for a side without one."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._rollout import page, report

COLD = {"total_s": 35.04, "phases": [{"name": "weights", "seconds": 8.0, "cache": None},
                                     {"name": "compile", "seconds": 20.0, "cache": "miss"}]}
WARM = {"total_s": 16.0, "phases": [{"name": "compile", "seconds": 1.0, "cache": "hit"}]}


def verdict(base, canary):
    return {"batch": 1, "halt": False, "reason": "no regression", "hosts": [{"host": "n1", "verdict": "pass", "reason": "ok", "metrics": []}],
            "baselines": {"n1": {"startup": base}}, "canaries": {"n1": {"startup": canary}}}


def test_startup_words():
    assert report.startup_words(COLD) == "35.0 s (compiled, 20.0 s)"
    assert report.startup_words(WARM) == "16.0 s (compile: cache hit, 1.0 s)"
    assert report.startup_words({"total_s": 9, "phases": []}) == "9.0 s"
    assert report.startup_words(None) == "n/a" and report.startup_words({"total_s": None}) == "n/a"


def test_the_canarys_startup_against_the_baselines():
    assert report.startup_lines(verdict(COLD, WARM)) == [
        ("n1", "start-up: baseline 35.0 s (compiled, 20.0 s) -> canary 16.0 s (compile: cache hit, 1.0 s)")]
    assert report.startup_lines(verdict(None, WARM)) == [("n1", "start-up: baseline n/a -> canary 16.0 s (compile: cache hit, 1.0 s)")]
    assert report.startup_lines(verdict(None, None)) == []
    made = {"plan": {"hosts": ["n1"]}, "outcome": {"status": "done", "reason": "ok"}, "batches": [verdict(COLD, WARM)],
            "fleet": [], "rollbacks": []}
    assert "  batch 1 n1: start-up: baseline 35.0 s (compiled, 20.0 s) -> canary 16.0 s (compile: cache hit, 1.0 s)" in report.screen(made)
    assert "- n1: start-up: baseline 35.0 s (compiled, 20.0 s) -> canary 16.0 s (compile: cache hit, 1.0 s)" in report.markdown(made)
    html = page._batch_section(verdict(COLD, WARM))  # pylint: disable=protected-access
    assert '<ul class="startups"><li data-host="n1">start-up: baseline 35.0 s' in html
