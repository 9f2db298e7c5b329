# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""startup: a start-up by phase from vLLM's own log lines (V1 of two eras, V0, an unknown format, a partial log), the
summary's words, and the ready step's timeout from the last start-ups."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.startup import (
    adaptive_timeout, launched_here, parse_startup, remember, summary_line, totals)

# vLLM 0.9 (V1, a cold compile; cf. public issue logs of that era)
V1_09_COLD = """\
INFO 06-02 11:02:20 [api_server.py:1043] vLLM API server version 0.9.0
INFO 06-02 11:02:31 [default_loader.py:272] Loading weights took 6.14 seconds
INFO 06-02 11:02:31 [gpu_model_runner.py:1273] Model loading took 14.9889 GiB and 6.602181 seconds
INFO 06-02 11:02:40 [backends.py:416] Using cache directory: /root/.cache/vllm/torch_compile_cache/8715b0a56a/rank_0_0 for vLLM's torch.compile
INFO 06-02 11:02:40 [backends.py:426] Dynamo bytecode transform time: 8.50 s
INFO 06-02 11:03:11 [backends.py:170] Compiling a graph for general shape takes 36.76 s
INFO 06-02 11:03:17 [monitor.py:33] torch.compile takes 45.26 s in total
INFO 06-02 11:03:18 [kv_cache_utils.py:637] GPU KV cache size: 1,131,008 tokens
INFO 06-02 11:03:55 [gpu_model_runner.py:1933] Graph capturing finished in 37 secs, took 0.45 GiB
INFO 06-02 11:03:55 [core.py:167] init engine (profile, create kv cache, warmup model) took 83.84 seconds
INFO 06-02 11:03:56 [api_server.py:1336] Starting vLLM API server on http://0.0.0.0:8000
INFO:     Application startup complete.
"""

# a later V1 (0.11+: process prefixes, "GiB memory", compile ranges, a warm cache, two workers)
V1_LATE_WARM = """\
(Worker_TP0 pid=34322) INFO 05-06 20:59:57 [default_loader.py:384] Loading weights took 24.84 seconds
(Worker_TP1 pid=34323) INFO 05-06 20:59:58 [default_loader.py:384] Loading weights took 25.10 seconds
(Worker_TP0 pid=34322) INFO 05-06 20:59:59 [gpu_model_runner.py:4879] Model loading took 12.66 GiB memory and 31.657031 seconds
(Worker_TP1 pid=34323) INFO 05-06 20:59:59 [gpu_model_runner.py:4879] Model loading took 12.66 GiB memory and 31.900000 seconds
(Worker_TP0 pid=34322) INFO 05-06 21:00:16 [backends.py:1069] Using cache directory: /c/torch_compile_cache/7b98594710/rank_0_0 for vLLM's torch.compile
(Worker_TP0 pid=34322) INFO 05-06 21:00:16 [backends.py:1128] Dynamo bytecode transform time: 3.54 s
(Worker_TP0 pid=34322) INFO 05-06 21:00:17 [backends.py:286] Directly load the compiled graph(s) for compile range (1, 2048) from the cache, took 0.904 s
(Worker_TP0 pid=34322) INFO 05-06 21:00:17 [monitor.py:48] torch.compile took 4.61 s in total
(Worker_TP0 pid=34322) INFO 05-06 21:00:25 [gpu_model_runner.py:5100] Graph capturing finished in 7 secs, took 0.52 GiB
(EngineCore_DP0 pid=34300) INFO 05-06 21:00:26 [core.py:250] init engine (profile, create kv cache, warmup model) took 26.30 seconds
(APIServer pid=34200) INFO 05-06 21:00:29 [api_server.py:1900] Starting vLLM API server 0 on http://0.0.0.0:8000
"""

# vLLM 0.6 (V0: weights in GB, no torch.compile, graph capture without its memory)
V0_06 = """\
INFO 10-14 09:12:03 [model_runner.py:1067] Loading model weights took 14.9888 GB
INFO 10-14 09:12:09 [gpu_executor.py:122] # GPU blocks: 27702, # CPU blocks: 2048
INFO 10-14 09:12:21 [model_runner.py:1530] Graph capturing finished in 12 secs.
INFO 10-14 09:12:21 [llm_engine.py:447] init engine (profile, create kv cache, warmup model) took 18.20 seconds
INFO 10-14 09:12:22 [api_server.py:546] Starting vLLM API server on http://0.0.0.0:8000
"""


def phase(result, name):
    return next(item for item in result["phases"] if item["name"] == name)


def test_v1_cold_compile_every_phase():
    result = parse_startup(V1_09_COLD.splitlines(), 97.3)
    assert [item["name"] for item in result["phases"]] == ["weights", "compile", "graphs", "engine_init", "api"]
    assert phase(result, "weights") == {"name": "weights", "seconds": 6.6, "gib": 14.99, "cache": None}
    assert phase(result, "compile") == {"name": "compile", "seconds": 45.26, "gib": None, "cache": "miss"}
    assert phase(result, "graphs") == {"name": "graphs", "seconds": 37.0, "gib": 0.45, "cache": None}
    assert phase(result, "engine_init")["seconds"] == 83.84
    assert phase(result, "api")["seconds"] == 1.0  # 11:03:55 -> 11:03:56
    assert result["total_s"] == 97.3 and result["last_phase"] == "api"
    assert result["line"] == ("start-up 97 s: weights 6.6 s (14.99 GiB), compile: compiled, 45 s, graphs 37 s (0.45 GiB),"
                              " engine init 84 s, API up 1.0 s")


