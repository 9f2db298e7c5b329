# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuops.fleet.vllm_benchmark through the real ansible-playbook, against the fake vLLM server.

The server's true pace is known to it (GET /sim/pace), it records when it sent each chunk (GET /sim/sent), its token
counter is read by the test itself from /metrics, and its faults are queued through /sim/faults: every figure the
module reports is judged by a reading that is not the module's own. Figures over a few chunks are judged against the
instants the server recorded; the decode rate over 128 tokens against the configured pace.

Accuracy: the fake server schedules each token on a fixed grid from its first one (jitter moves single tokens,
never the grid), so a request's TPOT is exact up to the lateness of its first and last token, over output_len - 1
gaps. With 128 tokens, a 10 ms late last token (a loaded 2-core machine) moves TPOT by 0.4%; the median over the
requests and then over 3 repeats keeps such outliers out, so the 1% bound holds with room to spare (measured: under
0.05% at concurrency 1, 8 and 64 on an idle machine).
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
import typing as t
from pathlib import Path

import pytest

from gpusim import api
from ansible_run import run_module
from bench_host import bench_host
from readings import median_of_medians, sent_phases
from simhost import SimHost

MODEL = "org/bench-model"
PACED_TTFT_MS = 50.0
PACKED_TTFT_MS = 200.0
PACKED_PACE = 100.0  # a 10 ms token gap: a TTFT read one chunk late (+40 ms) stands clear of a loaded machine's lag


class FakeVllm(api.FakeVllm):
    """One fake vLLM server this test starts on a simulated host (gpusim.api.FakeVllm), stopped by its own Popen handle."""

    def __init__(self, host: SimHost, gpu: int, knobs: t.Dict[str, str], log: Path) -> None:
        super().__init__(host, log, gpus=str(gpu), model=MODEL, env=knobs, worker_mib=2048)
        self.start()

    def generated_tokens(self) -> float:
        """The server's own count of generated tokens (its /metrics), read by the test."""
        return self.counter("vllm:generation_tokens_total", MODEL)


class Servers(t.NamedTuple):
    paced: FakeVllm   # the default pace (NCCL_PROTO unset: 47.3 tok/s per stream), one token per chunk
    packed: FakeVllm  # 4 tokens per chunk, a long TTFT, a fast pace
    host: SimHost
    inventory: Path
    tmp: Path


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> t.Iterator[Servers]:
    tmp = tmp_path_factory.mktemp("vllm-benchmark")
    with bench_host(tmp, FakeVllm, [
            ("paced", {"GPUOPS_SIM_TTFT_MS": str(PACED_TTFT_MS)}),
            ("packed", {"GPUOPS_SIM_TTFT_MS": str(PACKED_TTFT_MS), "GPUOPS_SIM_TOKENS_PER_CHUNK": "4",
                        "GPUOPS_SIM_TOKENS_PER_S": str(PACKED_PACE)})]) as (host, (paced, packed), inventory):
        yield Servers(paced, packed, host, inventory, tmp)


def bench(servers: Servers, name: str, *extra: str, **args: t.Any) -> t.Dict[str, t.Any]:
    return run_module("vllm_benchmark", servers.inventory, servers.tmp / name, args, *extra)["bench-client"]


