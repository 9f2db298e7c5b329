# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What both benches share: the simulated host, the collection's import path, probes, medians, tables."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from gpusim.api import SIM_BIN_DIR, SIM_LIB_DIR, GpusimError, Host  # simulator/ is on PYTHONPATH (bench/run.py)

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


class SimHost(Host):
    """A simulated host (gpusim.api.Host) in a temporary directory, with the collection importable as
    ansible_collections.gpuops.fleet.

    Use as a context manager: on exit every process gpusim recorded is killed and the directory removed.
    """

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="gpuops-bench-")  # pylint: disable=consider-using-with
        root = Path(self._tmp.name)
        super().__init__(root / "state")
        self.collections = root / "collections"
        (self.collections / "ansible_collections" / "gpuops").mkdir(parents=True)
        (self.collections / "ansible_collections" / "gpuops" / "fleet").symlink_to(REPO)

    def __enter__(self) -> "SimHost":
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.state.exists():
                self.cleanup()
        finally:
            self._tmp.cleanup()

    def env(self) -> Dict[str, str]:
        """What a module on this host sees: the fake NVML first on the library path, the fake nvidia-smi first on PATH."""
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(SIM_LIB_DIR), env.get("LD_LIBRARY_PATH")]))
        env["PATH"] = os.pathsep.join([str(SIM_BIN_DIR), env.get("PATH", "")])
        env["GPUOPS_SIM_STATE"] = str(self.state)
        env["PYTHONPATH"] = os.pathsep.join([str(self.collections), str(SIM_DIR)])
        return env

    def gpusim(self, command: str, *args: str, check: bool = True,  # type: ignore[override]  # a bench wants the output
               env: Optional[Dict[str, str]] = None) -> str:
        """Run `python -m gpusim COMMAND --state DIR ARGS...` (gpusim.api.Host.gpusim) and return its stdout."""
        try:
            done = super().gpusim(command, *args, check=check, env=self.env() if env is None else env)
        except GpusimError as error:
            raise BenchError(str(error)) from None
        return done.stdout

    def vllm(self, *args: str) -> Dict[str, Any]:
        """Start a fake vLLM tree; gpusim's description of it (parent, workers, ...)."""
        result: Dict[str, Any] = json.loads(self.gpusim("vllm", *args))
        return result

    def probe(self, script: str, *args: str, timeout: float = 120) -> Any:
        """Run bench/<script> in a fresh interpreter on this host (LD_LIBRARY_PATH is read at its start) and parse its JSON."""
        argv = [sys.executable, str(REPO / "bench" / script), *args]
        done = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=timeout, check=False)
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
