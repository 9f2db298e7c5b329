# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fake vLLM's OpenAI-compatible API and /metrics, read by real HTTP clients."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Dict, Iterator, List, Tuple

import pytest
from gpusim_helpers import FakeServer, StreamResult, host_with_servers, wait_for

NATURAL_LEN = 20
PACE = 400.0  # tokens/s per stream: short tests, yet slow enough to watch requests run


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tuple[FakeServer, FakeServer]]:
    """Two servers on one simulated host: one token per chunk, and four."""
    with host_with_servers(tmp_path_factory.mktemp("fakevllm-api"), 2) as servers:
        knobs = {"GPUOPS_SIM_TOKENS_PER_S": str(PACE), "GPUOPS_SIM_TTFT_MS": "5",
                 "GPUOPS_SIM_NATURAL_LEN": str(NATURAL_LEN)}
        plain = servers.start(gpus="0", model="org/plain", env=knobs)
        packed = servers.start(gpus="1", model="org/packed", env=dict(knobs, GPUOPS_SIM_TOKENS_PER_CHUNK="4"))
        plain.wait_ready()
        packed.wait_ready()
        yield plain, packed


@pytest.fixture
def plain(fleet: Tuple[FakeServer, FakeServer]) -> FakeServer:
    return fleet[0]


@pytest.fixture
def packed(fleet: Tuple[FakeServer, FakeServer]) -> FakeServer:
    return fleet[1]


def words(text: str) -> int:
    return len(text.split())


def test_streamed_completion_with_usage(plain: FakeServer) -> None:
    result = plain.stream("/v1/completions", {"model": "org/plain", "prompt": "one two  three\nfour", "max_tokens": 7,
                                              "ignore_eos": True, "stream_options": {"include_usage": True}})
    assert result.status == 200 and result.cut is None and result.done
    assert result.headers["Content-Type"].startswith("text/event-stream")
    assert result.headers["Transfer-Encoding"] == "chunked"
    chunks = result.chunks()
    assert len(chunks) == 7 and [words(text) for text in result.texts()] == [1] * 7
    assert all(chunk["object"] == "text_completion" and chunk["model"] == "org/plain" for chunk in chunks)
    assert len({chunk["id"] for chunk in chunks}) == 1 and chunks[0]["id"].startswith("cmpl-")
    assert [chunk["choices"][0]["finish_reason"] for chunk in chunks] == [None] * 6 + ["length"]
    final = result.events[-2]
    assert final["choices"] == [] and final["usage"] == {"prompt_tokens": 4, "completion_tokens": 7,
                                                         "total_tokens": 11}
    assert result.events[-1] == "[DONE]" and len(result.events) == 9


def test_streamed_chat_starts_with_a_role_only_chunk(plain: FakeServer) -> None:
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "three more words"},
                                             {"type": "image_url", "image_url": {"url": "data:,"}}]}]
    result = plain.stream("/v1/chat/completions", {"model": "org/plain", "messages": messages, "max_tokens": 5,
                                                   "stream_options": {"include_usage": True}})
    assert result.done and result.cut is None
    chunks = result.chunks()
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert [list(chunk["choices"][0]["delta"]) for chunk in chunks[1:]] == [["content"]] * 5
    assert [words(text) for text in result.texts()] == [1] * 5
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert result.usage() == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}


def test_streams_without_usage_have_no_usage_chunk(plain: FakeServer) -> None:
    result = plain.stream("/v1/completions", {"prompt": "x", "max_tokens": 3})
    assert result.done and result.usage() is None and len(result.events) == 4


