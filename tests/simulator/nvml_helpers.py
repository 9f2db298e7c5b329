# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers for the fake NVML tests: build, a state-directory writer, holder
processes, and a pynvml session that runs in a subprocess with the fake
library first on LD_LIBRARY_PATH (dlopen reads it at process start)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from child_processes import started_children  # tests/support/, on sys.path through pytest.ini's pythonpath
from gpusim import api  # simulator/ is on sys.path through pytest.ini's pythonpath

ROOT = Path(__file__).resolve().parents[2]
NVML_SRC = ROOT / "simulator" / "nvml"
LIB_DIR = ROOT / "simulator" / "build" / "lib"
SMI = ROOT / "simulator" / "build" / "bin" / "nvidia-smi"
PYNVML_PY = Path(__import__("pynvml").__file__)

DEFAULT_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
MIB = 1024 * 1024


def build() -> None:
    """Runs the Makefile (incremental, so a stale build is rebuilt too)."""
    subprocess.run(["make", "-s", "-C", str(NVML_SRC)], check=True, capture_output=True)


def sim_env(state: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{LIB_DIR}:{env['LD_LIBRARY_PATH']}" if env.get("LD_LIBRARY_PATH") else str(LIB_DIR)
    env.pop("GPUOPS_SIM_STATE", None)
    if state is not None:
        env["GPUOPS_SIM_STATE"] = str(state)
    return env


def proc_starttime(pid: int) -> int:
    start = api.starttime(pid)
    assert start is not None, f"PID {pid} is gone"
    return start


def proc_state(pid: int) -> str:
    state = api.proc_state(pid)
    assert state is not None, f"PID {pid} is gone"
    return state


def unused_pid() -> int:
    """A PID that no process in this namespace has (a 'foreign' PID)."""
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) - 1
    while Path(f"/proc/{pid}").exists():
        pid -= 1
    return pid


def gpu_uuid(index: int) -> str:
    return f"GPU-{index:08x}-aaaa-bbbb-cccc-{index:012x}"


def gpu_bus_id(index: int) -> str:
    return f"00000000:{0x18 + index:02X}:00.0"


