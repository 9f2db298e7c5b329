# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the benches share: a simulated host (tests/support's SimHost) in a temporary directory, probes run on it,
medians, tables, saved results."""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Sequence

from gpusim.api import SIM_BIN_DIR, SIM_LIB_DIR, FakeVllm, GpusimError  # simulator/ is on PYTHONPATH (bench/run.py)
from simhost import SimHost  # tests/support/ is on PYTHONPATH (bench/run.py)

REPO = Path(__file__).resolve().parent.parent
SIM_DIR = REPO / "simulator"

RESULTS_DIR = REPO / "bench" / "results"


class BenchError(Exception):
    """Something the bench needs failed (not slowness: a bench only reports that)."""


def ensure_simulator() -> None:
    """Build the fake NVML and nvidia-smi when they are missing (the only thing a bench builds)."""
    if (SIM_LIB_DIR / "libnvidia-ml.so.1").exists() and (SIM_BIN_DIR / "nvidia-smi").exists():
        return
    print("simulator not built: running make -C simulator/nvml", file=sys.stderr)
    subprocess.run(["make", "-C", str(SIM_DIR / "nvml")], check=True, stdout=sys.stderr)


@contextlib.contextmanager
def bench_host() -> Iterator[SimHost]:
    """A simulated host (tests/support's SimHost) in a temporary directory of its own.

    On exit every process gpusim recorded is killed and the directory removed; a `gpusim` command that fails in the
    block is a BenchError.
    """
    with tempfile.TemporaryDirectory(prefix="gpuops-bench-") as tmp:
        host = SimHost("bench", Path(tmp) / "state")
        try:
            yield host
        except GpusimError as error:
            raise BenchError(str(error)) from None
        finally:
            if host.state.exists():
                host.cleanup()


class SteadyFakeVllm(FakeVllm):
    """The fake vLLM at a steady pace (one token per chunk, no jitter, no concurrency slowdown) and `ttft_ms`, pinned
    to CPU `cpu` and started; `env` adds serving knobs. A server that never gets ready is a BenchError."""

    def __init__(self, host: SimHost, cpu: int, model: str, pace: float, ttft_ms: float, log: Path,
                 env: Optional[Dict[str, str]] = None) -> None:
        super().__init__(host, log, model=model, worker_mib=1024, cpu=cpu, env=dict({
            "GPUOPS_SIM_TOKENS_PER_S": str(pace), "GPUOPS_SIM_TTFT_MS": str(ttft_ms), "GPUOPS_SIM_TOKENS_PER_CHUNK": "1",
            "GPUOPS_SIM_JITTER": "0", "GPUOPS_SIM_CONCURRENCY_SLOWDOWN": "0"}, **(env or {})))
        self.ttft_ms = ttft_ms
        self.start()

    def wait_ready(self, timeout: float = 60.0) -> None:
        try:
            super().wait_ready(timeout)
        except GpusimError as error:
            raise BenchError(str(error)) from None


def run_probe(host: SimHost, script: str, *args: str, timeout: float = 120) -> Any:
    """Run bench/<script> in a fresh interpreter on ``host`` (LD_LIBRARY_PATH is read at its start) and parse its JSON."""
    argv = [sys.executable, str(REPO / "bench" / script), *args]
    done = subprocess.run(argv, env=host.process_env(), capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise BenchError(f"{script} failed ({done.returncode}):\n{done.stderr.strip()}")
    return json.loads(done.stdout)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain, right-aligned text table."""
    cells = [[str(h) for h in headers]] + [[_cell(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(value.rjust(widths[i]) for i, value in enumerate(row)) for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return str(value)


def save_results(name: str, results: object) -> Optional[Path]:
    """Write bench/results/<name>.json (git-ignored); None when the directory cannot be written."""
    try:
        RESULTS_DIR.mkdir(exist_ok=True)
        path = RESULTS_DIR / f"{name}.json"
        path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    except OSError:
        return None
    return path
