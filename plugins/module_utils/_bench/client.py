# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The streaming load generator: asyncio protocols over plain sockets (TLS where the URL says https).

Each request gets its own connection, opened before its clock starts (as a warm keep-alive pool would hand
one over), so connecting is never counted in the time to first token. Every receive is time-stamped the
moment the event loop hands it over, before any parsing, and the HTTP and SSE parsing in between is a few
byte searches and one json.loads per event: one core reads tens of thousands of tokens a second.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import asyncio
import gc
import random
import ssl
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.http_reader import HttpProtocolError, ResponseReader
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import (
    BAD_RESPONSE, CONNECT_ERROR, DROPPED, ERROR_EVENT, HTTP_ERROR, IN_FLIGHT, NO_CONTENT, TIMEOUT, Outcome, Target)
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.sse import SseError, SseSplitter, StreamInterpreter

if t.TYPE_CHECKING:
    from ansible_collections.gpuops.fleet.plugins.module_utils._bench.sessions import Conversation

MAX_ERROR_BODY = 4096
perf_counter = time.perf_counter


class _StreamProtocol(asyncio.Protocol):
    """One request on one connection: send it, read the streamed answer, resolve `done` with an Outcome."""

    def __init__(self, outcome: Outcome, endpoint: str, request: bytes, timeout: float,
                 loop: asyncio.AbstractEventLoop, keep_text: bool = False) -> None:
        self.outcome = outcome
        self.request = request
        self.timeout = timeout
        self.loop = loop
        self.done: asyncio.Future = loop.create_future()
        self.reader = ResponseReader()
        self.sse = SseSplitter()
        self.stream = StreamInterpreter(endpoint, keep_text)
        self.transport: t.Optional[asyncio.Transport] = None
        self.timer: t.Optional[asyncio.TimerHandle] = None
        self.error_body = b""
        self.finished = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = t.cast(asyncio.Transport, transport)

    def send(self) -> None:
        self.timer = self.loop.call_later(self.timeout, self._on_timeout)
        self.outcome.start = perf_counter()
        t.cast(asyncio.Transport, self.transport).write(self.request)

    def interrupt(self) -> None:
        """The run's duration ended while this request ran: close it and count it as in flight, not as failed."""
        if not self.finished:
            self._finish(IN_FLIGHT, "still running when the run's duration ended (%d content chunks received)"
                         % self.stream.content_chunks)

    def data_received(self, data: bytes) -> None:
        now = perf_counter()
        if self.finished:
            return
        reader = self.reader
        try:
            pieces = reader.feed(data)
            if reader.status is None:
                return
            if reader.status != 200:
                for piece in pieces:
                    if len(self.error_body) < MAX_ERROR_BODY:
                        self.error_body += piece
                if reader.complete:
                    self._http_error()
                return
            stream = self.stream
            for piece in pieces:
                for event in self.sse.feed(piece):
                    stream.on_event(event, now)
                    if stream.error is not None:
                        self._finish(ERROR_EVENT, stream.error)
                        return
                    if stream.done:
                        self._finish()
                        return
            if reader.complete:
                self._finish()
        except (HttpProtocolError, SseError) as exc:
            self._finish(BAD_RESPONSE, str(exc))

    def eof_received(self) -> t.Optional[bool]:
        return None  # close our side too; connection_lost follows

    def connection_lost(self, exc: t.Optional[Exception]) -> None:
        if self.finished:
            return
        if self.reader.status is None:
            self._finish(DROPPED, "connection closed before the response headers%s" % _why(exc))
        elif self.reader.status != 200:
            self._http_error()
        elif self.reader.close_delimited and exc is None and self.stream.finish_reason:
            self._finish()  # a body that ends with the connection, complete by its own account
        else:
            self._finish(DROPPED, "connection closed in the middle of the stream after %d content chunks%s"
                         % (self.stream.content_chunks, _why(exc)))

    def _on_timeout(self) -> None:
        if not self.finished:
            self._finish(TIMEOUT, "no complete answer within %g s (%d content chunks received)"
                         % (self.timeout, self.stream.content_chunks))

    def _http_error(self) -> None:
        reader = self.reader
        body = self.error_body.decode("utf-8", "replace").strip()
        self.outcome.http_status = reader.status
        self._finish(HTTP_ERROR, "HTTP %s %s%s" % (reader.status, reader.reason, (": " + body[:500]) if body else ""))

    def _finish(self, reason: str = "", error: str = "") -> None:
        self.finished = True
        if self.timer is not None:
            self.timer.cancel()
        if self.transport is not None:
            if reason in (TIMEOUT, IN_FLIGHT):
                self.transport.abort()
            else:
                self.transport.close()
        outcome = self.outcome
        stream = self.stream
        outcome.content_chunks = stream.content_chunks
        outcome.prompt_tokens = stream.prompt_tokens
        outcome.cached_tokens = stream.cached_tokens
        if stream.pieces is not None:
            outcome.text = stream.text
        outcome.tokens_seen = stream.completion_tokens if stream.completion_tokens is not None else stream.content_chunks
        if not reason and stream.first_ts is None:
            reason, error = NO_CONTENT, "the stream ended without a content chunk"
        if reason:
            outcome.reason, outcome.error = reason, error
        else:
            outcome.success = True
            outcome.ttft = stream.first_ts - outcome.start  # type: ignore[operator]
            outcome.latency = stream.last_ts - outcome.start  # type: ignore[operator]
            outcome.itl = stream.itl
            if stream.completion_tokens is not None:
                outcome.output_tokens = stream.completion_tokens
            else:
                outcome.output_tokens = stream.content_chunks
                outcome.approximate = True
        if not self.done.done():  # cancelled when the run's duration ended
            self.done.set_result(outcome)