class SimState:
    """Writes a state directory as docs/simulator.md specifies (atomically)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "allocs").mkdir(parents=True, exist_ok=True)

    def write(self, name: str, text: str) -> None:
        path = self.root / name
        tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
        tmp.write_text(text)
        tmp.rename(path)

    def host(self, **keys: str) -> None:
        self.write("host", "# host\n" + "".join(f"{k}={v}\n" for k, v in keys.items()))

    def gpus(self, count: int = 8, lost: tuple[int, ...] = (), orphan: dict[int, int] | None = None,
             reserved_mib: int = 512, total_mib: int = 97887) -> None:
        orphan = orphan or {}
        lines = [
            "\t".join([str(i), gpu_uuid(i), gpu_bus_id(i), str(total_mib), str(reserved_mib),
                       str(orphan.get(i, 0)), "1" if i in lost else "0", DEFAULT_NAME])
            for i in range(count)
        ]
        self.write("gpus", "# index uuid pci total reserved orphan lost name\n\n" + "\n".join(lines) + "\n")

    def conf(self, gpu: int, **keys: int) -> None:
        self.write(f"gpu{gpu}.conf", "".join(f"{k}={v}\n" for k, v in keys.items()))

    def alloc(self, pid: int, gpu: int, used_mib: int, kind: str = "C", flags: str = "-",
              starttime: int | None = None, pidns: int = 0) -> None:
        """A record; with pidns, one a process of that PID namespace made (pid: its PID there)."""
        if starttime is None:
            starttime = 0 if "foreign" in flags else proc_starttime(pid)
        if pidns:
            self.write(f"allocs/{pid}@{pidns}-{gpu}", f"{pid} {starttime} {gpu} {used_mib} {kind} {flags} {pidns}\n")
        else:
            self.write(f"allocs/{pid}-{gpu}", f"{pid} {starttime} {gpu} {used_mib} {kind} {flags}\n")


DRIVER = r'''
import ctypes, json, sys
import pynvml

class ProcessInfoV1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]

def plain(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, ctypes.Structure):
        return {name: plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, pynvml.nvmlFriendlyObject):
        return {k: plain(v) for k, v in vars(value).items()}
    return value

def h(index):
    return pynvml.nvmlDeviceGetHandleByIndex(index)

def raw(symbol, *args):
    return getattr(pynvml.nvmlLib, symbol)(*args)

def raw_procs(symbol, index, capacity, null_buffer=False, struct=pynvml.c_nvmlProcessInfo_v3_t):
    count = ctypes.c_uint(capacity)
    buf = (struct * max(capacity, 1))()
    rc = raw(symbol, h(index), ctypes.byref(count), None if null_buffer else buf)
    rows = [[buf[i].pid, buf[i].usedGpuMemory] for i in range(count.value)] if rc == 0 else []
    return [rc, count.value, rows]

def memory_v2_raw(index, version):
    mem = pynvml.c_nvmlMemory_v2_t()
    mem.version = version
    return raw("nvmlDeviceGetMemoryInfo_v2", h(index), ctypes.byref(mem))

names = dict(vars(pynvml))
names.update(ctypes=ctypes, h=h, raw=raw, raw_procs=raw_procs, memory_v2_raw=memory_v2_raw,
             ProcessInfoV1=ProcessInfoV1)
for line in sys.stdin:
    names["nvmlLib"] = pynvml.nvmlLib  # loaded by the first nvmlInit
    try:
        out = {"ok": plain(eval(json.loads(line), names))}
    except pynvml.NVMLError as err:
        out = {"error": type(err).__name__, "code": err.value}
    print(json.dumps(out), flush=True)
'''


class NvmlError(Exception):
    """An NVMLError raised in the pynvml subprocess."""

    def __init__(self, name: str, code: int) -> None:
        super().__init__(f"{name} ({code})")
        self.name = name
        self.code = code


class PynvmlSession:
    """A long-lived python process running the real pynvml on the fake library."""

    def __init__(self, state: Path | None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", DRIVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=sim_env(state))

    def __call__(self, expr: str) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(expr) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"pynvml session died evaluating {expr!r}")
        out = json.loads(line)
        if "error" in out:
            raise NvmlError(out["error"], out["code"])
        return out["ok"]

    def error(self, expr: str) -> str:
        """The NVMLError class name that evaluating expr raises."""
        with pytest.raises(NvmlError) as info:
            self(expr)
        return info.value.name

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="session", autouse=True)
def built() -> None:
    build()


@pytest.fixture
def sim(tmp_path: Path) -> SimState:
    state = SimState(tmp_path / "state")
    state.host()
    state.gpus()
    return state


@pytest.fixture
def session_factory() -> Iterator[Callable[..., PynvmlSession]]:
    sessions: list[PynvmlSession] = []

    def start(state: Path | None, init: bool = True) -> PynvmlSession:
        session = PynvmlSession(state)
        sessions.append(session)
        if init:
            session("nvmlInit()")
        return session

    yield start
    for session in sessions:
        session.close()


@pytest.fixture
def nvml(sim: SimState, session_factory: Callable[..., PynvmlSession]) -> PynvmlSession:
    return session_factory(sim.root)


@pytest.fixture
def holders() -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """Starts `sleep` children; kills and reaps each by its own PID at the end."""
    with started_children() as start:
        yield lambda: start("sleep", "600")


def kill_unreaped(child: subprocess.Popen[bytes]) -> None:
    """SIGKILLs our own child and waits until it is a zombie (not reaped)."""
    os.kill(child.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while proc_state(child.pid) != "Z":
        assert time.monotonic() < deadline, "child did not become a zombie"
        time.sleep(0.01)


def smi(state: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SMI), *args], capture_output=True, text=True, env=sim_env(state),
                          timeout=30, check=False)
