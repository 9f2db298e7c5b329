# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures: simulated GPU hosts that are always cleaned up (by recorded PID), and their inventory."""

from __future__ import annotations

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