def _why(exc: t.Optional[Exception]) -> str:
    return ": %s" % exc if exc else ""


class OpenArrivals:
    """Arrival offsets without a count known in advance (a time-bounded run): all at once for an infinite rate,
    else a Poisson process at the rate, drawn in order as the client asks for them."""

    def __init__(self, request_rate: float, rng: random.Random, cap: int) -> None:
        self.request_rate = request_rate
        self.rng = rng
        self.cap = cap
        self.drawn: t.List[float] = []

    def __len__(self) -> int:
        return self.cap

    def __getitem__(self, index: int) -> float:
        if self.request_rate == float("inf"):
            return 0.0
        while len(self.drawn) <= index:
            self.drawn.append((self.drawn[-1] if self.drawn else 0.0) + self.rng.expovariate(self.request_rate))
        return self.drawn[index]


def arrival_offsets(count: int, request_rate: float, rng: random.Random) -> t.List[float]:
    """Seconds after the start at which each request arrives: all at once for an infinite rate, else a Poisson
    process (exponential gaps), scaled so the last arrival is at count / rate, as `vllm bench serve` does."""
    if request_rate == float("inf") or count == 0:
        return [0.0] * count
    offsets = []
    total = 0.0
    for _index in range(count):
        total += rng.expovariate(request_rate)
        offsets.append(total)
    scale = (count / request_rate) / offsets[-1]
    return [offset * scale for offset in offsets]


