# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fake vLLM's start-up phases: vLLM's log lines with the knobs' durations, the compile cache (compiled once per
compile-relevant configuration, loaded after), a hang after a phase, and its record of each start-up."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any, Dict, List

from gpusim_helpers import FakeServers, SimHost, wait_for

PHASES = {"GPUOPS_SIM_WEIGHTS_S": "0.6", "GPUOPS_SIM_COMPILE_S": "1.5", "GPUOPS_SIM_GRAPHS_S": "0.4",
          "GPUOPS_SIM_INIT_S": "0.2", "GPUOPS_SIM_COMPILE_LOAD_S": "0.1"}


def records(simhost: SimHost) -> List[Dict[str, Any]]:
    """The fake's own record of its start-ups (STATE/startups.jsonl), oldest first."""
    path = Path(simhost.state) / "startups.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_once(servers: FakeServers, env: Dict[str, str], args: tuple = (), gpus: str = "0") -> Any:
    server = servers.start(gpus=gpus, env=env, args=args)
    began = time.monotonic()
    server.wait_ready(timeout=60)
    took = time.monotonic() - began
    log = server.log_text()
    assert server.stop(signal.SIGTERM) == 0
    return took, log


def test_phases_are_logged_and_the_second_start_loads_from_the_cache(simhost: SimHost, servers: FakeServers,
                                                                     tmp_path: Path) -> None:
    env = dict(PHASES, VLLM_CACHE_ROOT=str(tmp_path / "cache"))
    cold, log = run_once(servers, env)
    assert "Loading weights took 0.60 seconds" in log
    assert "Model loading took 0.2300 GiB memory and" in log
    assert "Compiling a graph for compile range (1, 8192) takes 1.50 s" in log
    assert "torch.compile took 1.50 s in total" in log
    assert "Graph capturing finished in 0 secs, took 0.45 GiB" in log
    assert "init engine (profile, create kv cache, warmup model) took" in log
    assert "Starting vLLM API server 0 on http://" in log and "Application startup complete." in log
    assert cold >= 0.6 + 1.5 + 0.4 + 0.2
    first = records(simhost)
    assert [record["outcome"] for record in first] == ["ready"]
    assert first[0]["compiled"] is True and first[0]["cache"] == "miss"
    assert [phase["name"] for phase in first[0]["phases"]] == ["weights", "compile", "graphs", "engine_init", "api"]
    assert first[0]["cache_dir"].startswith(str(tmp_path / "cache" / "torch_compile_cache"))
    assert (Path(first[0]["cache_dir"]) / "rank_0_0" / "backbone" / "vllm_compile_cache.py").is_file()

    # the same compile-relevant configuration, another NCCL protocol: loaded from the cache
    warm, log = run_once(servers, dict(env, NCCL_PROTO="LL128"))
    assert "Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 0.100 s" in log
    assert "Compiling a graph" not in log
    second = records(simhost)[1]
    assert second["compiled"] is False and second["cache"] == "hit" and second["cache_dir"] == first[0]["cache_dir"]
    assert warm < cold - 1.0

    # a compile-relevant change (max model length) compiles again, in its own entry
    _took, log = run_once(servers, env, args=("--max-model-len", "4096"))
    third = records(simhost)[2]
    assert third["compiled"] is True and third["cache_dir"] != first[0]["cache_dir"]


def test_enforce_eager_skips_compile_and_graphs(simhost: SimHost, servers: FakeServers, tmp_path: Path) -> None:
    _took, log = run_once(servers, dict(PHASES, VLLM_CACHE_ROOT=str(tmp_path / "cache")), args=("--enforce-eager",))
    assert "torch.compile" not in log and "Graph capturing" not in log
    record = records(simhost)[0]
    assert [phase["name"] for phase in record["phases"]] == ["weights", "engine_init", "api"]
    assert record["compiled"] is None and not (tmp_path / "cache").exists()


def test_no_startup_lines_in_the_unknown_format(simhost: SimHost, servers: FakeServers, tmp_path: Path) -> None:
    took, log = run_once(servers, dict(PHASES, VLLM_CACHE_ROOT=str(tmp_path / "cache"), GPUOPS_SIM_STARTUP_LOG="none"))
    assert "took" not in log and "Application startup complete" not in log
    assert took >= 2.5  # the phases still take their time
    assert records(simhost)[0]["compiled"] is True


def test_hang_after_weights_from_the_second_start(simhost: SimHost, servers: FakeServers, tmp_path: Path) -> None:
    env = dict(PHASES, VLLM_CACHE_ROOT=str(tmp_path / "cache"), GPUOPS_SIM_HANG_AFTER_PHASE="weights",
               GPUOPS_SIM_HANG_FROM_STARTUP="2")
    run_once(servers, env)
    server = servers.start(gpus="0", env=env)
    assert wait_for(lambda: len(records(simhost)) == 2, timeout=20)
    assert records(simhost)[1]["outcome"] == "hung"
    assert [phase["name"] for phase in records(simhost)[1]["phases"]] == ["weights"]
    time.sleep(1.0)
    assert server.health() == 503
    assert "Loading weights took" in server.log_text() and "torch.compile" not in server.log_text()
    assert server.stop(signal.SIGTERM) == 0


def test_the_v0_format_has_no_torch_compile(simhost: SimHost, servers: FakeServers, tmp_path: Path) -> None:
    _took, log = run_once(servers, dict(PHASES, VLLM_CACHE_ROOT=str(tmp_path / "cache"), GPUOPS_SIM_STARTUP_LOG="v0"))
    assert "Loading model weights took 0.2300 GB" in log and "Starting vLLM API server on http://" in log
    assert "torch.compile" not in log and "Model loading took" not in log
    record = records(simhost)[0]
    assert record["compiled"] is None and [phase["name"] for phase in record["phases"]] == ["weights", "graphs", "engine_init", "api"]
