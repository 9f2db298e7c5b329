# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures: SSH fleets (gpusim.fleet) that are always torn down by their record, even when a test fails."""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
import typing as t
from pathlib import Path

import pytest

from fleetlib import REPO, SIM_BIN, Fleet, lifecycle
from gpusim.fleet.system import netns_exists, link_exists, alive

PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture(scope="session", autouse=True)
def fleet_prerequisites() -> t.Iterator[None]:
    """Root, the tools a fleet needs (the Makefile installs them with apt-get), the fake NVML built.

    This process becomes a child subreaper, so the ControlPersist masters ssh leaves behind (and the namespaces'
    outer unshare processes) are its children and are reaped here, even where PID 1 reaps nothing.
    """
    missing = [tool for tool in ("/usr/sbin/sshd", "ip", "unshare", "nsenter", "ssh", "ssh-keygen", "sudo")
               if not (os.path.exists(tool) or shutil.which(tool))]
    if os.geteuid() != 0:
        pytest.fail("the SSH fleet tests need root (network and PID namespaces)")
    if missing:
        pytest.fail("missing %s: run `make fleet-tests` (it installs openssh-server, sudo, iproute2)" % missing)
    if not (REPO / "simulator" / "build" / "lib" / "libnvidia-ml.so.1").exists() or not (SIM_BIN / "nvidia-smi").exists():
        pytest.fail("the fake NVML is not built: run `make sim`")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), 0, 0, 0)
    yield
    reap_orphans()


def reap_orphans() -> None:
    """Reap the zombies that were reparented to this process (it started none of them through subprocess)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, encoding="utf-8") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            try:
                os.waitpid(int(entry), os.WNOHANG)
            except ChildProcessError:
                pass


@pytest.fixture
def fleet_base() -> t.Iterator[Path]:
    """A folder of this test's own for its fleets, that the nodes' unprivileged login may pass through.

    Not tmp_path: pytest makes each folder above it 0700, so a node could cover them only with a skeleton
    (nodefiles.reach_binds) that hides everything else the test puts there. Removed when its fleets are gone.
    """
    base = Path(tempfile.mkdtemp(prefix="gpuops-fleet-"))
    base.chmod(0o755)
    yield base
    if not any((folder / "fleet.json").exists() for folder in base.iterdir()):
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def make_fleet(fleet_base: Path) -> t.Iterator[t.Callable[..., Fleet]]:
    """make_fleet(nodes, gpus=4) -> a started Fleet in <fleet_base>/fleet; torn down (and checked) at the end."""
    started: t.List[Fleet] = []

    def factory(nodes: int, gpus: int = 4, folder: str = "fleet") -> Fleet:
        fleet = Fleet(lifecycle.up(fleet_base / folder, nodes, gpus))
        started.append(fleet)
        return fleet

    yield factory
    problems = []
    for fleet in started:
        if (fleet.rec.path / "fleet.json").exists():
            try:
                lifecycle.down(fleet.rec)
            except lifecycle.FleetError as error:
                problems.append(str(error))
        for node in fleet.rec.nodes:
            if netns_exists(node.netns) or link_exists(node.veth):
                problems.append("%s: %s / %s left" % (node.name, node.netns, node.veth))
        if fleet.rec.fabric_netns and netns_exists(fleet.rec.fabric_netns):
            problems.append("the network between the nodes: %s left" % fleet.rec.fabric_netns)
            problems += ["%s: PID %d (%s) alive" % (node.name, p.pid, p.what) for p in node.procs if alive(p.pid, p.starttime)]
    reap_orphans()
    assert not problems, "fleet teardown: %s" % problems
