# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fake vLLM's prefix cache: which tokens it finds, what they save of the prefill, its counters, its LRU."""

from __future__ import annotations

import itertools
from typing import Any, Dict, Iterator, List, Tuple

import pytest
from gpusim_helpers import FakeServer, host_with_servers, wait_for

PACE = 1000.0          # tokens/s per stream
TTFT_MS = 20.0         # the fixed part of the time to the first token
PREFILL_MS = 1.0       # per prompt token not found in the cache
CHUNK = 2              # the server's TTFT histogram then observes each request's due instant exactly
BLOCK = 16             # vLLM's default --block-size
SMALL_BLOCK = 4        # the tiny cache's --block-size
SMALL_BLOCKS = 4       # the tiny cache's --num-gpu-blocks-override
_unique = itertools.count()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, FakeServer]]:
    """Three servers: prefix caching as vLLM's default, turned off, and a tiny cache of small blocks."""
    knobs = {"GPUOPS_SIM_TOKENS_PER_S": str(PACE), "GPUOPS_SIM_TTFT_MS": str(TTFT_MS),
             "GPUOPS_SIM_PREFILL_MS_PER_TOKEN": str(PREFILL_MS), "GPUOPS_SIM_TOKENS_PER_CHUNK": str(CHUNK),
             "GPUOPS_SIM_JITTER": "0", "GPUOPS_SIM_CONCURRENCY_SLOWDOWN": "0"}
    with host_with_servers(tmp_path_factory.mktemp("fakevllm-prefix-cache"), 3) as servers:
        started = {
            "cached": servers.start(gpus="0", model="org/cached", env=knobs, args=("--max-model-len", "4096")),
            "off": servers.start(gpus="1", model="org/off", env=knobs,
                                 args=("--max-model-len", "4096", "--no-enable-prefix-caching")),
            "tiny": servers.start(gpus="2", model="org/tiny", env=knobs,
                                  args=("--max-model-len", "4096", "--enable-prefix-caching", "--block-size",
                                        str(SMALL_BLOCK), "--num-gpu-blocks-override", str(SMALL_BLOCKS))),
        }
        for server in started.values():
            server.wait_ready()
        yield started


def prompt(words: int) -> List[str]:
    """`words` words no other prompt of this module starts with."""
    tag = next(_unique)
    return [f"w{tag}x{index}" for index in range(words)]


def last_id(server: FakeServer) -> int:
    return max((record["id"] for record in server.sent()), default=0)


def record_after(server: FakeServer, last: int) -> Dict[str, Any]:
    """The one request that ended after record `last` (its record follows its last byte by a moment)."""
    assert wait_for(lambda: server.sent(after=last), timeout=10)
    records = server.sent(after=last)
    assert len(records) == 1, records
    return records[0]


def complete(server: FakeServer, words: List[str], max_tokens: int = 4) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """One whole completion: (its usage, the server's /sim/sent record of it)."""
    last = last_id(server)
    answer = server.post_json("/v1/completions", {"prompt": " ".join(words), "max_tokens": max_tokens,
                                                  "ignore_eos": True})
    return answer["usage"], record_after(server, last)


def cached(server: FakeServer, words: List[str], max_tokens: int = 4) -> int:
    """The cached tokens of one completion, the same in its usage and in the server's record."""
    usage, record = complete(server, words, max_tokens)
    assert record["prompt_tokens"] == usage["prompt_tokens"] == len(words)
    reported = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    assert "prompt_tokens_details" in usage or record["cached_tokens"] == 0  # vLLM leaves the details out at 0
    assert reported == record["cached_tokens"], (usage, record)
    return reported


def ttft_sum(server: FakeServer) -> float:
    return server.metrics()['vllm:time_to_first_token_seconds_sum{engine="0",model_name="%s"}' % server.model]


def test_a_repeated_prompt_finds_every_full_block_but_the_last_token(fleet: Dict[str, FakeServer]) -> None:
    server = fleet["cached"]
    words = prompt(100)
    usage, record = complete(server, words)
    assert record["cached_tokens"] == 0 and "prompt_tokens_details" not in usage
    assert cached(server, words) == 96 == (100 // BLOCK) * BLOCK
    # a prompt of exactly 4 blocks: vLLM recomputes its last token, so the last block is not taken from the cache
    exact = prompt(4 * BLOCK)
    assert cached(server, exact) == 0
    assert cached(server, exact) == 3 * BLOCK
    assert cached(server, exact + ["one", "more"]) == 4 * BLOCK


def test_a_shared_prefix_finds_only_its_whole_blocks(fleet: Dict[str, FakeServer]) -> None:
    server = fleet["cached"]
    words = prompt(100)
    assert cached(server, words) == 0
    assert cached(server, words[:3 * BLOCK] + ["other"] * 50) == 3 * BLOCK
    assert cached(server, words[:2 * BLOCK + 9] + ["else"] * 40) == 2 * BLOCK  # the third block differs in its tail
    assert cached(server, ["first"] + words[1:]) == 0  # every later block hashes the first one too
    assert cached(server, words[:BLOCK] + [words[BLOCK + 1], words[BLOCK]] + words[BLOCK + 2:]) == BLOCK


def test_generated_tokens_are_cached_for_the_next_turn(fleet: Dict[str, FakeServer]) -> None:
    server = fleet["cached"]
    question = " ".join(prompt(20))
    last = last_id(server)
    first = server.post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": question}],
                                                      "max_tokens": 12, "ignore_eos": True})
    answer = first["choices"][0]["message"]["content"]
    assert len(answer.split()) == 12 and "prompt_tokens_details" not in first["usage"]
    record_after(server, last)
    last = last_id(server)
    second = server.post_json("/v1/chat/completions", {"max_tokens": 2, "messages": [
        {"role": "user", "content": question}, {"role": "assistant", "content": answer},
        {"role": "user", "content": "and then what"}]})
    # 20 prompt words and 12 generated ones fill two blocks; the new message starts the third
    assert second["usage"]["prompt_tokens"] == 35
    assert second["usage"]["prompt_tokens_details"] == {"cached_tokens": 2 * BLOCK}
    record = record_after(server, last)
    assert (record["endpoint"], record["prompt_tokens"], record["cached_tokens"]) == ("chat", 35, 2 * BLOCK)


