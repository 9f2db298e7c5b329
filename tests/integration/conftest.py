# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures: simulated GPU hosts that are always cleaned up (by recorded PID), and their inventory."""

from __future__ import annotations

import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

from containers import Containers, imported_image, podman_missing, Runtime, RUN_ARGS, unique_tag
from gpusim.api import pid_alive, starttime
from inventories import write_inventory
from simhost import hosts_with_ports, SIM_LIB, SimHost


# Under pytest-xdist (`make integration`: --dist loadgroup) every test is scheduled on its own, except the files
# named here, whose tests share a module-scoped fixture and run whole on one worker, in order.
KEEP_TOGETHER = {"test_vllm_benchmark.py", "test_vllm_benchmark_server_view.py", "test_vllm_benchmark_workloads.py",
                 "test_gpu_reclaim_containers.py", "test_self_healing.py"}
# The longest tests are handed out first, so none of them starts last and makes the whole run wait for it alone
# (each worker is handed up to two tests ahead). An entry is a file, or a file and the start of a test's name; a test
# takes the rank of the first entry it matches.
LONGEST_FIRST = ("test_benchmark_matrix.py::test_matrix_on_two_hosts", "test_rollout.py::test_jitter", "test_rollout.py::test_ll_rolls",
                 "test_rollout.py::test_ll128", "test_rollout.py::test_killed", "test_benchmark_matrix.py", "test_rollout.py",
                 "test_role_interrupts.py", "test_vllm_server_role.py", "test_role_faults.py", "test_role_secrets.py")


def pytest_collection_modifyitems(items: t.List[pytest.Item]) -> None:
    for item in items:
        if item.path.name in KEEP_TOGETHER:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))

    def rank(item: pytest.Item) -> int:
        name = "%s::%s" % (item.path.name, item.name)
        return next((i for i, entry in enumerate(LONGEST_FIRST) if name == entry or name.startswith(entry if "::" in entry else entry + "::")),
                    len(LONGEST_FIRST))
    items.sort(key=rank)  # stable: a file's tests keep their order


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


@pytest.fixture(scope="module")
def podman_image() -> t.Iterator[t.Tuple[Runtime, str]]:
    """Root's podman and the test image (tests/support/containers.py), imported for this module under a tag of its own
    and that tag removed at the end. Skips, saying why, only where podman cannot run here (not installed, not root)."""
    reason = podman_missing()
    if reason:
        pytest.skip(reason)
    runtime = Runtime(["podman"], RUN_ARGS)
    with imported_image(runtime, unique_tag()) as image:
        yield runtime, image


@pytest.fixture
def podman_containers(podman_image: t.Tuple[Runtime, str]) -> t.Iterator[Containers]:
    """The podman containers of one test, each removed by its id at its end, whatever happened."""
    runtime, image = podman_image
    with Containers(runtime, image) as made:
        yield made


@pytest.fixture
def fleet(make_host: t.Callable[..., SimHost]) -> t.Callable[..., t.List[SimHost]]:
    """fleet(*names) -> simulated hosts, each with its own loopback port for its server (host.port)."""
    return lambda *names: hosts_with_ports(make_host, *names)


@pytest.fixture
def inventory(tmp_path: Path) -> t.Callable[..., Path]:
    def factory(*hosts: SimHost, **group_vars: t.Any) -> Path:
        return write_inventory(tmp_path / "inventory.json", hosts, **group_vars)
    return factory


class Canaries:
    """Processes a reclaim must never touch, checked alive (same PID, same start time) after every scenario.

    Two children of pytest (an unrelated sleeper, and one named like `vllm serve` that holds no GPU), and,
    planted by each test, the ones a plausible regression would hit: the wrapper above a vLLM server that
    names it in its arguments, a sibling of the server under that wrapper, the simulator's own reaper
    (subreaper) above the tree, and a process holding an unselected GPU.
    """

    def __init__(self, tmp_path: Path) -> None:
        lookalike = tmp_path / "vllm-serve-canary"
        lookalike.symlink_to(sys.executable)
        script = "import time; time.sleep(600)"
        self.procs = [
            subprocess.Popen([sys.executable, "-c", script, "unrelated-canary"]),
            subprocess.Popen([str(lookalike), "-c", script, "vllm", "serve", "canary-model"]),
        ]
        self.watched: t.Dict[int, t.Tuple[t.Optional[int], str]] = {}

    def watch(self, label: str, pid: t.Optional[int]) -> None:
        """Add a process (by PID, its start time taken now) that must still run when alive() is asked."""
        assert pid is not None and pid_alive(pid), "canary %s (%s) is not running to begin with" % (label, pid)
        self.watched[pid] = (starttime(pid), label)

    def guard_tree(self, tree: t.Mapping[str, t.Any]) -> None:
        """The companions of a `gpusim vllm` tree started with a wrapper and a sibling, and its reaper."""
        for key in ("wrapper", "sibling", "reaper"):
            self.watch("the tree's %s" % key, tree[key])

    def hold(self, host: t.Any, gpu: int, mib: int = 2048) -> int:
        """A training job on a GPU the scenario does not select."""
        pid = host.spawn_tree({"key": "bystander", "title": "python3 train.py --canary", "hold": [{"gpu": gpu, "mib": mib}]})["bystander"]
        self.watch("a holder of unselected GPU %d" % gpu, pid)
        return pid

    def dead(self) -> t.List[str]:
        gone = ["pytest child %d" % proc.pid for proc in self.procs if proc.poll() is not None]
        gone += ["%s (pid %d)" % (label, pid) for pid, (start, label) in self.watched.items() if not pid_alive(pid, start)]
        return gone

    def alive(self) -> bool:
        return not self.dead()

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


__all__ = ["Canaries"]
