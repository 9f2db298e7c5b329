# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_benchmark's workloads (dataset, replay, sessions) against its synthetic prompts: timing error against what the
fake vLLM recorded, and client CPU per 1,000 output tokens.

Run from the repository root: .venv/bin/python bench/run.py bench_workloads
Exits non-zero only when something fails, never because a figure is slow.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from _benchlib import REPO, BenchError, SteadyFakeVllm, bench_host, ensure_simulator, median, save_results, table
from simhost import SimHost

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.prompts import WORDS
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.stats import percentile

MODEL = "org/workloads"
KINDS = ("synthetic", "dataset", "sessions", "replay")
TARGET_DECODE_ERR_PCT = 0.2
TARGET_CPU_RATIO = 1.5
TTFT_MS = 20.0
# The trace's own arrival rate before its speed-up (requests per second), and its shared prefixes
TRACE_RATE = 2.0
TRACE_ROOTS = 8
TRACE_ROOT_BLOCKS = 8
TRACE_BLOCKS = (4, 24)  # fewest and most blocks of a trace's prompt


class FakeServer(SteadyFakeVllm):
    """The fake vLLM at a steady pace, its prefix cache on and a prefill cost per uncached prompt token, pinned to its
    own core; what it recorded of each request (/sim/sent)."""

    def __init__(self, host: SimHost, cpu: int, pace: float, prefill_ms: float, log: Path) -> None:
        super().__init__(host, cpu, MODEL, pace, TTFT_MS, log, env={"GPUOPS_SIM_PREFILL_MS_PER_TOKEN": str(prefill_ms)})

    def last_id(self) -> int:
        return max((record["id"] for record in self.sent()), default=0)

    def records_after(self, last_id: int, count: int) -> List[Dict[str, Any]]:
        """The /sim/sent records after `last_id`, waiting (up to 5 s) until `count` of them are there."""
        deadline = time.monotonic() + 5.0
        while True:
            records = self.sent(after=last_id)
            if len(records) >= count or time.monotonic() > deadline:
                return records
            time.sleep(0.05)


