# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`make bench`: every bench in turn; non-zero when one of them fails (never for slowness).

`python bench/run.py NAME [ARGS...]` runs one bench (NAME with or without `.py`) with its own arguments. Each bench
runs as a child with bench/, simulator/ (gpusim), .collections/ (this checkout as ansible_collections.gpuops.fleet)
and tests/support/ on its PYTHONPATH: the benches import them and edit no sys.path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
BENCHES = ("bench_gpu_facts.py", "bench_gpu_reclaim.py", "bench_vllm_benchmark.py", "bench_workloads.py", "bench_restart_vllm.py",
           "bench_restart_cpu.py", "bench_lora.py", "bench_fleet.py", "bench_gpu_report.py", "bench_startup.py")
PATHS = (BENCH, REPO / "simulator", REPO / ".collections", REPO / "tests" / "support")


def bench_env() -> dict:
    """This process's environment with the benches' import paths first on PYTHONPATH."""
    paths = [str(path) for path in PATHS] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


def run(name: str, *args: str) -> int:
    script = BENCH / (name if name.endswith(".py") else name + ".py")
    if not script.is_file():
        print(f"no bench {script}", file=sys.stderr)
        return 2
    return subprocess.run([sys.executable, str(script), *args], env=bench_env(), check=False).returncode


def main(argv: list) -> int:
    if argv:
        return run(*argv)
    failed = []
    for name in BENCHES:
        print(f"== {name}", flush=True)
        if run(name):
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
