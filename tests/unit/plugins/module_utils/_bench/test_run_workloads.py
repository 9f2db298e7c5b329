# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A benchmark of each workload (_bench/run) against a scripted server on a real socket, judged by what the server
received: a dataset's requests in the seed's order every repeat, a trace on its schedule, sessions that carry the
answers, the prefix cache figures, and the fallback to chat when /v1/completions is missing."""

from __future__ import annotations

import json
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.run import Benchmark, BenchmarkFailed
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.spec import build_spec
from ansible_collections.gpuops.fleet.tests.unit.plugins.bench_sse_server import ScriptedServer


def spec(url, **options):
    params = {"url": url, "input_len": 4, "output_len": 3, "concurrency": 2, "warmup_requests": 1, "repeats": 2, "timeout": 5.0}
    params.update(options)
    return build_spec(params)


def write(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_dataset_sends_the_same_requests_in_the_same_order_every_repeat(tmp_path):
    rows = [{"prompt": "prompt number %d" % n + " pad" * n, "output_len": 2 + n % 3} for n in range(12)]
    path = write(tmp_path, "d.jsonl", rows)
    with ScriptedServer() as server:
        bench = Benchmark(spec(server.url, num_requests=5, concurrency=1, workload={"kind": "dataset", "file": path, "max_prompt_len": 12}))
        result = bench.run()
    sent = [(request["prompt"], request["max_tokens"]) for request in server.requests]
    warmup, first, second = sent[:1], sent[1:6], sent[6:]
    assert first == second and len(set(first)) == 5 and warmup[0] not in first
    assert all(len(prompt.split()) <= 12 for prompt, _tokens in sent)  # the filter: prompts of 3 + n words, n <= 9
    data = bench.spec.workload
    assert first == [(data.entry(index).prompt, data.entry(index).output_len) for index in range(5)]
    assert result["runs"][0]["total_output_tokens"] == sum(tokens for _prompt, tokens in first)
    assert result["workload"]["requests"] == 5 and result["workload"]["sha256"] == data.sha256
    assert not any("output tokens where ignore_eos" in warning for warning in bench.warnings)


def test_bad_dataset_fails_before_any_request(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "fine"}\n{"prompt": 5}\n')
    with ScriptedServer() as server:
        with pytest.raises(Exception, match=r"workload.file: '.*d.jsonl' line 2: prompt 5 is not a non-empty string"):
            Benchmark(spec(server.url, workload={"kind": "dataset", "file": str(path)})).run()
        assert server.seen == []


def test_replay_follows_the_schedule_and_reports_the_slip(tmp_path):
    rows = [{"timestamp": 5000 + ms, "input_length": 6, "output_length": 2, "hash_ids": [7, n]}
            for n, ms in enumerate((0, 40, 40, 120, 300))]
    path = write(tmp_path, "t.jsonl", rows)
    with ScriptedServer() as server:
        bench = Benchmark(spec(server.url, repeats=1, warmup_requests=0, concurrency=None,
                               workload={"kind": "replay", "file": path, "speedup": 2, "block_size": 4}))
        started = time.perf_counter()
        result = bench.run()
    due = [0.0, 0.02, 0.02, 0.06, 0.15]  # (ms - 5000) / 1000 / 2
    run = result["runs"][0]
    slip = run["schedule_slip_ms"]
    assert set(slip) == {"mean", "p50", "p90", "p99", "max"} and 0 <= slip["p50"] <= slip["max"]
    assert slip["p50"] < 20, slip  # under the trace's shortest gap (20 ms at speedup 2)
    # judged against the schedule's own due times, never against the first arrival (which a busy machine delays as much
    # as any other): no request before its offset from the run's start, and each one's start (arrival - due) within what
    # the client says it slipped plus the time the server took to read a request (room for a loaded machine); a client
    # that sent the trace at once, or at its own pace, fails one or the other
    assert all(when - started >= offset - 0.002 for when, offset in zip(server.arrived, due)), [w - started for w in server.arrived]
    starts_ms = [(when - offset) * 1000.0 for when, offset in zip(server.arrived, due)]
    assert max(starts_ms) - min(starts_ms) <= slip["max"] + 60.0, (starts_ms, slip)
    prompts = [request["prompt"].split() for request in server.requests]
    assert all(len(words) == 6 for words in prompts) and len({tuple(words[:4]) for words in prompts}) == 1
    assert run["completed"] == 5 and run["total_output_tokens"] == 10
    assert result["sweep"][0]["concurrency"] is None  # no limit: each request when the trace says


def test_replay_held_back_by_a_limit_shows_as_slip(tmp_path):
    rows = [{"timestamp": 0, "input_length": 3, "output_length": 8} for _n in range(4)]
    path = write(tmp_path, "t.jsonl", rows)
    with ScriptedServer(gap_s=0.02) as server:
        result = Benchmark(spec(server.url, repeats=1, warmup_requests=0, concurrency=1,
                                workload={"kind": "replay", "file": path})).run()
    # each request takes 7 gaps of 20 ms; one at a time, the fourth is sent at least 3 answers late
    assert result["runs"][0]["schedule_slip_ms"]["max"] >= 3 * 7 * 20 * 0.9


def test_sessions_append_each_answer_and_count_per_turn(tmp_path):
    with ScriptedServer(cached_tokens=4) as server:
        bench = Benchmark(spec(server.url, endpoint="chat", repeats=1, workload={"kind": "sessions", "sessions": 2, "turns": 3}))
        result = bench.run()
    requests = server.requests[1:]  # after the warm-up's first turn
    assert len(requests) == 6
    by_length = sorted(requests, key=lambda request: len(request["messages"]))
    assert [len(request["messages"]) for request in by_length] == [1, 1, 3, 3, 5, 5]
    for request in by_length[2:]:
        assert [message["content"] for message in request["messages"][1::2]] == [" tok tok tok"] * (len(request["messages"]) // 2)
    for longer in by_length[4:]:  # each turn starts with a turn before it of its session
        assert any(longer["messages"][:3] == shorter["messages"] for shorter in by_length[2:4])
    run = result["runs"][0]
    assert [(turn["turn"], turn["requests"], turn["cached_tokens"]) for turn in run["per_turn"]] == [(1, 2, 8), (2, 2, 8), (3, 2, 8)]
    assert result["workload"]["requests"] == 6 and result["workload"]["prompt_len"]["min"] == 4


def test_a_failed_turn_ends_its_session(tmp_path):
    with ScriptedServer() as server:
        server.behaviours = ["http500"]
        result = Benchmark(spec(server.url, concurrency=1, warmup_requests=0, repeats=1,
                                workload={"kind": "sessions", "sessions": 2, "turns": 3})).run()
    run = result["runs"][0]
    assert (run["completed"], run["failed"]) == (3, 1) and len(server.requests) == 4
    assert [turn["requests"] for turn in run["per_turn"]] == [1, 1, 1]


@pytest.mark.parametrize("warmup", [1, 0])
def test_chat_only_server_is_measured_through_chat(warmup):
    with ScriptedServer(chat_only=True) as server:
        bench = Benchmark(spec(server.url, warmup_requests=warmup, num_requests=3))
        result = bench.run()
    assert result["endpoint"] == "chat" and "/v1/completions answered HTTP 404" in result["endpoint_fallback"]
    assert any("went through /v1/chat/completions" in warning for warning in bench.warnings)
    assert all(run["completed"] == 3 and run["failed"] == 0 for run in result["runs"])
    posts = [seen for seen in server.seen if seen.startswith("POST")]
    # the first warm-up request (without one, the first repeat) found no completions; everything after it went to chat
    tried = warmup or 3
    assert posts[:tried] == ["POST /v1/completions"] * tried
    assert posts[tried:] == ["POST /v1/chat/completions"] * (warmup + 2 * 3)


def test_explicit_completions_on_a_chat_only_server_fails():
    with ScriptedServer(chat_only=True) as server:
        with pytest.raises(BenchmarkFailed, match="every warmup request failed.*HTTP 404"):
            Benchmark(spec(server.url, endpoint="completions", num_requests=3)).run()
        assert not any("chat" in seen for seen in server.seen)


def test_a_server_with_completions_keeps_them():
    with ScriptedServer() as server:
        bench = Benchmark(spec(server.url, num_requests=2))
        result = bench.run()
    assert result["endpoint"] == "completions" and result["endpoint_fallback"] is None
    assert all(seen == "POST /v1/completions" for seen in server.seen if seen.startswith("POST"))


def test_level_figures_pool_every_repeat(tmp_path):
    rows = [{"timestamp": 10 * n, "input_length": 3, "output_length": 2} for n in range(3)]
    path = write(tmp_path, "t.jsonl", rows)
    with ScriptedServer() as server:
        replay = Benchmark(spec(server.url, repeats=2, warmup_requests=0, concurrency=None,
                                workload={"kind": "replay", "file": path})).run()
    level = replay["sweep"][0]
    assert replay["schedule_slip_ms"] == level["schedule_slip_ms"] and "per_turn" not in level
    assert level["schedule_slip_ms"]["max"] == max(run["schedule_slip_ms"]["max"] for run in replay["runs"])
    assert level["prefix_cache"] is None  # the scripted server counts no prefix cache
    with ScriptedServer(cached_tokens=2) as server:
        sessions = Benchmark(spec(server.url, endpoint="chat", repeats=2, warmup_requests=0,
                                  workload={"kind": "sessions", "sessions": 2, "turns": 2})).run()
    level = sessions["sweep"][0]
    assert [turn["requests"] for turn in level["per_turn"]] == [4, 4] and sessions["per_turn"] == level["per_turn"]
    assert [turn["cached_tokens"] for turn in level["per_turn"]] == [
        sum(run["per_turn"][turn]["cached_tokens"] for run in sessions["runs"]) for turn in range(2)]
    assert "schedule_slip_ms" not in level