def write_dataset(path: Path, entries: int, output_len: int, seed: int) -> None:
    """A JSONL dataset: prompts of 16 to 1024 words (log-normal around 256), every fourth one as chat messages, each
    with an output length of 0.5x to 1.5x `output_len`."""
    rng = random.Random("dataset/%d" % seed)
    with path.open("w", encoding="utf-8") as handle:
        for number in range(entries):
            length = min(1024, max(16, int(rng.lognormvariate(math.log(256), 0.6))))
            text = " ".join(rng.choice(WORDS) for _word in range(length))
            entry: Dict[str, Any] = {"output_len": rng.randint(output_len // 2, output_len * 3 // 2)}
            if number % 4 == 3:
                entry["messages"] = [{"role": "system", "content": "you answer in words"}, {"role": "user", "content": text}]
            else:
                entry["prompt"] = text
            handle.write(json.dumps(entry) + "\n")


def write_trace(path: Path, lines: int, output_len: int, block_size: int, seed: int) -> None:
    """A Mooncake-format trace at TRACE_RATE requests/s (Poisson): prompts of TRACE_BLOCKS blocks, whose first 2 to
    TRACE_ROOT_BLOCKS blocks are one of TRACE_ROOTS shared prefixes (the same hash_ids) and the rest their own;
    output lengths 0.5x to 1.5x `output_len`."""
    rng = random.Random("trace/%d" % seed)
    roots = [[root * TRACE_ROOT_BLOCKS + block for block in range(TRACE_ROOT_BLOCKS)] for root in range(TRACE_ROOTS)]
    next_id = TRACE_ROOTS * TRACE_ROOT_BLOCKS
    timestamp = 0.0
    with path.open("w", encoding="utf-8") as handle:
        for _line in range(lines):
            blocks = rng.randint(*TRACE_BLOCKS)
            shared = rng.choice(roots)[:rng.randint(2, min(TRACE_ROOT_BLOCKS, blocks - 1))]
            hash_ids = shared + list(range(next_id, next_id + blocks - len(shared)))
            next_id += blocks - len(shared)
            handle.write(json.dumps({
                "timestamp": int(timestamp), "input_length": blocks * block_size - rng.randint(0, block_size - 1),
                "output_length": rng.randint(output_len // 2, output_len * 3 // 2), "hash_ids": hash_ids}) + "\n")
            timestamp += rng.expovariate(TRACE_RATE) * 1000.0


def trace_speedup(target: int, output_len: int, pace: float, block_size: int, prefill_ms: float) -> float:
    """The speed-up at which the trace keeps about `target` requests running: its arrival rate times a request's
    mean time (TTFT, the prefill of its uncached blocks, its decode) is `target`."""
    uncached_words = (sum(TRACE_BLOCKS) - 2 - TRACE_ROOT_BLOCKS) / 2.0 * block_size
    seconds = (TTFT_MS + uncached_words * prefill_ms) / 1000.0 + output_len / pace
    return target / seconds / TRACE_RATE


def probe(params: Dict[str, Any], cpu: int) -> Dict[str, Any]:
    argv = [sys.executable, str(REPO / "bench" / "_workload_probe.py"), str(cpu), json.dumps(params)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise BenchError("_workload_probe.py failed (%d):\n%s" % (done.returncode, done.stderr.strip()))
    figures: Dict[str, Any] = json.loads(done.stdout)
    if figures["failed"]:
        raise BenchError("%s: %d requests failed: %s" % (params["workload"]["kind"], figures["failed"], figures["failed_by_reason"]))
    return figures


def pair(requests: Sequence[Dict[str, Any]], records: Sequence[Dict[str, Any]]) -> List[Tuple[Dict[str, Any], Dict[str, Any]]]:
    """Each completed request with the server's record of it: same prompt, cached and output tokens, then in the
    order the client sent them and the server saw them arrive."""
    groups: Dict[Tuple[int, int, int], Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]] = defaultdict(lambda: ([], []))
    for request in requests:
        if request["success"]:
            groups[(request["prompt_tokens"], request["cached_tokens"] or 0, request["output_tokens"])][0].append(request)
    for record in records:
        groups[(record["prompt_tokens"], record["cached_tokens"], record["output_tokens"])][1].append(record)
    pairs = []
    for key, (sent, recorded) in groups.items():
        if len(sent) != len(recorded):
            raise BenchError("%d requests of (prompt, cached, output) tokens %s, but the server recorded %d"
                             % (len(sent), key, len(recorded)))
        pairs.extend(zip(sorted(sent, key=lambda r: r["start"]), sorted(recorded, key=lambda r: r["arrived_s"])))
    return pairs


def server_tpot_ms(record: Dict[str, Any]) -> float:
    """The server's time per output token: its first to its last content chunk, over the tokens after the first."""
    return (record["chunks"][-1][0] - record["chunks"][0][0]) / (record["output_tokens"] - 1)


def in_flight(records: Sequence[Dict[str, Any]]) -> Tuple[float, int]:
    """The server's requests running when each request arrived, itself included (from their arrivals to their ends):
    (median, max)."""
    spans = [(r["arrived_s"], r["arrived_s"] + r["finished_ms"] / 1000.0) for r in records]
    counts = [sum(1 for start, end in spans if start <= when < end) for when, _end in spans]
    return median(counts), max(counts)


def measure_one(server: FakeServer, params: Dict[str, Any], streams: Any, pace: float, cpu: int) -> Dict[str, Any]:
    """One run of one workload: the client's figures against the server's records of the same requests."""
    last = server.last_id()
    figures = probe(params, cpu)
    records = server.records_after(last, figures["completed"])
    pairs = pair(figures["requests"], records)
    decode = (figures["metrics"].get("decode_tok_s") or {}).get("median")
    sent_decode = 1000.0 / median([server_tpot_ms(record) for _request, record in pairs if record["output_tokens"] > 1])
    ttft_err = sorted(1000.0 * request["ttft"] - record["chunks"][0][0] for request, record in pairs)
    read_late = sorted(1000.0 * (request["start"] + request["ttft"] - record["arrived_s"]) - record["chunks"][0][0]
                       for request, record in pairs)
    row: Dict[str, Any] = {
        "kind": params["workload"]["kind"], "streams": streams, "endpoint": figures["endpoint"],
        "requests": figures["completed"], "output_tokens": figures["output_tokens"],
        "decode_tok_s": decode, "sent_decode_tok_s": sent_decode, "pace": pace,
        "decode_err_pace_pct": 100.0 * (decode / pace - 1), "decode_err_sent_pct": 100.0 * (decode / sent_decode - 1),
        "ttft_err_p50_ms": percentile(ttft_err, 50, presorted=True), "ttft_err_p99_ms": percentile(ttft_err, 99, presorted=True),
        "first_read_late_p50_ms": percentile(read_late, 50, presorted=True),
        "first_read_late_p99_ms": percentile(read_late, 99, presorted=True),
        "last_read_late_p50_ms": median([1000.0 * (request["start"] + request["latency"] - record["arrived_s"])
                                         - record["chunks"][-1][0] for request, record in pairs]),
        "cpu_s": figures["cpu_s"], "wall_s": figures["wall_s"],
        "cpu_per_1k": 1000.0 * figures["cpu_s"] / figures["output_tokens"],
        "main_cpu_per_1k": 1000.0 * figures["main_cpu_s"] / figures["output_tokens"],
        "sampler_cpu_per_s": (figures["cpu_s"] - figures["main_cpu_s"]) / figures["wall_s"],
        "prefix_cache": figures["prefix_cache"], "workload": figures["workload"], "warnings": figures["warnings"],
        "server_cached_tokens": sum(record["cached_tokens"] for record in records),
    }
    if row["kind"] == "replay":
        row["schedule_slip_ms"] = figures["schedule_slip_ms"]
        row["in_flight_p50"], row["in_flight_max"] = in_flight(records)
    if row["kind"] == "sessions":
        turns = params["workload"]["turns"]
        by_turn: Dict[int, List[Dict[str, Any]]] = defaultdict(list)
        for request, record in pairs:
            by_turn[request["index"] % turns + 1].append(record)
        row["per_turn"] = [dict(entry, server_ttft_p50_ms=median([r["chunks"][0][0] for r in by_turn[entry["turn"]]]),
                                server_cached_tokens=sum(r["cached_tokens"] for r in by_turn[entry["turn"]]))
                           for entry in figures["per_turn"]]
    return row


def measure(args: argparse.Namespace, tmp: Path, host: SimHost) -> List[Dict[str, Any]]:
    cpus = sorted(os.sched_getaffinity(0))
    client_cpu, server_cpu = cpus[0], cpus[-1]
    server = FakeServer(host, server_cpu, args.pace, args.prefill_ms, tmp / "fakevllm.log")
    rows: List[Dict[str, Any]] = []
    output_len = max(16, int(args.seconds * args.pace))
    dataset, trace = tmp / "dataset.jsonl", tmp / "trace.jsonl"
    write_dataset(dataset, 256, output_len, args.seed)
    write_trace(trace, args.replay_requests, output_len, args.block_size, args.seed)
    base = {"url": server.url, "model": MODEL, "endpoint": "completions", "input_len": args.input_len,
            "output_len": output_len, "warmup_requests": 0, "repeats": args.repeats, "seed": args.seed, "ignore_eos": True}
    try:
        server.wait_ready()
        truth = server.pace_at(1)
        for number, level in enumerate(args.levels):
            requests = max(4, args.requests_per_stream * level)
            fresh = args.seed + 1000 * (number + 1)  # prompts no earlier run sent, so none is in the prefix cache
            runs = {
                "synthetic": dict(base, seed=fresh, concurrency=[level], num_requests=requests, workload={"kind": "synthetic"}),
                "dataset": dict(base, concurrency=[level], num_requests=requests,
                                workload={"kind": "dataset", "file": str(dataset)}),
                "sessions": dict(base, seed=fresh, endpoint="chat", concurrency=[level],
                                 workload={"kind": "sessions", "sessions": max(2, level), "turns": args.turns}),
            }
            for kind in (kind for kind in KINDS if kind in runs and kind in args.kinds):
                rows.append(measure_one(server, runs[kind], level, truth, client_cpu))
                print("  %s" % line(rows[-1]), file=sys.stderr)
        if "replay" in args.kinds:
            speedup = trace_speedup(args.replay_in_flight, output_len, truth, args.block_size, args.prefill_ms)
            params = dict(base, workload={"kind": "replay", "file": str(trace), "speedup": round(speedup, 3),
                                          "block_size": args.block_size})
            row = measure_one(server, params, "trace", truth, client_cpu)
            row["speedup"] = speedup
            rows.append(row)
            print("  %s" % line(rows[-1]), file=sys.stderr)
    finally:
        server.stop()
    return rows


def judge(rows: List[Dict[str, Any]]) -> None:
    """Each row's CPU against the synthetic row at the same streams (a replay against the busiest level), and its
    verdict against the targets."""
    synthetic = {row["streams"]: row for row in rows if row["kind"] == "synthetic"}
    top = max(synthetic) if synthetic else None
    for row in rows:
        base = synthetic.get(row["streams"], synthetic.get(top) if row["streams"] == "trace" else None)
        row["baseline_streams"] = base["streams"] if base else None
        row["cpu_ratio"] = row["cpu_per_1k"] / base["cpu_per_1k"] if base else None
        decode_ok = abs(row["decode_err_sent_pct"]) <= TARGET_DECODE_ERR_PCT
        cpu_ok = row["cpu_ratio"] is None or row["cpu_ratio"] <= TARGET_CPU_RATIO
        row["verdict"] = "PASS" if decode_ok and cpu_ok else "FAIL (%s)" % ", ".join(
            what for what, ok in (("decode", decode_ok), ("CPU", cpu_ok)) if not ok)


def line(row: Dict[str, Any]) -> str:
    return ("%s at %s streams: %d requests, decode %.3f tok/s (server sent %.3f, %+.3f%%), TTFT error p50 %+.2f ms, "
            "last chunk read late p50 %+.2f ms, %.3f CPU-s per 1k tokens" % (
                row["kind"], row["streams"], row["requests"], row["decode_tok_s"], row["sent_decode_tok_s"],
                row["decode_err_sent_pct"], row["ttft_err_p50_ms"], row["last_read_late_p50_ms"], row["cpu_per_1k"]))


def report(rows: List[Dict[str, Any]]) -> str:
    lines = [table(
        ["workload", "streams", "requests", "out tokens", "decode tok/s", "sent tok/s", "err vs sent %", "err vs pace %",
         "TTFT err p50 ms", "p99 ms", "1st read late p99 ms", "last read late p50 ms", "CPU-s / 1k tok", "main thread",
         "x synthetic", "verdict"],
        [["%s (%s)" % (row["kind"], row["endpoint"]), row["streams"], row["requests"], row["output_tokens"], "%.3f" % row["decode_tok_s"],
          "%.3f" % row["sent_decode_tok_s"], "%+.3f" % row["decode_err_sent_pct"], "%+.3f" % row["decode_err_pace_pct"],
          "%+.2f" % row["ttft_err_p50_ms"], "%+.2f" % row["ttft_err_p99_ms"],
          "%+.2f" % row["first_read_late_p99_ms"], "%+.2f" % row["last_read_late_p50_ms"], "%.3f" % row["cpu_per_1k"],
          "%.3f" % row["main_cpu_per_1k"],
          "%.2f" % row["cpu_ratio"] if row["cpu_ratio"] is not None else "-", row["verdict"]] for row in rows])]
    for row in rows:
        if row["kind"] == "replay":
            slip = row["schedule_slip_ms"] or {}
            lines += ["", "replay of %d lines: speed-up %.2f, requests in flight at the server when one arrived p50 %.0f, "
                      "max %d; schedule slip p50 %.2f ms, p99 %.2f ms, max %.2f ms; prefix cache %s" % (
                          row["requests"], row["speedup"], row["in_flight_p50"], row["in_flight_max"], slip.get("p50", float("nan")),
                          slip.get("p99", float("nan")), slip.get("max", float("nan")), cache_text(row))]
        if row["kind"] == "sessions":
            said = "sessions at %s streams (%s): prefix cache %s" % (row["streams"], row["workload"]["requests"], cache_text(row))
            lines += ["", said,
                      table(["turn", "requests", "client TTFT p50 ms", "server TTFT p50 ms", "client cached tokens",
                             "server cached tokens"],
                            [[entry["turn"], entry["requests"], (entry["ttft_ms"] or {}).get("p50", float("nan")),
                              entry["server_ttft_p50_ms"], entry["cached_tokens"], entry["server_cached_tokens"]]
                             for entry in row["per_turn"]])]
    lines += [
        "",
        "the fake vLLM at a steady pace (no jitter, no concurrency slowdown, one token per chunk, TTFT %.0f ms plus" % TTFT_MS,
        "its prefill per uncached prompt token), pinned to one core; each run is the module's own code (build_spec and",
        "Benchmark.run, its metrics sampler included, no warm-up) in a process pinned to the other core. decode tok/s =",
        "the module's decode_tok_s; sent tok/s = the same figure from the server's /sim/sent chunk times (1000 / median",
        "of (last chunk - first chunk) / (tokens - 1)); err vs pace = against /sim/pace. TTFT err = each request's TTFT",
        "minus its first chunk's time after arrival as the server recorded it (requests paired by their token counts,",
        "then in order of sending); it includes the request's way to the server's arrival stamp (the server's thread",
        "reading it), which the client rightly counts; 1st read late = when the client stamped the first chunk minus",
        "when the server wrote it, both on the host's monotonic clock: the client's own lateness; last read late = the",
        "same for the last chunk, which ends the decode time. CPU-s / 1k tok = the",
        "client process's CPU time over the run per 1,000 output tokens (judged), main thread = the same for the main",
        "thread alone (the event loop reading the streams), the rest being the module's metrics sampler thread",
        "(%.1f-%.1f ms of CPU per second of run here). A token costs less the more streams are read: each wake-up of the" % (
            1000.0 * min(row["sampler_cpu_per_s"] for row in rows), 1000.0 * max(row["sampler_cpu_per_s"] for row in rows)),
        "event loop handles more events, so a run that delivers fewer tokens per second (a dataset's uneven lengths",
        "leave streams idle at its end) pays more per token; at 1 and 8 streams a run uses under half a CPU-second, and its",
        "ratio moves by tens of percent from run to run. x synthetic = against the synthetic row at",
        "the same streams (a replay against the busiest level). A dataset's prompts are the file's at every level, so a",
        "later level finds some in the prefix cache; the other workloads draw fresh prompts for each run.",
        "targets: |err vs sent| <= %.1f %% and CPU <= %.1fx synthetic" % (TARGET_DECODE_ERR_PCT, TARGET_CPU_RATIO),
        "load average: %s" % " ".join("%.2f" % value for value in os.getloadavg()),
    ]
    return "\n".join(lines)


def cache_text(row: Dict[str, Any]) -> str:
    cache = row["prefix_cache"]
    if not cache:
        return "not counted"
    return "%d of %d prompt tokens hit (%.0f %%; /sim/sent: %d cached)" % (
        cache["hits"], cache["queries"], 100.0 * (cache["hit_rate"] or 0.0), row["server_cached_tokens"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--levels", default="1,8,64", help="concurrent streams (sessions at once) per level")
    parser.add_argument("--kinds", default=",".join(KINDS), help="workloads to run (synthetic is every other's baseline)")
    parser.add_argument("--pace", type=float, default=47.3, help="tokens/s per stream (the fake server's pace)")
    parser.add_argument("--seconds", type=float, default=3.0, help="mean length of a stream (output tokens / pace)")
    parser.add_argument("--requests-per-stream", type=int, default=2, help="synthetic and dataset requests per stream (at least 4)")
    parser.add_argument("--turns", type=int, default=3, help="turns per session (sessions = streams, at least 2)")
    parser.add_argument("--replay-requests", type=int, default=320, help="lines of the generated trace")
    parser.add_argument("--replay-in-flight", type=int, default=64, help="requests in flight the trace's speed-up aims at")
    parser.add_argument("--block-size", type=int, default=64, help="words per hash_ids block of the trace")
    parser.add_argument("--input-len", type=int, default=256, help="synthetic prompt and session message words")
    parser.add_argument("--prefill-ms", type=float, default=0.1, help="the fake server's prefill per uncached prompt token")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.levels = [int(value) for value in args.levels.split(",")]
    args.kinds = args.kinds.split(",")
    unknown = sorted(set(args.kinds) - set(KINDS))
    if unknown or "synthetic" not in args.kinds:
        parser.error("--kinds: give synthetic (the baseline) and any of %s" % ", ".join(KINDS[1:]))
    ensure_simulator()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_before = os.getloadavg()
    try:
        with bench_host() as host:
            host.gpusim("create", "--gpus", "1")
            rows = measure(args, Path(host.state).parent, host)
    except BenchError as exc:
        print("bench failed: %s" % exc, file=sys.stderr)
        return 1
    judge(rows)
    print("%s, load average before %s" % (started, " ".join("%.2f" % value for value in load_before)))
    print(report(rows))
    path = save_results("bench_workloads", {"rows": rows, "args": vars(args), "started": started,
                                            "load_before": load_before, "load_after": os.getloadavg()})
    if path:
        print("figures: %s" % path.relative_to(REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
