# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers for the gpusim tests: a simulated host driven by its command line, /proc readers, an NVML probe."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[2]
SIMULATOR = REPO / "simulator"
if str(SIMULATOR) not in sys.path:
    sys.path.insert(0, str(SIMULATOR))

# pylint: disable=wrong-import-position  # gpusim is found through the path added above
from gpusim import api  # noqa: E402
from gpusim.api import pid_alive as is_running  # noqa: E402,F401  # pylint: disable=unused-import  # re-exported
from gpusim.api import free_port  # noqa: E402,F401  # pylint: disable=unused-import  # re-exported

LIB_DIR = api.SIM_LIB_DIR
GRACE_S = 0.5  # vLLM's 5 s shutdown grace, shortened so the suite stays fast

# Runs in a subprocess with the fake library first on LD_LIBRARY_PATH: the REAL nvidia-ml-py.
NVML_PROBE = r"""
import json
import pynvml as nvml

def mib(value):
    return None if value is None else value // (1024 * 1024)

try:
    nvml.nvmlInit()
except nvml.NVMLError as error:
    print(json.dumps({"init_error": error.value}))
    raise SystemExit(0)
gpus = []
for index in range(nvml.nvmlDeviceGetCount()):
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    try:
        v2 = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
        v1 = nvml.nvmlDeviceGetMemoryInfo(handle)
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        gpus.append({
            "index": index, "uuid": nvml.nvmlDeviceGetUUID(handle), "name": nvml.nvmlDeviceGetName(handle),
            "total_mib": mib(v2.total), "used_mib": mib(v2.used), "reserved_mib": mib(v2.reserved),
            "v1_used_mib": mib(v1.used),
            "processes": [{"pid": p.pid, "used_mib": mib(p.usedGpuMemory)} for p in procs],
        })
    except nvml.NVMLError as error:
        gpus.append({"index": index, "error": error.value})
nvml.nvmlShutdown()
print(json.dumps({"gpus": gpus}))
"""


def read_proc(pid: int, name: str) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as handle:
            return handle.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None


def cmdline(pid: int) -> List[str]:
    raw = read_proc(pid, "cmdline") or ""
    return [word for word in raw.split("\0") if word]


def proc_state(pid: int) -> Optional[str]:
    return api.proc_state(pid)


def ppid(pid: int) -> int:
    parent = api.parent_pid(pid)
    assert parent is not None, f"PID {pid} is gone"
    return parent