class Client:
    """Runs a batch of requests against one target with a concurrency limit and an arrival schedule."""

    def __init__(self, target: Target, endpoint: str, timeout: float, keep_text: bool = False) -> None:
        self.target = target
        self.endpoint = endpoint
        self.timeout = timeout
        self.keep_text = keep_text  # keep each answer's text (a session's next turn appends it)

    def run(self, bodies: t.Sequence[bytes], concurrency: int, offsets: t.Sequence[float],
            duration: t.Optional[float] = None) -> t.Tuple[t.List[Outcome], float]:
        """Send every body; return the outcomes (in the bodies' order) and the batch's duration in seconds.

        With `duration`, no request arrives after that many seconds, and the requests still running then are closed
        and returned with reason IN_FLIGHT; `bodies` and `offsets` may then be sequences that make their items as they
        are asked for (only the requests sent are returned)."""
        return self._loop(self._run(bodies, concurrency, offsets, duration))

    def run_schedule(self, bodies: t.Sequence[bytes], offsets: t.Sequence[float], concurrency: t.Optional[int],
                     duration: t.Optional[float] = None) -> t.Tuple[t.List[Outcome], float]:
        """Send each body at its offset (a timed trace), at most `concurrency` in flight (None: no limit). One
        dispatcher makes each body before the request is due and sends it then, so a body is made only when the one
        before it has gone out, and a request held back (by the cap, or a client too busy) is sent late: its
        Outcome's start minus arrival. With `duration`, as in run()."""
        return self._loop(self._run_schedule(bodies, offsets, concurrency, duration))

    def run_sessions(self, sessions: int, turns: int, concurrency: int, think_time: float,
                     conversation: t.Callable[[int], "Conversation"],
                     duration: t.Optional[float] = None) -> t.Tuple[t.List[Outcome], float]:
        """Run `sessions` conversations of `turns` requests each, at most `concurrency` sessions at a time: each turn
        is sent `think_time` seconds after the answer to the one before. conversation(session) makes a session's
        bodies: its body(answer) is a turn's (None for the first turn, else the answer to the turn before), its
        prepare() does ahead of time what a turn's body costs beyond the answer. prepare() is called for a session's
        first turn when the session is taken up, for each later turn once the turn before it has been sent, and a
        worker takes up its next session (and prepares its first turn) once its session's last turn has been sent:
        at the end of a turn, while other sessions' streams may be ending too, only body(answer) is made. A failed
        turn ends its session. Outcomes are indexed session * turns + turn, returned in that order; with `duration`,
        as in run()."""
        return self._loop(self._run_sessions(sessions, turns, concurrency, think_time, conversation, duration))

    def _loop(self, work: t.Coroutine[t.Any, t.Any, t.Tuple[t.List[Outcome], float]]) -> t.Tuple[t.List[Outcome], float]:
        gc_was_enabled = gc.isenabled()
        gc.collect()
        gc.disable()  # no collector pause in the middle of a stream's timing
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(work)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            if gc_was_enabled:
                gc.enable()

    async def _run(self, bodies: t.Sequence[bytes], concurrency: int, offsets: t.Sequence[float],
                   duration: t.Optional[float] = None) -> t.Tuple[t.List[Outcome], float]:
        count = len(bodies)
        sent: t.Dict[int, Outcome] = {}
        next_index = [0]
        start = perf_counter()
        deadline = float("inf") if duration is None else start + duration

        async def worker() -> None:
            while next_index[0] < count and perf_counter() < deadline:
                index = next_index[0]
                arrival = start + offsets[index]
                if arrival >= deadline:
                    break  # offsets only grow: no later request arrives in time either
                next_index[0] += 1
                body = bodies[index]  # made before the wait, so making it never makes the request late
                wait = arrival - perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                outcome = sent[index] = Outcome(index)
                outcome.arrival = arrival
                await self._one(outcome, body)

        await _drive([worker] * max(1, min(concurrency, count)), duration)
        return [sent[index] for index in sorted(sent)], perf_counter() - start

    async def _run_schedule(self, bodies: t.Sequence[bytes], offsets: t.Sequence[float], concurrency: t.Optional[int],
                            duration: t.Optional[float]) -> t.Tuple[t.List[Outcome], float]:
        sent: t.Dict[int, Outcome] = {}
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(concurrency) if concurrency else None
        start = perf_counter()
        deadline = float("inf") if duration is None else start + duration

        async def one(outcome: Outcome, body: bytes) -> None:
            try:
                await self._one(outcome, body)
            finally:
                if slots is not None:
                    slots.release()

        async def dispatcher() -> None:
            running: t.List[asyncio.Task] = []
            try:
                for index in range(len(bodies)):
                    arrival = start + offsets[index]
                    if arrival >= deadline:
                        break
                    body = bodies[index]
                    wait = arrival - perf_counter()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    if slots is not None:
                        await slots.acquire()
                    outcome = sent[index] = Outcome(index)
                    outcome.arrival = arrival
                    running.append(loop.create_task(one(outcome, body)))
                for answer in await asyncio.gather(*running, return_exceptions=True):
                    if isinstance(answer, Exception):
                        raise answer
            except asyncio.CancelledError:
                for task in running:
                    task.cancel()
                await asyncio.gather(*running, return_exceptions=True)
                raise

        await _drive([dispatcher], duration)
        return [sent[index] for index in sorted(sent)], perf_counter() - start

    async def _run_sessions(self, sessions: int, turns: int, concurrency: int, think_time: float,
                            conversation: t.Callable[[int], "Conversation"],
                            duration: t.Optional[float]) -> t.Tuple[t.List[Outcome], float]:
        sent: t.Dict[int, Outcome] = {}
        next_session = [0]
        start = perf_counter()
        deadline = float("inf") if duration is None else start + duration

        def take_up() -> t.Optional[t.Tuple[int, "Conversation"]]:
            """The next session not yet taken up, its first turn prepared; None when none is left."""
            if next_session[0] >= sessions or perf_counter() >= deadline:
                return None
            session = next_session[0]
            next_session[0] += 1
            talk = conversation(session)
            talk.prepare()
            return session, talk

        async def worker() -> None:
            upcoming: t.List[t.Tuple[int, "Conversation"]] = []  # taken up while the last turn of the one before ran

            def take_up_next() -> None:
                taken = take_up()
                if taken is not None:
                    upcoming.append(taken)

            while True:
                taken = upcoming.pop() if upcoming else take_up()
                if taken is None:
                    return
                session, talk = taken
                answer: t.Optional[str] = None
                for turn in range(turns):
                    if turn and think_time > 0:
                        await asyncio.sleep(think_time)
                    if perf_counter() >= deadline:
                        return
                    body = talk.body(answer)
                    index = session * turns + turn
                    outcome = sent[index] = Outcome(index)
                    outcome.arrival = perf_counter()
                    await self._one(outcome, body, talk.prepare if turn + 1 < turns else take_up_next)
                    if not outcome.success:
                        break
                    answer = outcome.text

        await _drive([worker] * max(1, min(concurrency, sessions)), duration)
        return [sent[index] for index in sorted(sent)], perf_counter() - start

    async def _one(self, outcome: Outcome, body: bytes, after_send: t.Optional[t.Callable[[], None]] = None) -> None:
        """Send one request on a connection of its own and read its answer into `outcome`; after_send(), when given,
        is called once the request has been written, before its answer can be read."""
        loop = asyncio.get_running_loop()
        target = self.target
        request = target.request_head(len(body)) + body
        protocol = _StreamProtocol(outcome, self.endpoint, request, self.timeout, loop, self.keep_text)
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: protocol, target.host, target.port, ssl=target.ssl,
                                       server_hostname=target.host if target.ssl else None),
                timeout=self.timeout)
        except asyncio.TimeoutError:
            outcome.reason, outcome.error = CONNECT_ERROR, "no connection to %s:%d within %g s" % (target.host, target.port, self.timeout)
            return
        except (OSError, ssl.SSLError) as exc:
            outcome.reason, outcome.error = CONNECT_ERROR, "cannot connect to %s:%d: %s" % (target.host, target.port, exc)
            return
        except asyncio.CancelledError:
            outcome.reason, outcome.error = IN_FLIGHT, "still connecting when the run's duration ended"
            raise
        protocol.send()
        if after_send is not None:
            after_send()
        try:
            await protocol.done
        except asyncio.CancelledError:
            protocol.interrupt()  # keeps an outcome that was complete already
            raise


async def _drive(workers: t.Sequence[t.Callable[[], t.Awaitable[None]]], duration: t.Optional[float]) -> None:
    """Run the workers side by side to their end, or cancel them all when `duration` seconds have passed."""
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(worker()) for worker in workers]  # type: ignore[arg-type]
    timer = None if duration is None else loop.call_later(duration, _cancel_all, tasks)
    try:
        for answer in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(answer, Exception):
                raise answer
    finally:
        if timer is not None:
            timer.cancel()


def _cancel_all(tasks: t.Sequence[asyncio.Task]) -> None:
    for task in tasks:
        task.cancel()
