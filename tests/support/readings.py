# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Readings a test judges a server by, taken from the machine and never from what the code under test wrote:
which process listens on a port (the kernel's socket table, through psutil), its HTTP answers, and the fake vLLM's
own record of what it sent and when (GET /sim/sent, grouped as a benchmark's phases)."""

from __future__ import annotations

import statistics
import typing as t
import urllib.error
import urllib.request

import psutil

__all__ = ["listening_pid", "health", "SentRequest", "sent_phases", "median_of_medians"]


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
