# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Server-sent events: an incremental splitter (body bytes in, events out) and what an OpenAI stream's events mean.

A line may be split across receives, and one receive may hold several events; both are handled. Line ends
may be LF, CRLF or CR, as the SSE format allows.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import typing as t

MAX_EVENT_BYTES = 16 * 1024 * 1024
DONE = b"[DONE]"


class SseError(Exception):
    """The stream is not well-formed server-sent events."""


class SseEvent:
    """One event: its `event` field (empty when the server sent none) and its data lines joined by LF."""

    __slots__ = ("event", "data")

    def __init__(self, event: str, data: bytes) -> None:
        self.event = event
        self.data = data

    def __repr__(self) -> str:
        return "SseEvent(%r, %r)" % (self.event, self.data)


class SseSplitter:
    """Cut a byte stream into events; feed() returns the events that a piece of body completes."""

    def __init__(self) -> None:
        self._buf = b""
        self._cr_pending = False

    def feed(self, data: bytes) -> t.List[SseEvent]:
        if self._cr_pending:
            # a CR ended the previous piece: an LF right after it belongs to the same line end
            if data[:1] == b"\n":
                data = data[1:]
            self._cr_pending = False
        if b"\r" in data:
            if data.endswith(b"\r"):
                self._cr_pending = True
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + data if self._buf else data
        events: t.List[SseEvent] = []
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            block = buf[start:end]
            start = end + 2
            if block.startswith(b"data: ") and b"\n" not in block:
                # the common case: one data line
                events.append(SseEvent("", block[6:]))
            elif block:
                event = _parse_block(block)
                if event is not None:
                    events.append(event)
        self._buf = buf[start:] if start < len(buf) else b""
        if len(self._buf) > MAX_EVENT_BYTES:
            raise SseError("an event longer than %d bytes" % MAX_EVENT_BYTES)
        if self._buf.startswith(b"\n"):
            # blank lines between events (an LF left from a split blank line) carry nothing
            self._buf = self._buf.lstrip(b"\n")
        return events

    @property
    def pending(self) -> bytes:
        """Bytes of an event not finished yet (not empty when a stream ends in the middle of one)."""
        return self._buf


def _parse_block(block: bytes) -> t.Optional[SseEvent]:
    event = ""
    data: t.List[bytes] = []
    for line in block.split(b"\n"):
        if not line or line.startswith(b":"):
            continue  # a comment (keep-alive ping)
        name, sep, value = line.partition(b":")
        if sep and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event = value.decode("utf-8", "replace")
        # id and retry do not matter to a benchmark
    if not data and not event:
        return None
    return SseEvent(event, b"\n".join(data))


# --------------------------------------------------------------------------- OpenAI streams

COMPLETIONS = "completions"
CHAT = "chat"


class StreamInterpreter:
    """What an OpenAI-compatible stream says, event by event, for one request.

    on_event(event, timestamp) records the time of each chunk that carries generated content (the first one is
    the time to first token; the chat endpoint's first, role-only chunk carries none), the server's `usage`, an
    error event, and the end marker. Time stamps are those of the receive that brought the event.
    """

    __slots__ = ("chat", "first_ts", "last_ts", "itl", "content_chunks", "completion_tokens", "prompt_tokens",
                 "done", "finish_reason", "error", "_prev_ts", "cached_tokens", "pieces")

    def __init__(self, endpoint: str, keep_text: bool = False) -> None:
        self.chat = endpoint == CHAT
        self.cached_tokens: t.Optional[int] = None
        self.pieces: t.Optional[t.List[str]] = [] if keep_text else None  # the generated text, when kept
        self.first_ts: t.Optional[float] = None
        self.last_ts: t.Optional[float] = None
        self._prev_ts = 0.0
        self.itl: t.List[float] = []
        self.content_chunks = 0
        self.completion_tokens: t.Optional[int] = None
        self.prompt_tokens: t.Optional[int] = None
        self.done = False
        self.finish_reason: t.Optional[str] = None
        self.error: t.Optional[str] = None

    def on_event(self, event: SseEvent, timestamp: float) -> None:
        data = event.data
        if data == DONE:
            self.done = True
            return
        if event.event == "error":
            self.error = "error event: " + _error_text(data)
            return
        if not data:
            return
        try:
            obj = json.loads(data)
        except ValueError:
            self.error = "malformed event (not JSON): %r" % data[:200]
            return
        if not isinstance(obj, dict):
            self.error = "malformed event (not a JSON object): %r" % data[:200]
            return
        if "error" in obj or obj.get("object") == "error":
            self.error = "error event: " + _error_message(obj)
            return
        choices = obj.get("choices")
        if choices:
            choice = choices[0]
            if self._has_content(choice):
                if self.pieces is not None:
                    self._keep(choice)
                if self.first_ts is None:
                    self.first_ts = timestamp
                else:
                    self.itl.append(timestamp - self._prev_ts)
                self._prev_ts = timestamp
                self.last_ts = timestamp
                self.content_chunks += 1
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reason = reason
        usage = obj.get("usage")
        if usage:
            tokens = usage.get("completion_tokens")
            if isinstance(tokens, int):
                self.completion_tokens = tokens
            prompt = usage.get("prompt_tokens")
            if isinstance(prompt, int):
                self.prompt_tokens = prompt
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                self.cached_tokens = details["cached_tokens"]

    def _keep(self, choice: t.Dict[str, t.Any]) -> None:
        piece = (choice.get("delta") or {}).get("content") if self.chat else choice.get("text")
        if isinstance(piece, str):
            t.cast(t.List[str], self.pieces).append(piece)

    @property
    def text(self) -> str:
        """The generated text received (empty when it was not kept)."""
        return "".join(self.pieces or ())

    def _has_content(self, choice: t.Dict[str, t.Any]) -> bool:
        if self.chat:
            delta = choice.get("delta") or {}
            return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                        or delta.get("tool_calls"))
        # completions: a token can decode to "" (a special token); only the closing chunk without text carries none
        return bool(choice.get("text")) or choice.get("finish_reason") is None


def _error_message(obj: t.Dict[str, t.Any]) -> str:
    error = obj.get("error", obj)
    if isinstance(error, dict):
        message = error.get("message") or error.get("detail") or json.dumps(error)[:300]
        code = error.get("code") or error.get("type")
        return "%s (%s)" % (message, code) if code else str(message)
    return str(error)[:300]


def _error_text(data: bytes) -> str:
    try:
        obj = json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")[:300]
    return _error_message(obj) if isinstance(obj, dict) else str(obj)[:300]
