# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A replay workload (_bench/trace): the Mooncake trace read, bad lines named, the schedule, prompts that share
exactly the blocks their hash_ids share, and the send slip."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import Outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.trace import Trace, send_slip
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.workload import WorkloadError, WorkloadSpec

MOONCAKE = (
    {"timestamp": 27482, "input_length": 10, "output_length": 3, "hash_ids": [46, 47, 48]},
    {"timestamp": 27493, "input_length": 7, "output_length": 5, "hash_ids": [46, 47]},
    {"timestamp": 27500, "input_length": 12, "output_length": 2, "hash_ids": [46, 99]},
    {"timestamp": 28482, "input_length": 6, "output_length": 1},
)


def trace(tmp_path, rows=MOONCAKE, seed=0, **options):
    path = tmp_path / "trace.jsonl"
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    options.setdefault("block_size", 4)
    return Trace(WorkloadSpec(kind="replay", file=str(path), **options), seed)


def test_schedule_relative_to_the_first_and_sped_up(tmp_path):
    assert trace(tmp_path).offsets(4) == pytest.approx([0.0, 0.011, 0.018, 1.0])
    assert trace(tmp_path, speedup=2.0).offsets(4) == pytest.approx([0.0, 0.0055, 0.009, 0.5])
    assert trace(tmp_path).count(None) == 4 and trace(tmp_path).count(2) == 2 and trace(tmp_path).count(9) == 4


def test_prompts_share_exactly_the_blocks_their_hash_ids_share(tmp_path):
    prompts = trace(tmp_path).prompts("repeat1")
    first, second, third, fourth = (prompts.prompt(index).split() for index in range(4))
    assert [len(words) for words in (first, second, third, fourth)] == [10, 7, 12, 6]
    assert first[:7] == second  # blocks 46, 47 (4 words each), the second trimmed to 7 words
    assert first[:4] == third[:4] and first[4:8] != third[4:8]  # only block 46 shared
    assert third[8:] != first[8:10]  # 12 words from 2 blocks of 4: 4 words of its own
    # the same seed and phase give the same prompts; another phase (a repeat) or seed others
    assert trace(tmp_path).prompts("repeat1").prompt(0) == " ".join(first)
    assert trace(tmp_path).prompts("repeat2").prompt(0) != " ".join(first)
    assert trace(tmp_path, seed=1).prompts("repeat1").prompt(0) != " ".join(first)
    body = json.loads(prompts.body(1, "completions", "m", True))
    assert body["prompt"] == " ".join(second) and body["max_tokens"] == 5


def test_default_block_is_512_words(tmp_path):
    rows = [{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]},
            {"timestamp": 5, "input_length": 512, "output_length": 1, "hash_ids": [1, 3]}]
    prompts = trace(tmp_path, rows, block_size=512).prompts("p")
    one, two = prompts.prompt(0).split(), prompts.prompt(1).split()
    assert one[:512] == two and len(one) == 600


@pytest.mark.parametrize("row, message", [
    ("{not json", "line 2: not JSON"),
    ("[1]", "line 2: not a JSON object"),
    ({"timestamp": "soon", "input_length": 1, "output_length": 1}, "line 2: timestamp \"soon\" is not a number"),
    ({"timestamp": -1, "input_length": 1, "output_length": 1}, "line 2: timestamp -1 is not a number"),
    ({"timestamp": 5, "input_length": 1, "output_length": 1}, "line 2: timestamp 5 is before the one of line 1 (10.0)"),
    ({"timestamp": 20, "input_length": 0, "output_length": 1}, "line 2: input_length 0 is not a whole number"),
    ({"timestamp": 20, "input_length": 1}, "line 2: output_length null is not a whole number"),
    ({"timestamp": 20, "input_length": 1, "output_length": 1, "hash_ids": [1, "x"]}, "line 2: hash_ids [1, \"x\"] is not a list"),
])
def test_bad_lines_are_named(tmp_path, row, message):
    with pytest.raises(WorkloadError) as caught:
        trace(tmp_path, [{"timestamp": 10, "input_length": 1, "output_length": 1}, row])
    assert message in str(caught.value) and "trace.jsonl" in str(caught.value)


def test_summary(tmp_path):
    summary = trace(tmp_path).summary(3)
    assert summary["kind"] == "replay" and summary["requests"] == 3 and len(summary["sha256"]) == 64
    assert summary["prompt_len"] == {"min": 7, "p50": 10, "p90": 11.6, "max": 12}
    assert summary["output_len"] == {"min": 2, "p50": 3, "p90": 4.6, "max": 5}


def test_send_slip():
    outcomes = []
    for index, (arrival, start) in enumerate([(1.0, 1.001), (2.0, 2.003), (3.0, 3.0), (4.0, 0.0)]):
        outcome = Outcome(index)
        outcome.arrival, outcome.start = arrival, start
        outcomes.append(outcome)
    slip = send_slip(outcomes)  # the last never sent (no connection): not counted
    assert slip == pytest.approx({"mean": 4.0 / 3, "p50": 1.0, "p90": 2.6, "p99": 2.96, "max": 3.0}, abs=1e-6)
    assert send_slip(outcomes[3:]) is None