def test_chunks_carry_several_tokens(packed: FakeServer) -> None:
    result = packed.stream("/v1/completions", {"prompt": "a b", "max_tokens": 10, "ignore_eos": True,
                                               "stream_options": {"include_usage": True}})
    assert [words(text) for text in result.texts()] == [4, 4, 2]
    assert result.usage() == {"prompt_tokens": 2, "completion_tokens": 10, "total_tokens": 12}
    chat = packed.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                  "max_tokens": 9, "stream_options": {"include_usage": True}})
    assert chat.chunks()[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [words(text) for text in chat.texts()] == [4, 4, 1] and chat.usage()["completion_tokens"] == 9


def test_sim_sent_records_each_write_and_when(packed: FakeServer) -> None:
    """/sim/sent: per request that ended, one [ms since arrival, tokens] per content chunk written, in the order written,
    never before the chunk's last token was due (TTFT + 3 gaps for the first chunk of 4); a whole answer is one write."""
    last = max((record["id"] for record in packed.sent()), default=0)
    before = time.monotonic()
    streamed = packed.stream("/v1/completions", {"prompt": "a b", "max_tokens": 10, "ignore_eos": True})
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 6}
    between = time.monotonic()
    status, _body = packed.request("POST", "/v1/chat/completions", chat)
    after = time.monotonic()
    assert streamed.done and status == 200
    # a request counts as done (and is recorded) just after its last byte is written: the client may read first
    assert wait_for(lambda: len(packed.sent(after=last)) >= 2, timeout=10)
    first, whole = packed.sent(after=last)
    assert first["id"] == last + 1 and whole["id"] == last + 2 and packed.sent(after=whole["id"]) == []
    # arrivals on the host's monotonic clock, the one this test reads
    assert before - 1e-6 <= first["arrived_s"] <= between + 1e-6, (before, first, between)
    assert between - 1e-6 <= whole["arrived_s"] <= after + 1e-6, (between, whole, after)
    assert (first["endpoint"], first["stream"], first["output_tokens"]) == ("completions", True, 10)
    assert [tokens for _ms, tokens in first["chunks"]] == [4, 4, 2]
    times = [ms for ms, _tokens in first["chunks"]]
    gap_ms = 1000.0 / PACE
    assert times == sorted(times) and times[0] >= 5 + 3 * gap_ms - 0.01, times  # GPUOPS_SIM_TTFT_MS 5, then 3 gaps
    assert times[-1] >= 5 + 9 * gap_ms - 0.01 and first["finished_ms"] >= times[-1], first
    assert (whole["endpoint"], whole["stream"], whole["output_tokens"]) == ("chat", False, 6)
    assert [tokens for _ms, tokens in whole["chunks"]] == [6] and whole["chunks"][0][0] >= 5 + 5 * gap_ms - 0.01
    status, body = packed.request("GET", "/sim/sent?after=x")
    assert status == 400 and json.loads(body)["error"]["param"] == "after"


def test_whole_responses(plain: FakeServer) -> None:
    status, body = plain.request("POST", "/v1/completions", {"prompt": [11, 12, 13], "max_tokens": 6})
    completion = json.loads(body)
    assert status == 200 and completion["object"] == "text_completion"
    assert words(completion["choices"][0]["text"]) == 6 and completion["choices"][0]["finish_reason"] == "length"
    assert completion["usage"] == {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}
    status, body = plain.request("POST", "/v1/chat/completions", {
        "model": "org/plain", "messages": [{"role": "user", "content": "a b c"}], "max_completion_tokens": 4})
    chat = json.loads(body)
    assert status == 200 and chat["object"] == "chat.completion" and chat["id"].startswith("chatcmpl-")
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert words(chat["choices"][0]["message"]["content"]) == 4 == chat["usage"]["completion_tokens"]


@pytest.mark.parametrize("body, tokens, reason", [
    ({}, 16, "length"),                                   # the OpenAI default max_tokens
    ({"max_tokens": 50}, NATURAL_LEN, "stop"),            # the answer ends by itself
    ({"max_tokens": 50, "ignore_eos": True}, 50, "length"),
    ({"max_tokens": 50, "min_tokens": 30}, 30, "stop"),
    ({"max_tokens": 8}, 8, "length"),
])
def test_natural_length_and_ignore_eos(plain: FakeServer, body: Dict[str, Any], tokens: int, reason: str) -> None:
    result = plain.stream("/v1/completions", dict(body, prompt="p", stream_options={"include_usage": True}))
    assert result.usage()["completion_tokens"] == tokens == sum(words(text) for text in result.texts())
    assert result.chunks()[-1]["choices"][0]["finish_reason"] == reason
    status, data = plain.request("POST", "/v1/completions", dict(body, prompt="p"))
    assert status == 200 and json.loads(data)["usage"]["completion_tokens"] == tokens


