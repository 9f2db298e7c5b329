# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures: simulated GPU hosts that are always cleaned up (by recorded PID), and their inventory."""

from __future__ import annotations


import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

from simfleet import SIM_LIB, SimHost, write_inventory


@pytest.fixture(scope="session", autouse=True)
def fake_nvml_built() -> None:
    if not (SIM_LIB / "libnvidia-ml.so.1").exists():
        pytest.fail("the fake NVML is not built: run `make sim` (the README's test command does)")


@pytest.fixture
def make_host(tmp_path: Path) -> t.Iterator[t.Callable[..., SimHost]]:
    """Factory: make_host(name, *create_args) -> a created simulated host; every one is cleaned up."""
    hosts: t.List[SimHost] = []

    def factory(name: str = "gpu-node-01", *create_args: str) -> SimHost:
        host = SimHost(name, tmp_path / "hosts" / name)
        hosts.append(host)
        host.gpusim("create", *create_args)
        return host

    yield factory
    failures = []
    for host in hosts:
        proc = host.gpusim("cleanup", check=False)
        if proc.returncode != 0:
            failures.append("%s: %s %s" % (host.name, proc.stdout, proc.stderr))
    assert not failures, "simulator cleanup failed: %s" % failures


@pytest.fixture
def inventory(tmp_path: Path) -> t.Callable[..., Path]:
    def factory(*hosts: SimHost, **group_vars: t.Any) -> Path:
        return write_inventory(tmp_path / "inventory.json", hosts, **group_vars)
    return factory


class Canaries:
    """Processes a reclaim must never touch: an unrelated sleeper, and one named like vLLM that holds no GPU."""

    def __init__(self, tmp_path: Path) -> None:
        lookalike = tmp_path / "vllm-serve-canary"
        lookalike.symlink_to(sys.executable)
        script = "import time; time.sleep(600)"
        self.procs = [
            subprocess.Popen([sys.executable, "-c", script, "unrelated-canary"]),
            subprocess.Popen([str(lookalike), "-c", script, "vllm", "serve", "canary-model"]),
        ]

    def alive(self) -> bool:
        return all(proc.poll() is None for proc in self.procs)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def canaries(tmp_path: Path) -> t.Iterator[Canaries]:
    birds = Canaries(tmp_path)
    yield birds
    birds.stop()


def pid_alive(pid: int) -> bool:
    """True while the PID runs (a zombie counts as gone)."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
