# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuops.fleet.vllm_benchmark through the real ansible-playbook, against the fake vLLM server.

The server's true pace is known to it (GET /sim/pace), its token counter is read by the test itself from
/metrics, and its faults are queued through /sim/faults: every figure the module reports is judged by a reading
that is not the module's own.

Accuracy: the fake server schedules each token on a fixed grid from its first one (jitter moves single tokens,
never the grid), so a request's TPOT is exact up to the lateness of its first and last token, over output_len - 1
gaps. With 128 tokens, a 10 ms late last token (a loaded 2-core machine) moves TPOT by 0.4%; the median over the
requests and then over 3 repeats keeps such outliers out, so the 1% bound holds with room to spare (measured: under
0.05% at concurrency 1, 8 and 64 on an idle machine).
"""

from __future__ import annotations

import json
import typing as t
from pathlib import Path

import pytest

from gpusim import api
from simfleet import SimHost, run_module, write_inventory

MODEL = "org/bench-model"
PACED_TTFT_MS = 50.0
PACKED_TTFT_MS = 200.0
PACKED_PACE = 400.0


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
    host = SimHost("bench-client", tmp / "host")
    host.gpusim("create", "--gpus", "2")
    started: t.List[FakeVllm] = []
    try:
        started.append(FakeVllm(host, 0, {"GPUOPS_SIM_TTFT_MS": str(PACED_TTFT_MS)}, tmp / "paced.log"))
        started.append(FakeVllm(host, 1, {"GPUOPS_SIM_TTFT_MS": str(PACKED_TTFT_MS), "GPUOPS_SIM_TOKENS_PER_CHUNK": "4",
                                          "GPUOPS_SIM_TOKENS_PER_S": str(PACKED_PACE)}, tmp / "packed.log"))
        for server in started:
            server.wait_ready()
        yield Servers(started[0], started[1], host, write_inventory(tmp / "inventory.json", [host]), tmp)
    finally:
        for server in started:
            server.stop()
        result = host.gpusim("cleanup", check=False)
        assert result.returncode == 0, result.stderr


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
    # 37 tokens: nine chunks of 4 and one of 1; a chunk count would say 10
    result = bench(servers, "packed-" + endpoint, url=server.url, model=MODEL, endpoint=endpoint, input_len=7,
                   output_len=37, num_requests=6, concurrency=2, warmup_requests=1, repeats=2, timeout=60)
    assert not result.get("failed"), result.get("msg")
    assert server.generated_tokens() - before == 37 * 13
    for run in result["runs"]:
        assert run["completed"] == 6 and run["failed"] == 0
        assert run["total_output_tokens"] == 37 * 6 and run["approximate_token_count"] is False
        assert run["total_input_tokens"] == 7 * 6  # the server counts whitespace-separated words
    # The first chunk leaves when the last of its 4 tokens is due: the delay plus 3 token gaps. Never earlier;
    # a few ms of HTTP and scheduling on top.
    gap_ms = 1000.0 / PACKED_PACE
    first_chunk_ms = PACKED_TTFT_MS + 3 * gap_ms
    ttft = result["metrics"]["median_ttft_ms"]["median"]
    assert first_chunk_ms - 0.5 <= ttft <= first_chunk_ms + 10.0, ttft
    # vllm bench serve's TPOT: (E2EL - TTFT) / (tokens - 1) = 33 gaps (token 3 to token 36) over 36 tokens
    tpot = result["metrics"]["median_tpot_ms"]["median"]
    assert abs(tpot / (gap_ms * 33 / 36) - 1) < 0.02, tpot


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
