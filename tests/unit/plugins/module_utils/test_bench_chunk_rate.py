# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The chunk-aware decode rate next to vllm bench serve's TPOT, on hand-built streams of known pace."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.metrics import HEADLINE, headline, run_metrics
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import Outcome

GAP = 0.02  # seconds per token: 50 tokens/s


def stream(index: int, tokens: int, per_chunk: int, ttft0: float = 0.1) -> Outcome:
    """A request whose token i is due at ttft0 + i * GAP, sent in chunks of per_chunk (the first one included),
    each chunk when its last token is due."""
    outcome = Outcome(index)
    ends = list(range(per_chunk - 1, tokens, per_chunk))
    if ends[-1] != tokens - 1:
        ends.append(tokens - 1)
    times = [ttft0 + end * GAP for end in ends]
    outcome.success = True
    outcome.ttft = times[0]
    outcome.latency = times[-1]
    outcome.itl = [b - a for a, b in zip(times, times[1:])]
    outcome.output_tokens = tokens
    outcome.content_chunks = len(times)
    outcome.tokens_seen = tokens
    return outcome


def test_one_token_a_chunk_both_figures_agree():
    metrics = run_metrics([stream(i, 128, 1) for i in range(3)], 5.0)
    assert metrics["decode_tok_s"] == pytest.approx(50.0)
    assert metrics["decode_tok_s_chunk_aware"] == pytest.approx(50.0)
    assert metrics["tokens_per_chunk"] == 1.0


@pytest.mark.parametrize("per_chunk", [4, 8])
def test_several_tokens_a_chunk_tpot_reads_high_the_chunk_aware_rate_does_not(per_chunk):
    metrics = run_metrics([stream(i, 128, per_chunk) for i in range(3)], 5.0)
    # TPOT: (128 - per_chunk) gaps over 127 tokens
    assert metrics["decode_tok_s"] == pytest.approx(50.0 * 127 / (128 - per_chunk))
    assert metrics["decode_tok_s"] > 50.0 * 1.02
    assert metrics["decode_tok_s_chunk_aware"] == pytest.approx(50.0)
    assert metrics["tokens_per_chunk"] == per_chunk


def test_a_last_chunk_that_is_not_full():
    # 37 tokens in chunks of 4: nine of 4 and one of 1; the first is taken to hold 3.7 (the average), 33 gaps after it
    metrics = run_metrics([stream(0, 37, 4)], 1.0)
    assert metrics["decode_tok_s_chunk_aware"] == pytest.approx(50.0 * 33.3 / 33)
    assert metrics["decode_tok_s"] == pytest.approx(50.0 * 36 / 33)


def test_single_chunk_requests_have_no_chunk_aware_rate():
    metrics = run_metrics([stream(0, 4, 4)], 1.0)
    assert metrics["decode_tok_s_chunk_aware"] is None and metrics["tokens_per_chunk"] == 4.0


def test_aggregated_across_repeats():
    assert "decode_tok_s_chunk_aware" in HEADLINE and "decode_tok_s_chunk_aware" in headline((50,))
