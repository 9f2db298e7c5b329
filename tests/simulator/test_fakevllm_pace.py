# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fake vLLM's token pace: the NCCL_PROTO table, concurrency, chunking, no drift, and a client's measurement.

Live measurements are compared with the server's own /sim/pace with a tolerance wide enough for a loaded
2-core machine: the schedule is anchored (token k at first + k/pace), so lateness never accumulates.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import threading
from types import ModuleType
from typing import Dict, Iterator, List

import pytest
from gpusim_helpers import SIMULATOR, FakeServer, StreamResult, host_with_servers

TOLERANCE = 0.08


def load_pace() -> ModuleType:
    """The fake vLLM's pace module alone (it imports nothing of the fake package)."""
    spec = importlib.util.spec_from_file_location("fakevllm_pace", SIMULATOR / "fakevllm" / "vllm" / "_pace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


pace = load_pace()


@pytest.mark.parametrize("proto, expected", [
    (None, 47.3), ("", 47.3), ("  ", 47.3), ("LL", 57.6), ("ll", 57.6), ("LL128", 45.5), ("Simple", 49.0),
    ("SIMPLE", 49.0), ("^LL128", 47.3), ("LL,Simple", 47.3), ("bogus", 47.3)])
def test_base_pace_by_nccl_proto(proto: str, expected: float) -> None:
    assert pace.base_pace(proto) == expected


def test_concurrency_slows_every_stream() -> None:
    model = pace.PaceModel(base=50.0, concurrency_slowdown=0.001, jitter=0.0)
    assert model.at(1) == 50.0 == model.at(0)
    assert model.at(11) == pytest.approx(50.0 / 1.01)
    assert pace.PaceModel(100.0, 0.5, 0.0).at(3) == pytest.approx(50.0)


def test_jitter_never_accumulates() -> None:
    model = pace.PaceModel(base=50.0, concurrency_slowdown=0.0, jitter=0.3)
    clock = pace.TokenClock(model, first=100.0, streams=lambda: 1, rng=random.Random(7))
    dues = [clock.next_due() for _token in range(20000)]
    assert dues[0] == 100.0
    assert all(later >= earlier for earlier, later in zip(dues, dues[1:]))
    deviations = [due - (100.0 + index / 50.0) for index, due in enumerate(dues)]
    assert max(abs(deviation) for deviation in deviations) <= 0.3 / 50.0 + 1e-9  # one gap's jitter at most
    assert len({round(deviation, 9) for deviation in deviations}) > 1000  # it does jitter
    assert abs(sum(deviations) / len(deviations)) < 0.01 / 50.0  # zero mean
    gaps = [later - earlier for earlier, later in zip(dues, dues[1:])]
    assert min(gaps) < 0.019 and max(gaps) > 0.021  # single gaps vary, the mean pace does not


def test_the_pace_follows_the_number_of_running_requests() -> None:
    streams = [1]
    clock = pace.TokenClock(pace.PaceModel(100.0, 1.0, 0.0), first=0.0, streams=lambda: streams[0])
    assert clock.next_due() == 0.0 and clock.next_due() == pytest.approx(0.01)
    streams[0] = 2
    assert clock.next_due() == pytest.approx(0.03)  # half the pace from now on, nothing recomputed backwards
    assert clock.due_after(3) == pytest.approx(0.09)


# -- live servers --------------------------------------------------------------------------------------------

SERVERS: Dict[str, Dict[str, str]] = {
    "unset": {},
    "LL": {"NCCL_PROTO": "LL"},
    "LL128": {"NCCL_PROTO": "LL128"},
    "Simple": {"NCCL_PROTO": "Simple"},
    "override": {"NCCL_PROTO": "LL", "GPUOPS_SIM_TOKENS_PER_S": "123.5"},
    "crowded": {"GPUOPS_SIM_TOKENS_PER_S": "100", "GPUOPS_SIM_CONCURRENCY_SLOWDOWN": "0.5"},
    "packed": {"GPUOPS_SIM_TOKENS_PER_S": "80", "GPUOPS_SIM_TOKENS_PER_CHUNK": "4", "GPUOPS_SIM_TTFT_MS": "200"},
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, FakeServer]]:
    with host_with_servers(tmp_path_factory.mktemp("fakevllm-pace"), len(SERVERS)) as servers:
        started = {name: servers.start(gpus=str(index), env=env) for index, (name, env) in enumerate(SERVERS.items())}
        for server in started.values():
            server.wait_ready()
        yield started