def test_cached_tokens_cost_no_prefill_time(fleet: Dict[str, FakeServer]) -> None:
    server = fleet["cached"]
    words = prompt(300)
    body = {"prompt": " ".join(words), "max_tokens": 4, "ignore_eos": True}
    runs = []
    for _attempt in range(2):
        before = ttft_sum(server)
        last = last_id(server)
        result = server.stream("/v1/completions", body)
        assert result.status == 200 and result.done
        record = record_after(server, last)
        runs.append((ttft_sum(server) - before, record))
    (miss_ttft, miss), (hit_ttft, hit) = runs
    assert (miss["cached_tokens"], hit["cached_tokens"]) == (0, 288)
    # the server's own TTFT: exactly the fixed part plus the prefill of the tokens it did not find
    assert miss_ttft == pytest.approx((TTFT_MS + 300 * PREFILL_MS) / 1000.0, abs=1e-6)
    assert hit_ttft == pytest.approx((TTFT_MS + 12 * PREFILL_MS) / 1000.0, abs=1e-6)
    # what it wrote: the first chunk of two tokens leaves one token gap after its due instant, never before; the hit's
    # comes earlier by the prefill of its 288 cached tokens (loose bounds: a busy machine writes late)
    gap_ms = 1000.0 / PACE
    miss_ms, hit_ms = miss["chunks"][0][0], hit["chunks"][0][0]
    assert miss_ms >= TTFT_MS + 300 * PREFILL_MS + gap_ms and hit_ms >= TTFT_MS + 12 * PREFILL_MS + gap_ms
    saved = 288 * PREFILL_MS
    assert saved - 100.0 <= miss_ms - hit_ms <= saved + 200.0, (miss_ms, hit_ms)


def test_the_counters_are_the_sums_of_what_the_server_recorded(fleet: Dict[str, FakeServer]) -> None:
    server = fleet["cached"]
    words = prompt(50)
    for _index in range(3):
        cached(server, words)
    text = server.request("GET", "/metrics")[1].decode()
    for name, help_text in (("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
                            ("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.")):
        assert f"# HELP {name} {help_text}\n# TYPE {name} counter\n" in text
    samples = server.metrics()
    labels = 'engine="0",model_name="org/cached"'
    records = server.sent()
    assert records[0]["id"] == 1  # every request this server served is still in its record
    assert samples["vllm:prefix_cache_queries_total{%s}" % labels] == sum(r["prompt_tokens"] for r in records)
    assert samples["vllm:prefix_cache_hits_total{%s}" % labels] == sum(r["cached_tokens"] for r in records)
    assert samples["vllm:prefix_cache_hits_total{%s}" % labels] >= 2 * 48


def test_without_prefix_caching_nothing_is_found_and_every_token_is_prefilled(fleet: Dict[str, FakeServer]) -> None:
    server = fleet["off"]
    words = prompt(100)
    before = ttft_sum(server)
    assert [cached(server, words) for _index in range(3)] == [0, 0, 0]
    assert ttft_sum(server) - before == pytest.approx(3 * (TTFT_MS + 100 * PREFILL_MS) / 1000.0, abs=1e-6)
    samples = server.metrics()
    labels = 'engine="0",model_name="org/off"'
    assert samples["vllm:prefix_cache_hits_total{%s}" % labels] == 0
    assert samples["vllm:prefix_cache_queries_total{%s}" % labels] == 0  # vLLM records no lookup when it is off
    pace = server.get_json("/sim/pace")
    assert pace["prefix_caching"] is False and pace["cached_blocks"] == 0


def test_the_least_recently_used_blocks_are_evicted(fleet: Dict[str, FakeServer]) -> None:
    server = fleet["tiny"]
    pace = server.get_json("/sim/pace")
    assert (pace["block_size"], pace["num_gpu_blocks"], pace["prefix_caching"]) == (SMALL_BLOCK, SMALL_BLOCKS, True)
    # 9 words: two full blocks of 4 each (one output token leaves the third block partial); the cache holds 4 blocks
    first, second, third = prompt(9), prompt(9), prompt(9)
    assert cached(server, first, max_tokens=1) == 0
    assert cached(server, second, max_tokens=1) == 0
    assert cached(server, first, max_tokens=1) == 8  # first is now the most recently used
    assert cached(server, third, max_tokens=1) == 0  # evicts second, the least recently used
    assert server.get_json("/sim/pace")["cached_blocks"] == SMALL_BLOCKS
    assert cached(server, second, max_tokens=1) == 0  # gone; entering it again evicts first
    assert cached(server, third, max_tokens=1) == 8
    assert cached(server, first, max_tokens=1) == 0


def test_a_request_longer_than_the_cache_keeps_its_leading_blocks(fleet: Dict[str, FakeServer]) -> None:
    server = fleet["tiny"]
    words = prompt(6 * SMALL_BLOCK + 1)  # six full blocks, four of which fit: the tail goes first, as in vLLM
    assert cached(server, words, max_tokens=1) == 0
    assert cached(server, words, max_tokens=1) == 4 * SMALL_BLOCK
