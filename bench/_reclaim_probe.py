# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run by bench_gpu_reclaim.py inside the simulated host's environment: one gpu_reclaim run, timed.

The time is the module's work, as the module does it (module_utils._reclaim.run.run_reclaim): check the parameters,
open NVML, read, plan, signal, verify, close NVML.
Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import time

import psutil
import pynvml
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.run import run_reclaim


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grace", type=float, default=10)
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--settle", type=float, default=None, help="omitted: the module's default")
    args = parser.parse_args()
    params = {"signals": ["TERM", "KILL"], "grace": args.grace, "timeout": args.timeout}
    if args.settle is not None:
        params["settle"] = args.settle
    start = time.perf_counter()
    result, _warnings, _failed = run_reclaim(params, False, False, lambda: (pynvml, psutil))
    wall_s = time.perf_counter() - start
    if "gpus" not in result:
        raise SystemExit("gpu_reclaim failed before reading the GPUs: %s" % result["msg"])
    print(json.dumps({
        "wall_s": wall_s,
        "elapsed_s": result["elapsed_s"],
        "verified": result["verified"],
        "changed": result["changed"],
        "msg": result["msg"],
        "killed": [{key: entry[key] for key in ("pid", "name", "role", "signal", "seconds_to_exit", "ended")}
                   for entry in result["killed"]],
        "used_mib_before": [gpu["memory_used_mib_before"] for gpu in result["gpus"]],
        "used_mib_after": [gpu["memory_used_mib_after"] for gpu in result["gpus"]],
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
