# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The workload option (_bench/workload, _bench/spec): defaults per kind, bad values named, options of another kind
refused, the options it changes (endpoint fallback, concurrency of a replay, num_requests of sessions)."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.spec import build_spec
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.workload import lengths, workload_spec


def trace(tmp_path, lines=3):
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 8, "output_length": 2, "hash_ids": [i]}) + "\n"
                            for i in range(lines)))
    return str(path)


def test_defaults_per_kind():
    assert workload_spec(None).kind == "synthetic"
    sessions = workload_spec({"kind": "sessions"})
    assert (sessions.sessions, sessions.turns, sessions.think_time) == (8, 4, 0.0)
    spec = build_spec({})
    assert spec.kind == "synthetic" and spec.endpoint == "completions" and spec.endpoint_fallback is True
    assert spec.concurrency == 8 and spec.num_requests == 64
    assert build_spec({"endpoint": "completions"}).endpoint_fallback is False
    assert spec.workload.summary(64) == {"kind": "synthetic", "file": None, "sha256": None, "requests": 64,
                                         "prompt_len": {"min": 1024, "p50": 1024, "p90": 1024, "max": 1024},
                                         "output_len": {"min": 128, "p50": 128, "p90": 128, "max": 128}}


def test_replay_and_sessions_set_their_own_load(tmp_path):
    replay = build_spec({"workload": {"kind": "replay", "file": trace(tmp_path)}})
    assert replay.concurrency == 0 and replay.num_requests == 3  # no limit, the whole trace
    assert build_spec({"num_requests": 2, "workload": {"kind": "replay", "file": trace(tmp_path)}}).num_requests == 2
    assert build_spec({"concurrency": 4, "workload": {"kind": "replay", "file": trace(tmp_path)}}).concurrency == 4
    sessions = build_spec({"workload": {"kind": "sessions", "sessions": 3, "turns": 5}})
    assert sessions.num_requests == 15 and sessions.concurrency == 8


@pytest.mark.parametrize("params, message", [
    ({"workload": "dataset"}, "workload: 'dataset' is not a dict"),
    ({"workload": {"kind": "csv"}}, "workload.kind: 'csv' is not one of synthetic, dataset, replay, sessions"),
    ({"workload": {"kind": "dataset"}}, "workload.file: None: kind dataset needs the file"),
    ({"workload": {"kind": "dataset", "file": "/nonexistent/prompts.jsonl"}}, "workload.file: '/nonexistent/prompts.jsonl' is not a file"),
    ({"workload": {"kind": "synthetic", "file": "/x"}}, "workload.file: '/x' is not used by kind synthetic (only by dataset, replay)"),
    ({"workload": {"kind": "sessions", "speedup": 2}}, "workload.speedup: 2 is not used by kind sessions (only by replay)"),
    ({"workload": {"kind": "sessions", "turns": 0}}, "workload.turns: 0 is out of range"),
    ({"workload": {"kind": "sessions", "think_time": -1}}, "workload.think_time: -1 must be a non-negative number of seconds"),
    ({"workload": {"kind": "sessions", "sessions": "many"}}, "workload.sessions: 'many' is not a whole number"),
    ({"workload": {"kind": "sessions", "sesions": 2}}, "workload: unknown key 'sesions'"),
    ({"workload": {"kind": "sessions"}, "num_requests": 5}, "num_requests: 5 is not used by a sessions workload"),
    ({"workload": {"kind": "sessions"}, "request_rate": 5}, "request_rate: 5 is not used by a sessions workload"),
])
def test_bad_workload_options_are_named(params, message):
    with pytest.raises(SpecError) as caught:
        build_spec(params)
    assert message in str(caught.value)


def test_bad_replay_options_are_named(tmp_path):
    path = trace(tmp_path)
    for workload, message in (({"speedup": 0}, "workload.speedup: 0 must be a positive number"),
                              ({"speedup": float("inf")}, "workload.speedup: inf must be a positive number"),
                              ({"block_size": 0}, "workload.block_size: 0 is out of range"),
                              ({"format": "jsonl"}, "workload.format: 'jsonl' is not used by kind replay")):
        with pytest.raises(SpecError) as caught:
            build_spec({"workload": dict(workload, kind="replay", file=path)})
        assert message in str(caught.value)
    with pytest.raises(SpecError, match=r"^request_rate: 2 is not used by a replay workload: the trace's timestamps"):
        build_spec({"request_rate": 2, "workload": {"kind": "replay", "file": path}})


def test_prompt_length_bounds_must_agree(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "a b c"}\n')
    with pytest.raises(SpecError, match=r"workload.min_prompt_len: 9 is more than workload.max_prompt_len: 3"):
        build_spec({"workload": {"kind": "dataset", "file": str(path), "min_prompt_len": 9, "max_prompt_len": 3}})


def test_lengths_distribution():
    assert lengths([]) is None
    assert lengths([5]) == {"min": 5, "p50": 5, "p90": 5, "max": 5}
    assert lengths([1, 2, 3, 4, 10]) == {"min": 1, "p50": 3, "p90": 7.6, "max": 10}