def test_v1_late_warm_cache_hit_and_the_slowest_rank():
    result = parse_startup(V1_LATE_WARM.splitlines(), 40.0)
    assert phase(result, "weights")["seconds"] == 31.9 and phase(result, "weights")["gib"] == 12.66
    assert phase(result, "compile") == {"name": "compile", "seconds": 4.61, "gib": None, "cache": "hit"}
    assert phase(result, "api")["seconds"] == 3.0
    assert "compile: cache hit, 4.6 s" in result["line"]


def test_v0_has_no_compile_phase_and_weights_without_seconds():
    result = parse_startup(V0_06.splitlines(), 25.0)
    assert [item["name"] for item in result["phases"]] == ["weights", "graphs", "engine_init", "api"]
    assert phase(result, "weights") == {"name": "weights", "seconds": None, "gib": 14.99, "cache": None}
    assert phase(result, "graphs") == {"name": "graphs", "seconds": 12.0, "gib": None, "cache": None}
    assert result["line"].startswith("start-up 25 s: weights (14.99 GiB), graphs 12 s, engine init 18 s")


@pytest.mark.parametrize("lines", [[], ["Server listening on port 8000", "ready.", "took a while"],
                                   ["INFO 01-01 00:00:00 something took 3 seconds"]])
def test_an_unknown_format_gives_the_total_only(lines):
    result = parse_startup(lines, 12.34)
    assert result == {"total_s": 12.34, "phases": [], "last_phase": None,
                      "line": "start-up 12 s (no start-up phases in the log)"}


def test_a_partial_log_ends_at_the_last_phase_reached():
    lines = V1_09_COLD.splitlines()[:5]  # weights done, compile begun (cache directory), nothing compiled yet
    result = parse_startup(lines, 300.0)
    assert [item["name"] for item in result["phases"]] == ["weights"]
    assert result["last_phase"] == "weights"
    lines = V1_09_COLD.splitlines()[:7]
    assert parse_startup(lines, 300.0)["last_phase"] == "compile"


def test_compile_without_its_total_line_sums_its_parts():
    lines = ["INFO 01-01 00:00:01 [backends.py:1] Directly load the compiled graph(s) for dynamic shape from the cache, took 2.100 s"]
    assert parse_startup(lines, 5.0)["phases"] == [{"name": "compile", "seconds": 2.1, "gib": None, "cache": "hit"}]
    # vLLM 0.9's load line carries no time: the phase is there, its seconds unknown
    lines = ["INFO 06-19 23:05:09 [backends.py:115] Directly load the compiled graph for shape None from the cache"]
    assert parse_startup(lines, 5.0)["phases"] == [{"name": "compile", "seconds": None, "gib": None, "cache": "hit"}]


def test_summary_line_without_a_total():
    assert summary_line(None, []) == "start-up (no start-up phases in the log)"


@pytest.mark.parametrize("history, ceiling, factor, floor, expected", [
    ([], 900, 2, 60, 900),  # nothing known: the ceiling
    ([30.0], 900, 2, 60, 60),  # the floor
    ([30.0, 100.0, 50.0], 900, 2, 60, 200),  # twice the slowest of the last ones
    ([600.0], 900, 2, 60, 900),  # never above the ceiling
    ([100.0], 900, 0, 60, 900),  # factor 0: off
    ([None, "x", 0], 900, 2, 60, 900),  # nothing usable
])
def test_adaptive_timeout(history, ceiling, factor, floor, expected):
    timeout, why = adaptive_timeout(history, ceiling, factor, floor)
    assert timeout == expected
    assert ("vllm_server_ready_timeout" in why) == (expected == ceiling)


def test_history_keeps_the_last_start_ups_per_configuration():
    history = {}
    for number in range(7):
        history = remember(history, "abc", {"total_s": float(number), "phases": []}, 1000.0 + number)
    history = remember(history, "def", {"total_s": 9.0, "phases": [{"name": "compile", "seconds": 1.0, "gib": None, "cache": "hit"}]}, 2000.0)
    assert totals(history, "abc") == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert totals(history, "def") == [9.0] and history["def"][0]["phases"][0]["cache"] == "hit"
    assert totals(history, "nope") == [] and totals(history, None) == []
    for number in range(25):
        history = remember(history, "h%d" % number, {"total_s": 1.0}, 3000.0 + number)
    assert len(history) == 20 and "abc" not in history and "h24" in history


def test_a_startup_is_kept_only_for_a_server_started_since_this_runs_launch():
    launched = 1_000_000.0
    assert launched_here(launched, launched + 0.3)
    assert launched_here(launched, launched - 1.0)  # the start time's whole-second boot time
    assert not launched_here(launched, launched - 3600.0)  # a server that has run for an hour
    assert not launched_here(None, launched) and not launched_here(launched, None)