@pytest.mark.parametrize("concurrency, num_requests", [(1, 1), (8, 8), (64, 64)])
def test_decode_rate_within_one_percent_of_the_server_pace(servers: Servers, concurrency: int, num_requests: int) -> None:
    server = servers.paced
    truth = server.get_json("/sim/pace?concurrency=%d" % concurrency)["tokens_per_s_at"]
    before = server.generated_tokens()
    result = bench(servers, "pace-%d" % concurrency, url=server.url, input_len=32, output_len=128,
                   num_requests=num_requests, concurrency=concurrency, warmup_requests=0, repeats=3, timeout=60)
    after = server.generated_tokens()
    assert not result.get("failed"), result.get("msg")
    decode = result["metrics"]["decode_tok_s"]
    assert decode["n"] == 3 and decode["ci95"] is not None
    assert abs(decode["median"] / truth - 1) < 0.01, "measured %.3f tok/s, the server paced %.3f" % (decode["median"], truth)
    assert [run["total_output_tokens"] for run in result["runs"]] == [128 * num_requests] * 3
    assert after - before == 3 * 128 * num_requests  # the server's own count agrees with the module's
    assert [run["server_generation_tokens"] for run in result["runs"]] == [128 * num_requests] * 3
    assert result["model"] == MODEL and result["changed"] is False
    if concurrency == 1:
        # one token per chunk: the first is due exactly GPUOPS_SIM_TTFT_MS after the request; a few ms of HTTP and
        # scheduling on top (10 ms allowed for a loaded 2-core machine; a token gap here is 21 ms)
        ttft = result["metrics"]["median_ttft_ms"]["median"]
        assert PACED_TTFT_MS - 0.5 <= ttft <= PACED_TTFT_MS + 10.0, ttft


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_ttft_and_exact_tokens_when_chunks_carry_four(servers: Servers, endpoint: str) -> None:
    server = servers.packed
    before = server.generated_tokens()
    last_id = max((record["id"] for record in server.sent()), default=0)
    # 37 tokens: nine chunks of 4 and one of 1; a chunk count would say 10
    result = bench(servers, "packed-" + endpoint, url=server.url, model=MODEL, endpoint=endpoint, input_len=7,
                   output_len=37, num_requests=6, concurrency=2, warmup_requests=1, repeats=2, timeout=60)
    assert not result.get("failed"), result.get("msg")
    assert server.generated_tokens() - before == 37 * 13
    for run in result["runs"]:
        assert run["completed"] == 6 and run["failed"] == 0
        assert run["total_output_tokens"] == 37 * 6 and run["approximate_token_count"] is False
        assert run["total_input_tokens"] == 7 * 6  # the server counts whitespace-separated words
    # what the server recorded it sent, and when: the warm-up request, then each repeat's 6
    _warmup, *runs = sent_phases(server.sent(after=last_id), 1, 6, 6)
    assert all((request.tokens, request.first_chunk_tokens) == (37, 4) for run in runs for request in run)
    # the first chunk leaves when the last of its 4 tokens is due (the delay plus 3 token gaps), never earlier
    gap_ms = 1000.0 / PACKED_PACE
    first_chunk_ms = PACKED_TTFT_MS + 3 * gap_ms
    assert min(request.first_ms for run in runs for request in run) >= first_chunk_ms - 0.01
    # the client's TTFT is the server's first chunk as the server sent it, plus HTTP and scheduling (18 ms seen at load 8
    # on 2 cores); a client that took the second chunk for the first would be 4 token gaps (40 ms) late
    sent_ttft = median_of_medians(runs, lambda request: request.first_ms)
    ttft = result["metrics"]["median_ttft_ms"]["median"]
    assert sent_ttft - 0.5 <= ttft <= sent_ttft + 3 * gap_ms, (ttft, sent_ttft)
    # vllm bench serve's TPOT: (E2EL - TTFT) / (tokens - 1): the server's first-to-last chunk over 36 tokens
    sent_tpot = median_of_medians(runs, lambda request: request.interval_ms / (request.tokens - 1))
    tpot = result["metrics"]["median_tpot_ms"]["median"]
    assert abs(tpot / sent_tpot - 1) < 0.02, (tpot, sent_tpot)


def test_each_fault_is_counted_with_its_reason(servers: Servers) -> None:
    server = servers.packed
    queued = server.post_json("/sim/faults", {"http_500": 1, "error_event": 1, "stall": 1, "drop": 1})
    assert len(queued["queued"]) == 4
    result = bench(servers, "faults", url=server.url, input_len=5, output_len=20, num_requests=7, concurrency=1,
                   warmup_requests=0, repeats=1, timeout=3)
    assert not result.get("failed"), result.get("msg")
    run = result["runs"][0]
    assert run["completed"] == 3 and run["failed"] == 4
    assert run["failed_by_reason"] == {"http_error": 1, "error_event": 1, "timeout": 1, "connection_dropped": 1}
    assert [error["request"] for error in run["errors"]] == [0, 1, 2, 3]
    assert "HTTP 500" in run["errors"][0]["error"]
    assert run["total_output_tokens"] == 60
    assert server.get_json("/sim/faults")["queued"] == []  # every fault was served
    assert any("4 of 7 requests failed" in warning for warning in result["warnings"])


