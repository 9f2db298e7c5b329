# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A process in a PID namespace of its own (a container: `unshare --pid --fork --mount-proc`) records its allocation
with the PID it has there; the REAL nvidia-ml-py on the fake library, nvidia-smi and gpusim's own readings name it by
its host PID, as the real driver does, and never by its PID in the container."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List

import pytest
from child_processes import started_children  # tests/support/, on sys.path through pytest.ini's pythonpath
from gpusim import api
from gpusim_helpers import FakeServers, SimHost
from nvml_helpers import MIB, PynvmlSession, SimState, smi

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None,
                                reason="unshare --pid --mount-proc and nsenter need root and util-linux")

# run as PID 1 of its namespace: holds memory on a GPU of $GPUOPS_SIM_STATE (device files open) until killed
HOLDER = """
import sys, time
from gpusim.api import hold_memory
hold_memory(int(sys.argv[1]), int(sys.argv[2]))
print("held", flush=True)
time.sleep(600)
"""
# the REAL nvidia-ml-py: each GPU's compute processes (pid, MiB)
PROBE = """
import json, pynvml as nvml
nvml.nvmlInit()
print(json.dumps([[[p.pid, p.usedGpuMemory // 2**20] for p in nvml.nvmlDeviceGetComputeRunningProcesses(
    nvml.nvmlDeviceGetHandleByIndex(i))] for i in range(nvml.nvmlDeviceGetCount())]))
"""


@dataclass
class Holder:
    """HOLDER as PID 1 of a PID namespace of its own, below unshare (this test's child)."""

    unshare: "subprocess.Popen[bytes]"
    pid: int  # its host PID
    start: int

    def kill(self) -> None:
        """SIGKILL it by its host PID (start time checked), which ends its namespace; unshare exits and is reaped."""
        if api.pid_exists(self.pid, self.start):
            os.kill(self.pid, signal.SIGKILL)
        self.unshare.wait(10)


Containers = Callable[[int, int], Holder]


