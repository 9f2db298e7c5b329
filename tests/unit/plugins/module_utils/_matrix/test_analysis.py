# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark matrix's analysis (_matrix/analysis): medians, the spread of the widest host, the winner and its margin."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._matrix import analysis


def test_stats_medians_and_the_spread_of_the_widest_host():
    cells = [{"status": "ok", "summary": {"decode_tok_s": v, "median_tpot_ms": 1000.0 / v}} for v in (50.0, 52.0, 48.0)]
    cells.append({"status": "failed"})
    got = analysis.stats(cells, [cells[:2], cells[2:]])
    assert (got["runs"], got["ok"], got["failed"]) == (4, 3, 1)
    assert got["decode_tok_s"] == 50.0 and got["decode_tok_s_min"] == 48.0 and got["decode_tok_s_max"] == 52.0
    assert got["spread_tok_s"] == 2.0  # one group's max - min; the group of one value has no spread


@pytest.mark.parametrize("a, b, spread, significant", [(57.6, 47.3, 0.5, True), (50.8, 50.0, 4.0, False), (50.8, 50.0, None, False)])
def test_a_margin_is_significant_only_beyond_the_spread(a, b, spread, significant):
    per = {"A": {"decode_tok_s": a, "spread_tok_s": spread}, "B": {"decode_tok_s": b, "spread_tok_s": None}}
    win = analysis.winner(per, ["A", "B"])
    assert win["config"] == "A" and win["runner_up"] == "B" and win["margin_tok_s"] == pytest.approx(a - b)
    assert win["significant"] is significant