def wait_for(condition: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class SimHost(api.Host):
    """One simulated host in a test's tmp_path: gpusim's API (gpusim.api.Host) and its real command line."""

    def __init__(self, state: Path) -> None:
        super().__init__(state, {"GPUOPS_SIM_SHUTDOWN_GRACE_S": str(GRACE_S)})
        self.env = dict(os.environ)
        self.env.update({
            "PYTHONPATH": str(SIMULATOR),
            "GPUOPS_SIM_STATE": str(state),
            "GPUOPS_SIM_SHUTDOWN_GRACE_S": str(GRACE_S),
            "LD_LIBRARY_PATH": str(LIB_DIR),
        })

    def gpusim(self, *args: str, check: bool = True) -> "subprocess.CompletedProcess[str]":
        result = subprocess.run([sys.executable, "-m", "gpusim", *args], env=self.env, text=True,
                                capture_output=True, timeout=60, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"gpusim {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def gpusim_json(self, *args: str) -> Any:
        return json.loads(self.gpusim(*args).stdout)

    def nvml(self) -> Dict[str, Any]:
        result = subprocess.run([sys.executable, "-c", NVML_PROBE], env=self.env, text=True,
                                capture_output=True, timeout=30, check=True)
        probe: Dict[str, Any] = json.loads(result.stdout)
        return probe

    def nvml_gpus(self) -> List[Dict[str, Any]]:
        gpus: List[Dict[str, Any]] = self.nvml()["gpus"]
        return gpus

    def records(self) -> List[Tuple[int, int, str]]:  # type: ignore[override]
        """(pid, start time, role) of every process this host's simulator recorded."""
        return [(record.pid, record.starttime, record.role) for record in super().records()]

    def kill(self, pid: int, sig: int = signal.SIGKILL) -> None:
        """Signal a process this test's simulator started (refuses any other PID, and a reused one)."""
        try:
            super().kill(pid, sig)
        except api.StateError as error:
            raise AssertionError(str(error)) from None


# -- the fake vLLM server, launched as a role would launch vLLM: `vllm serve MODEL ...` -----------------------

FAKE_VLLM = SIMULATOR / "fakevllm" / "bin" / "vllm"


@dataclass
class StreamResult:
    """One SSE response read by http.client: its events (JSON objects, or the string "[DONE]") and arrival times."""

    status: int
    headers: Dict[str, str]
    events: List[Any] = field(default_factory=list)
    times: List[float] = field(default_factory=list)
    cut: Optional[str] = None  # why the body ended early ("closed", "TimeoutError", ...), None when complete
    started: float = 0.0
    body: bytes = b""

    @property
    def done(self) -> bool:
        return bool(self.events) and self.events[-1] == "[DONE]"

    def chunks(self) -> List[Dict[str, Any]]:
        """Events that carry a choice (content chunks, and the chat role chunk)."""
        return [event for event in self.events if isinstance(event, dict) and event.get("choices")]

    def texts(self) -> List[str]:
        found = []
        for event in self.chunks():
            choice = event["choices"][0]
            text = choice["delta"].get("content") if "delta" in choice else choice["text"]
            if text:
                found.append(text)
        return found

    def usage(self) -> Optional[Dict[str, int]]:
        finals = [event for event in self.events if isinstance(event, dict) and event.get("usage")]
        return finals[-1]["usage"] if finals else None


class FakeServer:
    """A fake vLLM API server started by this test (our child: stopped and reaped by its own Popen handle)."""

    def __init__(self, host: SimHost, log: Path, gpus: str = "0", model: str = "org/model",
                 env: Optional[Dict[str, str]] = None, args: Tuple[str, ...] = (), engine_core: bool = False,
                 port: Optional[int] = None) -> None:
        self.port = port or free_port()
        self.log = log
        self.model = model
        kept = ("GPUOPS_SIM_STATE", "GPUOPS_SIM_SHUTDOWN_GRACE_S")  # no knob leaks in from the caller's shell
        self.env = {key: value for key, value in host.env.items()
                    if key != "NCCL_PROTO" and (key in kept or not key.startswith("GPUOPS_SIM_"))}
        self.env.update(CUDA_VISIBLE_DEVICES=gpus, GPUOPS_SIM_WORKER_MIB="4096",
                        GPUOPS_SIM_ENGINE_CORE="1" if engine_core else "0", **(env or {}))
        self.argv = [sys.executable, str(FAKE_VLLM), "serve", model,
                     "--tensor-parallel-size", str(len(gpus.split(","))), "--port", str(self.port), *args]
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        self.launched = 0.0

    def start(self) -> "FakeServer":
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(  # pylint: disable=consider-using-with  # ended by stop()
                self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        self.launched = time.monotonic()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> Optional[int]:
        """Signal the server (never anything else) and reap it; SIGKILL if it outlives `timeout`."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def connection(self, timeout: float = 30.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method: str, path: str, body: Any = None, timeout: float = 30.0,
                raw: Optional[bytes] = None) -> Tuple[int, bytes]:
        conn = self.connection(timeout)
        try:
            data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
            conn.request(method, path, data, {"Content-Type": "application/json"} if data is not None else {})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def get_json(self, path: str) -> Any:
        status, data = self.request("GET", path)
        assert status == 200, f"GET {path}: {status} {data!r}"
        return json.loads(data)

    def health(self) -> int:
        """/health's status, 0 while nothing listens."""
        try:
            return self.request("GET", "/health", timeout=5)[0]
        except OSError:
            return 0

    def wait_ready(self, timeout: float = 60.0) -> None:
        assert wait_for(lambda: self.health() == 200 or (self.proc is not None and self.proc.poll() is not None),
                        timeout), f"not ready after {timeout} s:\n{self.log_text()}"
        assert self.health() == 200, f"server exited:\n{self.log_text()}"

    def metrics(self) -> Dict[str, float]:
        """`name{labels}` -> value for every sample line of /metrics."""
        status, data = self.request("GET", "/metrics")
        assert status == 200
        samples = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                samples[name] = float(value)
        return samples

    def stream(self, path: str, body: Dict[str, Any], timeout: float = 30.0,
               conn: Optional[http.client.HTTPConnection] = None) -> StreamResult:
        """POST with stream: true and read the SSE events as they come (http.client, chunked transfer)."""
        own = conn is None
        conn = conn or self.connection(timeout)
        try:
            started = time.monotonic()
            conn.request("POST", path, json.dumps(dict(body, stream=True)), {"Content-Type": "application/json"})
            response = conn.getresponse()
            result = StreamResult(response.status, dict(response.getheaders()), started=started)
            if response.status != 200:
                result.body = response.read()
                return result
            try:
                for line in response:
                    if line.startswith(b"data: "):
                        payload = line[6:].strip()
                        result.events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
                        result.times.append(time.monotonic())
            except (http.client.IncompleteRead, socket.timeout, ConnectionError) as error:
                result.cut = type(error).__name__
            if result.cut is None and "[DONE]" not in result.events:
                result.cut = "closed"  # line iteration hides an unfinished chunked body: no [DONE] is the sign
            return result
        finally:
            if own:
                conn.close()


class FakeServers:
    """Every FakeServer a test starts; close() stops them all, whatever happened."""

    def __init__(self, host: SimHost, logs: Path) -> None:
        self.host = host
        self.logs = logs
        self.started: List[FakeServer] = []

    def start(self, **kwargs: Any) -> FakeServer:
        server = FakeServer(self.host, self.logs / f"server-{len(self.started)}.log", **kwargs)
        self.started.append(server)
        return server.start()

    def close(self) -> None:
        for server in self.started:
            server.stop(signal.SIGTERM, timeout=15.0)  # the host's own cleanup then ends anything left by record
