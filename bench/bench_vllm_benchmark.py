# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_benchmark's streaming client against vllm bench serve's approach (aiohttp): ingest per core and timing error.

Run from the repository root: .venv/bin/python bench/run.py bench_vllm_benchmark
Exits non-zero only when something fails, never because a figure is slow.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

from _benchlib import REPO, BenchError, SteadyFakeVllm, bench_host, ensure_simulator, median, save_results, table

MODEL = "org/ingest"
CLIENTS = ("gpuops", "aiohttp")
TARGET_TOK_S = 20000.0


def probe(client: str, server: SteadyFakeVllm, concurrency: int, output_len: int, cpu: int) -> Dict[str, Any]:
    argv = [sys.executable, str(REPO / "bench" / "_ingest_probe.py"), client, server.url, MODEL, str(concurrency),
            str(output_len), str(cpu)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise BenchError("_ingest_probe.py %s failed (%d):\n%s" % (client, done.returncode, done.stderr.strip()))
    figures: Dict[str, Any] = json.loads(done.stdout)
    if figures["failed"]:
        raise BenchError("%s: %d requests failed: %s" % (client, figures["failed"], figures["failed_by_reason"]))
    return figures


def measure(levels: List[int], seconds: float, rounds: int, pace: float) -> List[Dict[str, Any]]:
    """Every load level, each client `rounds` times in alternating order, against one server."""
    cpus = sorted(os.sched_getaffinity(0))
    client_cpu, server_cpu = cpus[0], cpus[-1]
    rows = []
    with bench_host() as host:
        host.gpusim("create", "--gpus", "1")
        log = Path(host.state).parent / "fakevllm.log"
        server = SteadyFakeVllm(host, server_cpu, MODEL, pace, 20.0, log)
        try:
            server.wait_ready()
            for concurrency in levels:
                truth = server.pace_at(concurrency)
                output_len = max(64, int(seconds * truth))
                samples: Dict[str, List[Dict[str, Any]]] = {client: [] for client in CLIENTS}
                for round_index in range(rounds):
                    order = CLIENTS if round_index % 2 == 0 else tuple(reversed(CLIENTS))
                    for client in order:
                        samples[client].append(probe(client, server, concurrency, output_len, client_cpu))
                for client in CLIENTS:
                    rows.append(summarise(client, concurrency, truth, server.ttft_ms, samples[client]))
                    print("  %s" % line(rows[-1]), file=sys.stderr)
        finally:
            server.stop()
    return rows


def summarise(client: str, concurrency: int, truth: float, ttft_ms: float, samples: List[Dict[str, Any]]) -> Dict[str, Any]:
    per_cpu = [s["tokens"] / s["cpu_s"] for s in samples]
    return {
        "client": client, "concurrency": concurrency, "offered_tok_s": truth * concurrency,
        "read_tok_s": median([s["tokens"] / s["wall_s"] for s in samples]),
        "cpu_util": median([s["cpu_s"] / s["wall_s"] for s in samples]),
        "tok_per_cpu_s": median(per_cpu),
        "decode_err_pct": median([100.0 * (s["decode_tok_s"] / truth - 1) for s in samples]),
        "ttft_err_ms": median([s["median_ttft_ms"] - ttft_ms for s in samples]),
        "p99_itl_ms": median([s["p99_itl_ms"] for s in samples]),
        "gap_ms": 1000.0 / truth,
        "samples": samples,
    }


def line(row: Dict[str, Any]) -> str:
    return ("%s at %d streams: read %.0f tok/s, CPU %.0f%%, %.0f tok per CPU-second, decode error %+.2f%%, TTFT %+.2f ms"
            % (row["client"], row["concurrency"], row["read_tok_s"], 100 * row["cpu_util"], row["tok_per_cpu_s"],
               row["decode_err_pct"], row["ttft_err_ms"]))


def report(rows: List[Dict[str, Any]]) -> str:
    lines = [table(
        ["client", "streams", "offered tok/s", "read tok/s", "client CPU %", "tok per CPU-s", "decode err %",
         "TTFT err ms", "p99 ITL ms", "token gap ms"],
        [[r["client"], r["concurrency"], r["offered_tok_s"], r["read_tok_s"], 100 * r["cpu_util"], r["tok_per_cpu_s"],
          "%+.2f" % r["decode_err_pct"], "%+.2f" % r["ttft_err_ms"], r["p99_itl_ms"], r["gap_ms"]] for r in rows])]
    top = max(r["concurrency"] for r in rows)
    ours = next(r for r in rows if r["client"] == "gpuops" and r["concurrency"] == top)
    base = next(r for r in rows if r["client"] == "aiohttp" and r["concurrency"] == top)
    kept_up = ours["read_tok_s"] >= 0.97 * ours["offered_tok_s"]
    passed = ours["tok_per_cpu_s"] >= TARGET_TOK_S and ours["cpu_util"] < 1.0 and abs(ours["decode_err_pct"]) < 1.0
    lines += [
        "",
        "one token per SSE event (the fake server's GPUOPS_SIM_TOKENS_PER_CHUNK=1, no jitter, no concurrency slowdown); each",
        "client runs in its own process pinned to one core, the server to another. 'tok per CPU-s' = tokens read / the",
        "client's CPU time over the run: what one core sustains at this event rate (a busier core batches more events per",
        "wake-up, so it is a floor for the saturated rate). decode err = the client's decode_tok_s against the server's own",
        "pace (/sim/pace); TTFT err = median TTFT minus the server's injected delay. Medians of the rounds, clients",
        "alternating; both clients' outcomes go through the same metrics code.",
        "",
        "at %d streams, %.0f tok/s offered: vllm_benchmark %.0f tok per CPU-second (read %.0f tok/s at %.0f%% of a core),"
        % (top, ours["offered_tok_s"], ours["tok_per_cpu_s"], ours["read_tok_s"], 100 * ours["cpu_util"]),
        "  aiohttp (vllm bench serve's way) %.0f tok per CPU-second (read %.0f tok/s at %.0f%% of a core): ratio %.2fx"
        % (base["tok_per_cpu_s"], base["read_tok_s"], 100 * base["cpu_util"], ours["tok_per_cpu_s"] / base["tok_per_cpu_s"]),
        "  timing at that load: decode error %+.2f%% vs %+.2f%%, TTFT error %+.2f ms vs %+.2f ms%s"
        % (ours["decode_err_pct"], base["decode_err_pct"], ours["ttft_err_ms"], base["ttft_err_ms"],
           "" if kept_up else " (the server delivered only %.0f tok/s: its own lateness is in these errors)" % ours["read_tok_s"]),
        "target >= %.0f tok/s per core with decode error < 1%%: %s" % (TARGET_TOK_S, "PASS" if passed else "FAIL"),
        "load average: %s" % " ".join("%.2f" % v for v in os.getloadavg()),
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--levels", default="16,48,80", help="concurrent streams per load level")
    parser.add_argument("--pace", type=float, default=250.0, help="tokens/s per stream (the fake server's pace)")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each stream")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ensure_simulator()
    try:
        import aiohttp  # noqa: F401  # pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        print("aiohttp is missing: run `make venv` (requirements/controller.txt pins it)", file=sys.stderr)
        return 1
    try:
        rows = measure([int(v) for v in args.levels.split(",")], args.seconds, args.rounds, args.pace)
    except BenchError as exc:
        print("bench failed: %s" % exc, file=sys.stderr)
        return 1
    print(report(rows))
    path = save_results("bench_vllm_benchmark", {"rows": rows, "args": vars(args)})
    if path:
        print("figures and samples: %s" % path.relative_to(REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
