# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures for the simulator's own tests: a simulated host per test, always cleaned up by record."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from gpusim_helpers import LIB_DIR, SIMULATOR, FakeServers, SimHost, sim_host


@pytest.fixture(scope="session")
def nvml_lib() -> Path:
    """The fake libnvidia-ml.so.1, (re)built by its Makefile when missing or stale."""
    subprocess.run(["make", "-s", "-C", str(SIMULATOR / "nvml")], check=True, capture_output=True)
    return LIB_DIR


@pytest.fixture
def simhost(tmp_path: Path, nvml_lib: Path) -> Iterator[SimHost]:  # pylint: disable=unused-argument
    host = sim_host(tmp_path / "host")
    host.gpusim("create")
    try:
        yield host
    finally:
        result = host.gpusim("cleanup", check=False)
        assert result.returncode == 0, f"cleanup left processes running:\n{result.stdout}\n{result.stderr}"


@pytest.fixture
def servers(simhost: SimHost, tmp_path: Path) -> Iterator[FakeServers]:
    """The fake vLLM servers a test starts on its simulated host (servers.start(...)), all stopped at the end."""
    started = FakeServers(simhost, tmp_path)
    try:
        yield started
    finally:
        started.close()