def test_a_server_whose_engine_dies_is_a_failed_measurement_not_a_fast_one(servers: Servers) -> None:
    """The fake's engine core dies after the warmup and the first repeat (GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS=5): every
    later request is answered at once with HTTP 500 EngineDeadError while /health and /v1/models still answer. The dead
    repeat counts its failures and is left out of every figure (its 0 ms TTFT is not a fast server); on the dead server
    the task fails, naming the answer."""
    dying = FakeVllm(servers.host, 0, {"GPUOPS_SIM_TOKENS_PER_S": "400", "GPUOPS_SIM_TTFT_MS": "5",
                                       "GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS": "5"}, servers.tmp / "dying.log")
    try:
        dying.wait_ready()
        load = {"url": dying.url, "input_len": 5, "output_len": 8, "num_requests": 4, "concurrency": 1, "timeout": 30}
        result = bench(servers, "dying", warmup_requests=1, repeats=2, **load)
        assert not result.get("failed"), result.get("msg")
        first, second = result["runs"]
        assert (first["completed"], first["failed"]) == (4, 0)
        assert (second["completed"], second["failed"], second["failed_by_reason"]) == (0, 4, {"http_error": 4})
        assert "HTTP 500" in second["errors"][0]["error"] and "EngineDeadError" in second["errors"][0]["error"]
        ttft = result["metrics"]["median_ttft_ms"]
        assert ttft["n"] == 1 and ttft["min"] == first["median_ttft_ms"] > 0  # the dead repeat is in no figure
        assert result["metrics"]["decode_tok_s"]["n"] == 1
        assert any("repeat 2: 4 of 4 requests failed" in warning for warning in result["warnings"]), result["warnings"]
        assert dying.generated_tokens() == 5 * 8  # the server's own count: nothing after its engine died

        dead = bench(servers, "dead", warmup_requests=1, repeats=1, **load)
        assert dead["failed"] and "every warmup request failed" in dead["msg"] and "EngineDeadError" in dead["msg"], dead["msg"]
        dead = bench(servers, "dead-nowarmup", warmup_requests=0, repeats=2, **load)
        assert dead["failed"] and "no request completed in any repeat" in dead["msg"] and "http_error: 4" in dead["msg"]
        assert "EngineDeadError" in dead["msg"]
        assert dying.generated_tokens() == 5 * 8
    finally:
        dying.stop()


def test_save_result_in_vllm_bench_shape(servers: Servers) -> None:
    path = servers.tmp / "saved.json"
    result = bench(servers, "save", url=servers.packed.url, input_len=5, output_len=9, num_requests=4, concurrency=4,
                   warmup_requests=0, repeats=1, request_rate=50, save_result=str(path))
    assert not result.get("failed"), result.get("msg")
    saved = json.loads(path.read_text())
    assert saved["backend"] == "openai" and saved["model_id"] == MODEL and saved["request_rate"] == 50.0
    assert saved["completed"] == 4 and saved["total_output_tokens"] == 36 and saved["max_concurrency"] == 4
    assert saved["median_tpot_ms"] == result["runs"][0]["median_tpot_ms"]


def test_check_mode_sends_nothing(servers: Servers) -> None:
    before = servers.paced.generated_tokens()
    result = bench(servers, "check", "--check", url=servers.paced.url, output_len=50, num_requests=3)
    assert result["changed"] is False and "no request was sent" in result["msg"] and result["runs"] == []
    assert servers.paced.generated_tokens() == before


def test_unreachable_url_and_unknown_model(servers: Servers) -> None:
    url = "http://127.0.0.1:%d" % api.free_port()
    result = bench(servers, "unreachable", url=url)
    assert result["failed"] and result["msg"].startswith("url=%r: cannot reach" % url)
    result = bench(servers, "unknown", url=servers.paced.url, model="org/not-served")
    assert result["failed"]
    assert result["msg"] == "model='org/not-served' is not served at url=%r; the server lists: %s" % (servers.paced.url, MODEL)


def test_bad_option_names_option_and_value(servers: Servers) -> None:
    before = servers.paced.generated_tokens()
    result = bench(servers, "bad", url=servers.paced.url, concurrency=0)
    assert result["failed"] and "concurrency: 0 is out of range" in result["msg"]
    result = bench(servers, "bad-type", url=servers.paced.url, output_len="lots")
    assert result["failed"] and "output_len" in result["msg"]
    assert servers.paced.generated_tokens() == before