def test_chat_without_a_limit_stops_at_its_natural_length(plain: FakeServer) -> None:
    status, body = plain.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "q"}]})
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == NATURAL_LEN


@pytest.mark.parametrize("path, body, status, param", [
    ("/v1/completions", {"model": "nope", "prompt": "x"}, 404, "model"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": "8"}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": True}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "stream": "yes"}, 400, "stream"),
    ("/v1/completions", {"max_tokens": 2}, 400, "prompt"),
    ("/v1/completions", {"prompt": ["a", "b"]}, 400, "prompt"),
    ("/v1/completions", {"prompt": "x", "n": 2}, 400, "n"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 40000}, 400, None),  # beyond --max-model-len
    ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"content": "no role"}]}, 400, "messages"),
    ("/v1/completions", [1, 2], 400, None),
])
def test_bad_requests_get_openai_errors(plain: FakeServer, path: str, body: Any, status: int, param: Any) -> None:
    got, data = plain.request("POST", path, body)
    error = json.loads(data)["error"]
    assert got == status and error["code"] == status and error["param"] == param and error["message"]
    assert error["type"] == ("NotFoundError" if status == 404 else "BadRequestError")


def test_invalid_json_wrong_method_unknown_path(plain: FakeServer) -> None:
    status, data = plain.request("POST", "/v1/completions", raw=b'{"prompt": ')
    assert status == 400 and "not valid JSON" in json.loads(data)["error"]["message"]
    assert plain.request("GET", "/v1/completions")[0] == 405
    assert plain.request("GET", "/v2/nothing")[0] == 404
    assert plain.get_json("/version")["version"].startswith("0.")


def test_one_connection_serves_many_requests(plain: FakeServer) -> None:
    conn = plain.connection()
    try:
        first = plain.stream("/v1/completions", {"prompt": "x", "max_tokens": 3}, conn=conn)
        second = plain.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                       "max_tokens": 2}, conn=conn)
        conn.request("GET", "/health")
        health = conn.getresponse()
        assert health.status == 200 and health.read() == b""
        sock = conn.sock
        conn.request("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": 2}))
        assert json.loads(conn.getresponse().read())["usage"]["completion_tokens"] == 2
        assert conn.sock is sock  # kept alive, never reopened
    finally:
        conn.close()
    assert first.done and second.done


def test_metrics_count_every_token_sent_and_running_returns_to_0(plain: FakeServer) -> None:
    running = 'vllm:num_requests_running{engine="0",model_name="org/plain"}'
    prompt = 'vllm:prompt_tokens_total{engine="0",model_name="org/plain"}'
    generated = 'vllm:generation_tokens_total{engine="0",model_name="org/plain"}'
    before = plain.metrics()
    assert before[running] == 0 and before['vllm:num_requests_waiting{engine="0",model_name="org/plain"}'] == 0
    text = plain.request("GET", "/metrics")[1].decode()
    for name, kind in (("vllm:num_requests_running", "gauge"), ("vllm:num_requests_waiting", "gauge"),
                       ("vllm:prompt_tokens_total", "counter"), ("vllm:generation_tokens_total", "counter")):
        assert f"# TYPE {name} {kind}\n" in text and f"# HELP {name} " in text

    results: List[StreamResult] = []
    lengths = [600 + 20 * index for index in range(8)]  # ~1.5 s each at PACE

    def one(index: int) -> None:
        results.append(plain.stream("/v1/completions", {
            "prompt": " ".join(["w"] * (index + 1)), "max_tokens": lengths[index], "ignore_eos": True,
            "stream_options": {"include_usage": True}}))

    threads = [threading.Thread(target=one, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    peak = 0.0

    def all_running() -> bool:
        nonlocal peak
        peak = max(peak, plain.metrics()[running])
        return peak == 8

    saw_eight = wait_for(all_running, timeout=10)
    for thread in threads:
        thread.join(60)
    assert saw_eight, f"at most {peak} requests seen running"
    assert all(result.done for result in results) and len(results) == 8
    after = plain.metrics()
    assert after[running] == 0  # each request stopped counting before its last byte reached us
    usages = [result.usage() for result in results]
    assert after[generated] - before[generated] == sum(usage["completion_tokens"] for usage in usages) == sum(lengths)
    assert after[prompt] - before[prompt] == sum(usage["prompt_tokens"] for usage in usages) == sum(range(1, 9))
    success = 'vllm:request_success_total{engine="0",finished_reason="length",model_name="org/plain"}'
    assert after[success] - before[success] == 8


def test_a_client_that_leaves_is_no_longer_running(plain: FakeServer) -> None:
    running = 'vllm:num_requests_running{engine="0",model_name="org/plain"}'
    conn = plain.connection()
    conn.request("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": 4000, "ignore_eos": True,
                                                        "stream": True}))
    response = conn.getresponse()
    response.readline()
    assert plain.metrics()[running] == 1
    conn.close()
    assert wait_for(lambda: plain.metrics()[running] == 0, timeout=10)


