# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Readings a test judges a server by, taken from the machine and the simulator, never from what the code under test
wrote: which process listens on a port (the kernel's socket table, through psutil), its HTTP answers and its own
counters, which processes hold a simulated host's GPUs (the simulator's reading), a client's own view of a streamed
request, and the fake vLLM's own record of what it sent and when (GET /sim/sent, grouped as a benchmark's phases)."""

from __future__ import annotations

import json
import re
import statistics
import threading
import time
import typing as t
import urllib.error
import urllib.request

import psutil

from gpusim.api import pid_alive

__all__ = ["listening_pid", "health", "server_pid", "record", "holders", "descends_from", "environ", "assert_server_owns_gpus",
           "running_requests", "stream_in_flight", "SentRequest", "sent_phases", "median_of_medians"]


def listening_pid(port: int) -> t.Optional[int]:
    """The PID of the process that listens on TCP `port` (loopback or any address), None when nothing does.

    A server whose children inherited the listening socket shows up once per process that holds it: the one
    whose parent does not hold it too is the server itself.
    """
    holders = {conn.pid for conn in psutil.net_connections(kind="tcp")
               if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid}
    tops = []
    for pid in holders:
        try:
            parent = psutil.Process(pid).ppid()
        except psutil.NoSuchProcess:
            continue
        if parent not in holders:
            tops.append(pid)
    if len(tops) > 1:
        raise AssertionError("port %d: %d unrelated processes listen on it: %s" % (port, len(tops), sorted(tops)))
    return tops[0] if tops else None


def health(port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> int:
    """GET /health: the status, -1 when nothing answers."""
    try:
        with urllib.request.urlopen("http://%s:%d/health" % (host, port), timeout=timeout) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return -1


class SentRequest(t.NamedTuple):
    """One streamed request as the fake vLLM recorded it: when its first and last content chunk left (ms after the
    request arrived), its tokens, the first chunk's tokens, and when it counted as done."""

    first_ms: float
    last_ms: float
    tokens: int
    first_chunk_tokens: int
    finished_ms: float

    @property
    def interval_ms(self) -> float:
        """From the first content chunk to the last, as the server sent them (what a client's E2EL - TTFT measures)."""
        return self.last_ms - self.first_ms


def sent_phases(records: t.Sequence[t.Mapping[str, t.Any]], *sizes: int) -> t.List[t.List[SentRequest]]:
    """The server's records (GET /sim/sent, in the order the requests ended) of a benchmark's phases run one after
    the other (warm-up, repeat 1, repeat 2, ...), `sizes` requests each; every record a complete stream."""
    assert len(records) == sum(sizes), "the server recorded %d requests, the phases hold %d" % (len(records), sum(sizes))
    requests = []
    for record in records:
        chunks = record["chunks"]
        assert record["stream"] and chunks and record["finished_ms"] is not None, record
        requests.append(SentRequest(chunks[0][0], chunks[-1][0], sum(tokens for _ms, tokens in chunks), chunks[0][1],
                                    record["finished_ms"]))
    phases, start = [], 0
    for size in sizes:
        phases.append(requests[start:start + size])
        start += size
    return phases


def median_of_medians(runs: t.Sequence[t.Sequence[SentRequest]], figure: t.Callable[[SentRequest], float]) -> float:
    """A per-request figure as a benchmark summarises it: the median over each run's requests, then over the runs."""
    return statistics.median(statistics.median(figure(request) for request in run) for run in runs)
# ---- readings of a host's server, none of them the role's ------------------------------------------------------


def server_pid(host: t.Any) -> t.Optional[int]:
    """The PID of the process listening on the host's server port (the kernel's socket table), None when none does."""
    return listening_pid(host.port)


def record(host: t.Any) -> t.Dict[str, t.Any]:
    """The role's own record of the server it launched. Read only where the role's file itself is what a test checks
    (its fields, its removal); a server's PID comes from server_pid()."""
    return json.loads((host.state / "role" / ("vllm-%d.json" % host.port)).read_text())


def holders(host: t.Any) -> t.Dict[int, t.List[int]]:
    """GPU index -> PIDs holding it, from the simulator's own reading."""
    return {g["index"]: [h["pid"] for h in g["holders"]] for g in host.status()["gpus"]}


def descends_from(pid: int, ancestor: int) -> bool:
    try:
        return ancestor in [p.pid for p in psutil.Process(pid).parents()]
    except psutil.NoSuchProcess:
        return False


def environ(pid: int) -> t.Dict[str, str]:
    return psutil.Process(pid).environ()


def assert_server_owns_gpus(host: t.Any, gpus: t.Iterable[int], tp: int) -> t.Tuple[int, t.List[int]]:
    """The process listening on the host's port runs, answers /health, and its own descendants (tp of them) hold
    exactly `gpus`; returns (server PID, worker PIDs)."""
    server = server_pid(host)
    assert server is not None and pid_alive(server), "nothing listens on port %d" % host.port
    assert health(host.port) == 200
    held = holders(host)
    workers = []
    for index in gpus:
        assert len(held[index]) == 1, "GPU %d: %s" % (index, held[index])
        assert descends_from(held[index][0], server), "GPU %d is held by PID %d, not by the new server %s" % (
            index, held[index][0], server)
        workers.append(held[index][0])
    assert len(set(workers)) == tp
    return server, workers


def running_requests(port: int) -> float:
    """The server's own count of requests running (/metrics' vllm:num_requests_running); -1 when it does not answer."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return -1
    return sum(float(v) for v in re.findall(r"^vllm:num_requests_running\{[^}]*\} (\S+)$", text, re.M))


def _stream(port: int, max_tokens: int, out: t.Dict[str, t.Any]) -> None:
    """One streamed completion; records whether it ended with [DONE] and how many chunks came."""
    body = json.dumps({"model": "zai-org/GLM-5-GGUF", "prompt": "hello", "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True}).encode()
    request = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=body,
                                     headers={"Content-Type": "application/json"})
    out["chunks"], out["done"] = 0, False
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            for line in reply:
                if line.startswith(b"data: [DONE]"):
                    out["done"] = True
                elif line.startswith(b"data: "):
                    out["chunks"] += 1
    except Exception as exc:  # pylint: disable=broad-exception-caught  # a cut stream is what some tests expect
        out["error"] = repr(exc)


def stream_in_flight(port: int, max_tokens: int) -> t.Tuple[threading.Thread, t.Dict[str, t.Any]]:
    """A streamed completion on its own thread, returned once the server counts it running: (thread, what it saw:
    chunks, done, error)."""
    out: t.Dict[str, t.Any] = {}
    client = threading.Thread(target=_stream, args=(port, max_tokens, out), daemon=True)
    client.start()
    deadline = time.monotonic() + 30
    while running_requests(port) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running_requests(port) == 1, "the streamed request never ran"
    return client, out