@pytest.fixture
def containers(simhost: SimHost, tmp_path: Path) -> Iterator[Containers]:
    """containers(gpu, mib): a Holder on the test's host, once it holds. Each unshare is ended and reaped by its Popen
    handle at the end (tests/support's started_children): its --kill-child SIGKILLs the holder, ending the namespace."""
    env = dict(api.simulator_environ(), **simhost.environment())
    with started_children() as start, contextlib.ExitStack() as pipes:

        def run(gpu: int, mib: int) -> Holder:
            log = tmp_path / f"container-{gpu}.log"
            with open(log, "ab") as err:
                unshare = start(*api.in_pid_namespace([sys.executable, "-c", HOLDER, str(gpu), str(mib)]), env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
            pipes.callback(unshare.stdout.close)
            ready = select.select([unshare.stdout], [], [], 30)[0]
            assert ready and unshare.stdout.readline() == b"held\n", log.read_text()
            (pid,) = api.children(unshare.pid)  # the holder, PID 1 of its namespace
            return Holder(unshare, pid, api.starttime(pid) or 0)

        yield run


@pytest.fixture
def nvml(simhost: SimHost) -> Iterator[PynvmlSession]:
    """The REAL nvidia-ml-py on the fake library, in this (the host's) PID namespace."""
    session = PynvmlSession(simhost.state)
    session("nvmlInit()")
    yield session
    session.close()


def compute(nvml: PynvmlSession, gpu: int) -> List[List[int]]:
    return [[p["pid"], p["usedGpuMemory"] // MIB] for p in nvml(f"nvmlDeviceGetComputeRunningProcesses(h({gpu}))")]


def records(host: SimHost) -> List[str]:
    return sorted(path.name for path in (host.state / "allocs").iterdir())


def test_own_allocation_in_a_pid_namespace_is_listed_under_its_host_pid(simhost: SimHost, nvml: PynvmlSession,
                                                                        containers: Containers) -> None:
    holder = containers(1, 3000)
    namespace = api.pid_namespace(holder.pid)
    assert api.namespace_pids(holder.pid) == [holder.pid, 1] and namespace not in (None, api.pid_namespace())
    assert records(simhost) == [f"1@{namespace}-1"]  # it recorded its PID there, 1, and its namespace
    assert compute(nvml, 1) == [[holder.pid, 3000]] and compute(nvml, 0) == []
    for symbol in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2"):
        struct = "ProcessInfoV1" if symbol.endswith("Processes") else "c_nvmlProcessInfo_v2_t"
        assert nvml(f"raw_procs('{symbol}', 1, 4, struct={struct})") == [0, 1, [[holder.pid, 3000 * MIB]]]
    assert nvml("nvmlDeviceGetMemoryInfo(h(1)).used") // MIB == 512 + 3000
    assert nvml(f"nvmlSystemGetProcessName({holder.pid})") == sys.executable
    listed = smi(simhost.state, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    assert listed.stdout.split("\n") == [f"{holder.pid}, 3000", ""], listed
    # gpusim's own readings name the host PID too, and its device files are open in the host's /proc/PID/fd
    assert simhost.holders(1) == [holder.pid] and simhost.used_mib()[:2] == [0, 3000]
    opened = sorted(str(simhost.state / "dev" / name) for name in ("nvidia-uvm", "nvidia1", "nvidiactl"))
    assert simhost.device_holders() == {holder.pid: opened}
    holder.kill()
    # released when the process ends; its record stays until gc, and reads as no holder
    assert records(simhost) == [f"1@{namespace}-1"]
    assert compute(nvml, 1) == [] and nvml("nvmlDeviceGetMemoryInfo(h(1)).used") // MIB == 512
    assert simhost.holders() == [] and simhost.used_mib()[1] == 0
    simhost.gpusim("gc")
    assert records(simhost) == []


def test_a_record_of_a_namespace_names_only_that_process(simhost: SimHost, nvml: PynvmlSession,
                                                         containers: Containers) -> None:
    """The start time and the namespace both count: a reused PID in the namespace, a PID it does not have, and a
    namespace that does not exist (whose PID is this test's own host PID) are no holder."""
    holder = containers(0, 1000)
    namespace = api.pid_namespace(holder.pid)
    assert namespace is not None
    state = SimState(simhost.state)
    state.alloc(1, 1, 2000, starttime=holder.start + 1, pidns=namespace)  # PID 1 there, another start time
    state.alloc(99, 2, 2000, starttime=holder.start, pidns=namespace)  # no PID 99 there
    state.alloc(os.getpid(), 3, 2000, starttime=api.starttime(os.getpid()), pidns=1)  # no such namespace
    assert [compute(nvml, gpu) for gpu in range(4)] == [[[holder.pid, 1000]], [], [], []]
    assert [nvml(f"nvmlDeviceGetMemoryInfo(h({gpu})).used") // MIB for gpu in range(4)] == [1512, 512, 512, 512]
    assert simhost.holders() == [holder.pid] and simhost.used_mib()[:4] == [1000, 0, 0, 0]


def test_a_reader_inside_the_namespace_sees_the_pid_it_has_there(simhost: SimHost, containers: Containers) -> None:
    """NVML reports the PIDs of the /proc it reads (GPUOPS_SIM_PROC_ROOT, else /proc): inside the container, its own."""
    holder = containers(2, 500)
    env = dict(api.simulator_environ(), **simhost.environment())
    inside = subprocess.run(["nsenter", "--target", str(holder.pid), "--pid", "--mount", "--", sys.executable, "-c",
                             PROBE], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.strip() == "[[], [], [[1, 500]], [], [], [], [], []]"


def test_fake_vllm_in_a_pid_namespace_is_seen_with_the_host_pid_of_every_worker(
        simhost: SimHost, nvml: PynvmlSession, servers: FakeServers) -> None:
    server = servers.start(gpus="0,1", pid_namespace=True)
    server.wait_ready()  # the server, PID 1 there, found its workers' allocations by the PIDs they have there
    assert api.namespace_pids(server.pid) == [server.pid, 1]
    workers = api.children(server.pid)
    inner: Dict[int, int] = {pid: api.namespace_pids(pid)[-1] for pid in workers}
    assert len(workers) == 2 and all(api.namespace_pids(pid) == [pid, inner[pid]] for pid in workers), inner
    listed = [compute(nvml, gpu) for gpu in range(3)]
    assert sorted(pid for gpu in listed for pid, _mib in gpu) == workers, (listed, inner)
    assert [[mib for _pid, mib in gpu] for gpu in listed] == [[4096], [4096], []]
    assert not {pid for gpu in listed for pid, _mib in gpu} & {1, *inner.values()}
    assert simhost.holders() == workers and simhost.used_mib()[:3] == [4096, 4096, 0]
    assert set(simhost.device_holders()) == set(workers)
    assert server.stop() == 0
    assert [compute(nvml, gpu) for gpu in range(2)] == [[], []] and simhost.holders() == []