def test_urllib_reads_streams_and_errors(plain: FakeServer) -> None:
    body = json.dumps({"prompt": "x", "max_tokens": 5, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{plain.port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        lines = [line for line in response.read().decode().split("\n") if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and json.loads(lines[-2][6:])["usage"]["completion_tokens"] == 5
    bad = urllib.request.Request(f"http://127.0.0.1:{plain.port}/v1/completions", b"[", {})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(bad, timeout=30)  # pylint: disable=consider-using-with
    assert caught.value.code == 400 and json.loads(caught.value.read())["error"]["code"] == 400


def test_httpx_reads_streams(plain: FakeServer) -> None:
    httpx = pytest.importorskip("httpx")
    events: List[str] = []
    with httpx.Client(base_url=f"http://127.0.0.1:{plain.port}", timeout=30) as client:
        for _round in range(2):  # the second request reuses the kept-alive connection
            with client.stream("POST", "/v1/chat/completions", json={
                    "messages": [{"role": "user", "content": "x"}], "max_tokens": 6, "stream": True,
                    "stream_options": {"include_usage": True}}) as response:
                assert response.status_code == 200
                events += [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
        completion = client.post("/v1/completions", json={"prompt": "x y", "max_tokens": 3}).json()
    assert events.count("[DONE]") == 2
    assert [json.loads(event)["usage"]["completion_tokens"] for event in events if '"usage"' in event] == [6, 6]
    assert completion["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}


def test_aiohttp_reads_concurrent_streams(plain: FakeServer) -> None:
    aiohttp = pytest.importorskip("aiohttp")

    async def main() -> List[Dict[str, Any]]:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{plain.port}") as session:
            async def one(tokens: int) -> Dict[str, Any]:
                usage: Dict[str, Any] = {}
                texts = 0
                async with session.post("/v1/completions", json={
                        "prompt": "x", "max_tokens": tokens, "ignore_eos": True, "stream": True,
                        "stream_options": {"include_usage": True}}) as response:
                    async for raw in response.content:
                        line = raw.decode().strip()
                        if line.startswith("data: {"):
                            event = json.loads(line[6:])
                            usage = event.get("usage") or usage
                            texts += sum(len(choice["text"].split()) for choice in event["choices"])
                return {"usage": usage, "words": texts}
            return list(await asyncio.gather(*(one(10 + index) for index in range(16))))

    results = asyncio.run(main())
    assert [result["usage"]["completion_tokens"] for result in results] == [10 + index for index in range(16)]
    assert [result["words"] for result in results] == [10 + index for index in range(16)]


def test_64_concurrent_streams(packed: FakeServer) -> None:
    generated = 'vllm:generation_tokens_total{engine="0",model_name="org/packed"}'
    before = packed.metrics()[generated]
    results: List[StreamResult] = []
    lock = threading.Lock()

    def one(index: int) -> None:
        result = packed.stream("/v1/completions", {"prompt": "x", "max_tokens": 40 + index, "ignore_eos": True,
                                                   "stream_options": {"include_usage": True}}, timeout=60)
        with lock:
            results.append(result)

    threads = [threading.Thread(target=one, args=(index,)) for index in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(results) == 64 and all(result.done and result.cut is None for result in results)
    counts = sorted(result.usage()["completion_tokens"] for result in results)
    assert counts == [40 + index for index in range(64)]
    assert all(sum(words(text) for text in result.texts()) == result.usage()["completion_tokens"]
               for result in results)
    assert wait_for(lambda: packed.metrics()[generated] - before == sum(counts))
