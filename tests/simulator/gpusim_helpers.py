# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers for the gpusim tests: simulated hosts (tests/support's SimHost) with a short shutdown grace, /proc readers,
the fake vLLM server read as a streaming client reads it."""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from gpusim import api  # simulator/ is on sys.path through pytest.ini's pythonpath
from gpusim.api import pid_alive as is_running  # noqa: F401  # pylint: disable=unused-import  # re-exported
from gpusim.api import FAKE_VLLM, SIMULATOR_DIR as SIMULATOR, free_port  # noqa: F401  # pylint: disable=unused-import  # re-exported
from simhost import SimHost  # tests/support/ is on sys.path through pytest.ini's pythonpath

REPO = SIMULATOR.parent

LIB_DIR = api.SIM_LIB_DIR
GRACE_S = 0.5  # vLLM's 5 s shutdown grace, shortened so the suite stays fast


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
    """gpusim.api.wait_for with the simulator tests' shorter default."""
    return api.wait_for(condition, timeout)


def sim_host(state: Path) -> SimHost:
    """A simulated host in a test's tmp_path (named after its directory) whose trees shut down within GRACE_S."""
    return SimHost(state.name, state, {"GPUOPS_SIM_SHUTDOWN_GRACE_S": str(GRACE_S)})


# -- the fake vLLM server, launched as a role would launch vLLM: `vllm serve MODEL ...` -----------------------


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


class FakeServer(api.FakeVllm):
    """A fake vLLM API server started by this test (gpusim.api.FakeVllm: our child, stopped and reaped by its own
    Popen handle), read with http.client as a streaming client reads it."""

    def __init__(self, host: SimHost, log: Path, gpus: str = "0", model: str = "org/model",
                 env: Optional[Dict[str, str]] = None, args: Tuple[str, ...] = (), engine_core: bool = False,
                 port: Optional[int] = None, pid_namespace: bool = False) -> None:
        super().__init__(host, log, gpus=gpus, model=model, env=env, args=args, engine_core=engine_core, port=port,
                         pid_namespace=pid_namespace)

    def wait_ready(self, timeout: float = 60.0) -> None:
        try:
            super().wait_ready(timeout)
        except api.GpusimError as error:
            raise AssertionError(str(error)) from None

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


@contextlib.contextmanager
def host_with_servers(root: Path, gpus: int) -> Iterator[FakeServers]:
    """A simulated host of its own (root/host, `gpus` GPUs) and the FakeServers a module's tests share on it: every
    server stopped, then the host cleaned up by record, whatever happened."""
    host = sim_host(root / "host")
    host.gpusim("create", "--gpus", str(gpus))
    servers = FakeServers(host, root)
    try:
        yield servers
    finally:
        servers.close()
        result = host.gpusim("cleanup", check=False)
        assert result.returncode == 0, result.stderr
