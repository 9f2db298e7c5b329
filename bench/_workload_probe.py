# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One vllm_benchmark run, pinned to one core; prints its figures, each request's timing and its CPU time as JSON.

    python bench/_workload_probe.py CPU PARAMS_JSON

PARAMS_JSON is the module's options (url, model, endpoint, workload, ...). The run is the module's own code
(build_spec, then Benchmark.run, its metrics sampler thread included) without Ansible around it; the only addition
is that every repeat's outcomes are kept, so the bench can pair each request with what the server recorded for it.
CPU is the process's CPU time over Benchmark.run (every thread of it); main_cpu_s the main thread's alone (the event
loop that reads the streams, and the module's reads of /metrics before and after each repeat), the rest being the
module's metrics sampler thread.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Dict, List, Sequence, Tuple

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import Outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.run import Benchmark
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.spec import BenchSpec, build_spec

# What the bench reads of the module's result (the rest is per-repeat detail it does not need)
RESULT_KEYS = ("metrics", "per_turn", "schedule_slip_ms", "prefix_cache", "workload", "endpoint", "notes")


class RecordingBenchmark(Benchmark):
    """The module's Benchmark, also keeping each repeat's outcomes in `repeats`."""

    def __init__(self, spec: BenchSpec) -> None:
        super().__init__(spec)
        self.repeats: List[Sequence[Outcome]] = []

    def _repeat(self, *args: Any) -> Tuple[List[Outcome], float, Any]:
        outcomes, duration, requested = super()._repeat(*args)
        self.repeats.append(outcomes)
        return outcomes, duration, requested


def timing(repeat: int, outcome: Outcome) -> Dict[str, Any]:
    return {"repeat": repeat, "index": outcome.index, "success": outcome.success, "reason": outcome.reason,
            "start": outcome.start, "ttft": outcome.ttft, "latency": outcome.latency,
            "output_tokens": outcome.output_tokens, "prompt_tokens": outcome.prompt_tokens,
            "cached_tokens": outcome.cached_tokens}


def main(argv: List[str]) -> int:
    os.sched_setaffinity(0, {int(argv[0])})
    params: Dict[str, Any] = json.loads(argv[1])
    benchmark = RecordingBenchmark(build_spec(params))
    cpu_start, main_start, wall_start = time.process_time(), time.thread_time(), time.perf_counter()
    result = benchmark.run()
    cpu_s, main_cpu_s = time.process_time() - cpu_start, time.thread_time() - main_start
    wall_s = time.perf_counter() - wall_start
    runs = result["runs"]
    figures: Dict[str, Any] = {key: result.get(key) for key in RESULT_KEYS}
    figures.update(
        cpu_s=cpu_s, main_cpu_s=main_cpu_s, wall_s=wall_s, warnings=benchmark.warnings,
        completed=sum(run["completed"] for run in runs), failed=sum(run["failed"] for run in runs),
        failed_by_reason=[run["failed_by_reason"] for run in runs if run["failed"]],
        output_tokens=sum(run["total_output_tokens"] for run in runs),
        requests=[timing(number, outcome) for number, outcomes in enumerate(benchmark.repeats, 1) for outcome in outcomes])
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