class NoModelsFront(socketserver.ThreadingTCPServer):
    """A server that speaks the API but is not vLLM's shape, in front of a fake vLLM, as AIPerf's mock server is:
    GET /v1/models and /metrics answer 404, the Prometheus text is at /vllm/metrics; everything else is passed
    through byte for byte (one request per connection, as both the module and urllib send them)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream_port: int) -> None:
        super().__init__(("127.0.0.1", 0), _FrontHandler)
        self.upstream_port = upstream_port
        self.seen: t.List[str] = []
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self.server_address[1]

    def __enter__(self) -> "NoModelsFront":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join(5)


class _FrontHandler(socketserver.BaseRequestHandler):
    server: NoModelsFront

    def handle(self) -> None:
        conn = self.request
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                piece = conn.recv(65536)
                if not piece:
                    return
                data += piece
            head, _sep, rest = data.partition(b"\r\n\r\n")
            request_line, _sep, headers = head.partition(b"\r\n")
            method, path, version = request_line.split(b" ")
            self.server.seen.append("%s %s" % (method.decode(), path.decode()))
            if path in (b"/v1/models", b"/metrics"):
                body = b'{"detail":"Not Found"}'
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                             b"Connection: close\r\n\r\n%s" % (len(body), body))
                return
            if path == b"/vllm/metrics":
                path = b"/metrics"
            length = 0
            for line in headers.split(b"\r\n"):
                name, _sep, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            with socket.create_connection(("127.0.0.1", self.server.upstream_port), timeout=60) as upstream:
                upstream.sendall(b" ".join((method, path, version)) + b"\r\n" + headers + b"\r\n\r\n" + rest)
                sent = len(rest)
                while sent < length:
                    piece = conn.recv(65536)
                    if not piece:
                        return
                    upstream.sendall(piece)
                    sent += len(piece)
                while True:
                    piece = upstream.recv(65536)
                    if not piece:
                        return
                    conn.sendall(piece)
        except OSError:
            return  # the client closed first (a request in flight at the end of a duration): nothing to pass on


def test_a_server_without_v1_models_and_its_metrics_elsewhere(servers: Servers) -> None:
    server = servers.packed
    with NoModelsFront(server.port) as front:
        before = server.generated_tokens()
        result = bench(servers, "front", url=front.url, model=MODEL, metrics_url="/vllm/metrics", input_len=5, output_len=9,
                       num_requests=4, concurrency=2, warmup_requests=1, repeats=1, timeout=30)
        assert not result.get("failed"), result.get("msg")
        assert any("GET /v1/models answered HTTP 404" in warning and "as given, unchecked" in warning
                   for warning in result["warnings"])
        assert server.generated_tokens() - before == 9 * 5  # the fake served all five, through the front
        run = result["runs"][0]
        assert run["completed"] == 4 and run["total_output_tokens"] == 36
        assert run["server_generation_tokens"] == 36  # read through /vllm/metrics: the server's count, not the client's
        assert result["metrics_url"] == front.url + "/vllm/metrics" and "GET /vllm/metrics" in front.seen
        # no model: /v1/models is needed to find one, and the task fails before any generation request
        front.seen.clear()
        result = bench(servers, "front-nomodel", url=front.url, input_len=5, output_len=9, num_requests=4)
        assert result["failed"] and "GET /v1/models answered HTTP 404" in result["msg"]
        assert front.seen == ["GET /v1/models"]
        # metrics_url empty: nothing read, said in the notes, no warning about it
        front.seen.clear()
        result = bench(servers, "front-nometrics", url=front.url, model=MODEL, metrics_url="", input_len=5, output_len=9,
                       num_requests=2, concurrency=2, warmup_requests=0, repeats=1)
        assert not result.get("failed"), result.get("msg")
        assert result["runs"][0]["completed"] == 2 and result["runs"][0]["server_generation_tokens"] is None
        assert any("metrics_url is empty" in note for note in result["notes"])
        assert not any("metrics" in path for path in front.seen)


def test_sweep_gives_each_level_its_own_pace_and_the_knee(servers: Servers) -> None:
    server = servers.paced
    truth = {level: server.get_json("/sim/pace?concurrency=%d" % level)["tokens_per_s_at"] for level in (1, 8)}
    before = server.generated_tokens()
    result = bench(servers, "sweep", url=server.url, input_len=16, output_len=48, num_requests=8, concurrency=[8, 1],
                   warmup_requests=1, repeats=2, timeout=60)
    assert not result.get("failed"), result.get("msg")
    assert [level["concurrency"] for level in result["sweep"]] == [8, 1]
    assert server.generated_tokens() - before == 2 * 48 * (1 + 2 * 8)  # two levels, each one warmup and two repeats of 8
    for level in result["sweep"]:
        decode = level["metrics"]["decode_tok_s"]["median"]
        assert abs(decode / truth[level["concurrency"]] - 1) < 0.02, (level["concurrency"], decode, truth)
    assert result["metrics"] == result["sweep"][0]["metrics"]  # the top-level keys: the first level given
    knee = result["knee"]
    assert knee["reference_level"] == 1 and knee["option"] == "concurrency"
    ratio = truth[8] / truth[1]
    if abs(ratio - 0.9) > 0.03:  # the server's own pace says on which side of the 10% tolerance 8 streams are
        assert knee["level"] == (8 if ratio >= 0.9 else 1), (knee, truth)


def test_duration_counts_requests_in_flight_at_the_end(servers: Servers) -> None:
    server = servers.paced
    truth = server.get_json("/sim/pace?concurrency=2")["tokens_per_s_at"]
    per_request_s = PACED_TTFT_MS / 1000 + 63 / truth  # 64 tokens: about 1.4 s
    prompts_before = server.counter("vllm:prompt_tokens_total", MODEL)
    started = time.monotonic()
    result = bench(servers, "duration", url=server.url, input_len=8, output_len=64, concurrency=2, duration=2.0,
                   warmup_requests=0, repeats=1, timeout=60)
    elapsed = time.monotonic() - started
    assert not result.get("failed"), result.get("msg")
    run = result["runs"][0]
    assert 1.2 < per_request_s < 2.0  # so each stream finishes one request and is in the middle of its second at 2 s
    assert (run["completed"], run["failed"], run["in_flight_at_end"]) == (2, 0, 2)
    received = (server.counter("vllm:prompt_tokens_total", MODEL) - prompts_before) / 8
    assert received == 4  # the server's count of requests it was sent: two completed, two in flight
    assert 2.0 <= run["duration"] < 2.5 and elapsed >= 2.0
    assert run["request_throughput"] == 2 / run["duration"]


def test_goodput_and_percentiles_against_the_known_ttft(servers: Servers) -> None:
    server = servers.packed
    first_chunk_ms = PACKED_TTFT_MS + 3 * 1000.0 / PACKED_PACE  # 230 ms, never less
    args = dict(url=server.url, input_len=5, output_len=9, num_requests=4, concurrency=4, warmup_requests=0, repeats=1)
    strict = bench(servers, "goodput-strict", percentiles=[50, 99.9], goodput={"ttft_ms": first_chunk_ms - 50}, **args)
    loose = bench(servers, "goodput-loose", goodput={"ttft_ms": first_chunk_ms + 500, "tpot_ms": 50}, **args)
    assert not strict.get("failed") and not loose.get("failed")
    run = strict["runs"][0]
    assert (run["good_requests"], run["goodput_pct"], run["slo_missed"]) == (0, 0.0, {"ttft_ms": 4})
    assert first_chunk_ms - 0.5 <= run["p50_ttft_ms"] <= run["p99_9_ttft_ms"] and "p90_ttft_ms" not in run
    run = loose["runs"][0]
    assert (run["good_requests"], run["goodput_pct"]) == (4, 100.0)
    assert run["request_goodput"] == 4 / run["duration"]


@pytest.mark.parametrize("option, value, message", [
    ("percentiles", [0], "percentiles: 0.0 is not a percentile"),
    ("percentiles", [101], "percentiles: 101.0 is not a percentile"),
    ("goodput", {"ttft_ms": -1}, "goodput.ttft_ms: -1.0 must be a positive"),
    ("goodput", {"ttft": 500}, "goodput.ttft"),
    ("concurrency", [], "concurrency: [] is an empty sweep"),
    ("duration", 0, "duration: 0.0 must be a positive, finite number of seconds"),
])
def test_bad_new_values_send_nothing(servers: Servers, option: str, value: t.Any, message: str) -> None:
    server = servers.paced
    before = (server.generated_tokens(), server.counter("vllm:prompt_tokens_total", MODEL))
    result = bench(servers, "bad-" + option, url=server.url, **{option: value})
    assert result["failed"] and message in result["msg"], result["msg"]
    assert (server.generated_tokens(), server.counter("vllm:prompt_tokens_total", MODEL)) == before