def rate(result: StreamResult, first: int = 0, last: int = -1) -> float:
    """Tokens/s between two content chunks, as a client sees it (one token per chunk unless told)."""
    times = [when for when, event in zip(result.times, result.events)
             if isinstance(event, dict) and event.get("choices")]
    last = last % len(times)
    return (last - first) / (times[last] - times[first])


def run_streams(jobs: List[tuple]) -> List[StreamResult]:
    results: List[StreamResult] = [None] * len(jobs)  # type: ignore[list-item]

    def one(index: int, server: FakeServer, body: Dict[str, object]) -> None:
        results[index] = server.stream("/v1/completions", body)

    threads = [threading.Thread(target=one, args=(index, *job)) for index, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


def test_sim_pace_reports_the_table_and_the_override(fleet: Dict[str, FakeServer]) -> None:
    reports = {name: server.get_json("/sim/pace") for name, server in fleet.items()}
    assert {name: report["tokens_per_s"] for name, report in reports.items()} == {
        "unset": 47.3, "LL": 57.6, "LL128": 45.5, "Simple": 49.0, "override": 123.5, "crowded": 100.0, "packed": 80.0}
    assert reports["unset"]["nccl_proto"] is None and reports["LL"]["nccl_proto"] == "LL"
    assert reports["override"]["source"] == "GPUOPS_SIM_TOKENS_PER_S" and reports["LL"]["source"] == "NCCL_PROTO"
    assert {key: reports["unset"][key] for key in ("ttft_ms", "tokens_per_chunk", "concurrency_slowdown", "jitter")} \
        == {"ttft_ms": 25.0, "tokens_per_chunk": 1, "concurrency_slowdown": 0.001, "jitter": 0.02}
    assert fleet["LL128"].get_json("/sim/pace?concurrency=5")["tokens_per_s_at"] == pytest.approx(45.5 / 1.004)
    assert fleet["crowded"].get_json("/sim/pace?concurrency=3")["tokens_per_s_at"] == pytest.approx(50.0)
    assert fleet["unset"].request("GET", "/sim/pace?concurrency=zero")[0] == 400


def test_a_client_measures_the_reported_pace(fleet: Dict[str, FakeServer]) -> None:
    body = {"prompt": "x", "max_tokens": 60, "ignore_eos": True}
    unset, ll = run_streams([(fleet["unset"], body), (fleet["LL"], body)])
    for result, name in ((unset, "unset"), (ll, "LL")):
        assert result.done and len(result.chunks()) == 60
        expected = fleet[name].get_json("/sim/pace")["tokens_per_s"]
        assert rate(result) == pytest.approx(expected, rel=TOLERANCE), name
        first_chunk = next(when for when, event in zip(result.times, result.events) if isinstance(event, dict))
        assert first_chunk - result.started >= 0.025  # TTFT: never before the configured 25 ms
    assert rate(ll) > 1.1 * rate(unset)  # LL's 57.6 against 47.3: a difference a benchmark must see


def test_concurrent_streams_each_run_slower(fleet: Dict[str, FakeServer]) -> None:
    server = fleet["crowded"]
    expected = server.get_json("/sim/pace?concurrency=3")["tokens_per_s_at"]
    body = {"prompt": "x", "max_tokens": 70, "ignore_eos": True}
    results = run_streams([(server, body)] * 3)
    for result in results:
        assert result.done
        assert rate(result, 15, 50) == pytest.approx(expected, rel=2 * TOLERANCE)  # while all three run
    assert server.get_json("/sim/pace")["running_requests"] == 0


def test_a_chunk_goes_out_when_its_last_token_is_due(fleet: Dict[str, FakeServer]) -> None:
    server = fleet["packed"]
    (result,) = run_streams([(server, {"prompt": "x", "max_tokens": 48, "ignore_eos": True})])
    assert result.done and [len(text.split()) for text in result.texts()] == [4] * 12
    assert rate(result) * 4 == pytest.approx(80.0, rel=TOLERANCE)  # 4 tokens a chunk, 80 tokens/s
    first_chunk = next(when for when, event in zip(result.times, result.events) if isinstance(event, dict))
    assert first_chunk - result.started >= 0.2 + 3 / 80.0  # TTFT, then three more tokens to fill the chunk
