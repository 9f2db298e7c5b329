# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`make bench`: every bench in turn; non-zero when one of them fails (never for slowness)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHES = ("bench_gpu_facts.py", "bench_gpu_reclaim.py", "bench_vllm_benchmark.py", "bench_restart_vllm.py", "bench_fleet.py", "bench_gpu_report.py")


def main() -> int:
    failed = []
    for name in BENCHES:
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, str(Path(__file__).resolve().parent / name)], check=False).returncode:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
