# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One admitted generation request: tokens paced by a TokenClock, streamed as SSE or answered whole.

Streams use HTTP/1.1 chunked transfer (one HTTP chunk per SSE event, the connection kept alive), so a
stream cut short (the `drop` fault, a SIGTERM) is an incomplete body every HTTP client notices.
"""

from __future__ import annotations

import math
import select
import socket
import time
from typing import TYPE_CHECKING, Optional

from vllm._faults import DROP, ERROR_EVENT, STALL
from vllm._openai import DONE_EVENT, Bodies, GenRequest, dumps, error_info, token_text, token_words
from vllm._pace import TokenClock
from vllm._sent import SentRecord

if TYPE_CHECKING:
    from vllm._http import Handler

FAULT_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause. (simulated fault)"
# what vLLM answers every generation request with once its engine core died (the API server lives on)
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."


class ClientGone(Exception):
    """The client closed its connection, or the server is stopping: the request ends here."""


class Generation:
    """Runs one request on its handler's connection; `run` returns once its last byte is out (or it was cut)."""

    def __init__(self, handler: "Handler", request: GenRequest, fault: Optional[str], arrival: float) -> None:
        self.handler = handler
        self.serving = handler.server.serving
        self.request = request
        self.fault = fault
        cache = self.serving.prefix_cache
        self.cached_tokens, self.cache_blocks = cache.admit(request.prompt)
        if cache.enabled:
            self.serving.metrics.prefix_cache_lookup(request.prompt_tokens, self.cached_tokens)
        self.bodies = Bodies(request, self.cached_tokens)
        knobs = self.serving.knobs
        self.chunk_tokens = knobs.tokens_per_chunk
        self.fault_after = knobs.fault_after_tokens
        self.block_size = self.serving.args.block_size
        self.arrival = arrival
        prefill_ms = (request.prompt_tokens - self.cached_tokens) * knobs.prefill_ms_per_token
        self.first_due = arrival + (knobs.ttft_ms + prefill_ms) / 1000.0
        self.clock = TokenClock(self.serving.pace, self.first_due, self.serving.metrics.running_now)
        self.sent = SentRecord(arrival, request.chat, request.stream, request.output_tokens, request.prompt_tokens,
                               self.cached_tokens)
        self.kv_tokens = 0
        self.kv_blocks = 0
        self._poller = select.poll()
        self._poller.register(self.serving.stop_fd, select.POLLIN)
        self._poller.register(handler.connection, select.POLLIN)
        self._finished = False

    def run(self) -> None:
        metrics = self.serving.metrics
        metrics.admit(self.request.prompt_tokens)
        self._hold(self.request.prompt_tokens)
        try:
            if self.request.stream:
                self._stream()
            else:
                self._whole()
        except (ClientGone, OSError):
            self.handler.close_connection = True
            self._cut()
        finally:
            if not self._finished:
                metrics.finish("")
            metrics.hold(-self.kv_blocks)
            self.kv_blocks = 0
            self.serving.sent.add(self.sent)

    # -- streaming -----------------------------------------------------------------------------------------

    def _stream(self) -> None:
        request, handler = self.request, self.handler
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        if request.chat:
            self._write(self.bodies.role_event())
        sent, total = 0, request.output_tokens
        while sent < total:
            size = min(self.chunk_tokens, total - sent)
            if self.fault is not None and (sent >= self.fault_after or sent + size >= total):
                self._stream_fault()
                return
            self._wait_until(self.clock.due_after(size))
            if sent == 0:  # token 0 was ready at its due instant; alone in its chunk, when it actually left
                self.serving.metrics.first_token((time.monotonic() if size == 1 else self.first_due) - self.arrival)
            last = sent + size == total
            self._write(self.bodies.chunk_event(token_text(sent, size), request.finish_reason if last else None))
            self.sent.wrote(size)
            self.serving.metrics.generated(size)
            self._hold(size)
            self.cache_blocks.extend(token_words(sent, size))
            sent += size
        tail = self.bodies.usage_event(total) if request.include_usage else b""
        self._finish(request.finish_reason)
        self._write(tail + DONE_EVENT, last=True)

    def _stream_fault(self) -> None:
        if self.fault == ERROR_EVENT:  # what vLLM sends when the engine fails mid-stream
            self._finish("")
            self._write(self.bodies.error_event(FAULT_MESSAGE) + DONE_EVENT, last=True)
        elif self.fault == DROP:
            self._finish("")
            self._cut()
        elif self.fault == STALL:
            self._wait_until(math.inf)  # until the client gives up or the server stops

    # -- whole responses -----------------------------------------------------------------------------------

    def _whole(self) -> None:
        request, handler = self.request, self.handler
        total = request.output_tokens
        if self.fault is not None:
            self._wait_until(self.clock.due_after(min(self.fault_after, total)))
            if self.fault == STALL:
                self._wait_until(math.inf)
            self._finish("")
            if self.fault == DROP:
                self._cut()
            else:
                handler.reply_json(500, dumps({"error": error_info(FAULT_MESSAGE, "InternalServerError", 500)}))
            return
        self._wait_until(self.clock.due_after(total))
        self.serving.metrics.first_token(self.first_due - self.arrival)
        self.serving.metrics.generated(total)
        self._hold(total)
        self.cache_blocks.extend(token_words(0, total))
        self._finish(request.finish_reason)
        handler.reply_json(200, self.bodies.full(token_text(0, total), total))
        self.sent.wrote(total)

    # -- the connection ------------------------------------------------------------------------------------

    def _finish(self, reason: str) -> None:
        """Count the request as done just before its last byte goes out (a drain waiting for 0 then holds)."""
        now = time.monotonic()
        self.serving.metrics.finish(reason, now - self.arrival)
        self.sent.finished(now)
        self._finished = True

    def _hold(self, tokens: int) -> None:
        """The request's KV cache now holds `tokens` more (whole blocks of --block-size, as vLLM allocates them)."""
        self.kv_tokens += tokens
        blocks = -(-self.kv_tokens // self.block_size)
        if blocks != self.kv_blocks:
            self.serving.metrics.hold(blocks - self.kv_blocks)
            self.kv_blocks = blocks

    def _write(self, data: bytes, last: bool = False) -> None:
        frame = b"%x\r\n%s\r\n" % (len(data), data)
        self.handler.wfile.write(frame + b"0\r\n\r\n" if last else frame)

    def _cut(self) -> None:
        """End the connection without finishing the body (no [DONE], no final HTTP chunk)."""
        self.handler.close_connection = True
        try:
            self.handler.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _wait_until(self, deadline: float) -> None:
        """Sleep until `deadline` (time.monotonic); raise ClientGone when the server stops or the client leaves."""
        while True:
            if self.serving.stopping.is_set():
                raise ClientGone()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            events = self._poller.poll(None if math.isinf(remaining) else remaining * 1000.0)
            for fd, _mask in events:
                if fd == self.serving.stop_fd:
                    raise ClientGone()
                if self._client_gone():
                    raise ClientGone()

    def _client_gone(self) -> bool:
        try:
            data = self.handler.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError:
            return True
        if data:  # the client sent more (a pipelined request): stop watching its socket for this request
            self._poller.unregister(self.handler.connection)
        return not data
