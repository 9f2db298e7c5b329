# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""An incremental HTTP/1.x response reader for the benchmark client: bytes in, status, headers and body pieces out.

It never blocks and never reads a socket itself: the client hands it whatever one receive returned, so a
piece of body can be timestamped by the receive that brought it. Bodies framed by chunked transfer coding,
by Content-Length or by the end of the connection are all understood.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

MAX_HEADER_BYTES = 64 * 1024

# How the body ends
_UNTIL_CLOSE = 0
_LENGTH = 1
_CHUNKED = 2

# Where a chunked body is
_SIZE_LINE = 0
_DATA = 1
_DATA_CRLF = 2
_TRAILER = 3


class HttpProtocolError(Exception):
    """The peer sent something that is not an HTTP/1.x response."""


class ResponseReader:
    """Feed it received bytes with feed(); it returns the body bytes they complete, in order.

    After the headers are in, `status`, `reason` and `headers` (lower-case names) are set. `complete` turns true
    when the body's framing says it ended (never for a body that runs until the connection closes: see
    `close_delimited`). `keep_alive` says whether the server lets the connection be used again.
    """

    def __init__(self) -> None:
        self.status: t.Optional[int] = None
        self.reason = ""
        self.version = ""
        self.headers: t.Dict[str, str] = {}
        self.complete = False
        self._head = bytearray()
        self._framing = _UNTIL_CLOSE
        self._remaining = 0
        self._chunk_state = _SIZE_LINE
        self._pending = b""

    @property
    def headers_done(self) -> bool:
        return self.status is not None

    @property
    def close_delimited(self) -> bool:
        return self.headers_done and self._framing == _UNTIL_CLOSE

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in connection and not self.close_delimited
        return "close" not in connection and not self.close_delimited

    def feed(self, data: bytes) -> t.List[bytes]:
        """Take the next received bytes; return the body bytes they carry (possibly none)."""
        if self.complete:
            return []
        if self.status is None:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > MAX_HEADER_BYTES:
                    raise HttpProtocolError("response headers longer than %d bytes" % MAX_HEADER_BYTES)
                return []
            self._parse_head(bytes(self._head[:end]))
            data = bytes(self._head[end + 4:])
            self._head = bytearray()
            if self._informational():
                return self.feed(data) if data else []
            if not data:
                if self._framing == _LENGTH and self._remaining == 0:
                    self.complete = True
                return []
        if self._framing == _CHUNKED:
            return self._feed_chunked(data)
        if self._framing == _LENGTH:
            if len(data) >= self._remaining:
                data = data[:self._remaining]
                self._remaining = 0
                self.complete = True
            else:
                self._remaining -= len(data)
            return [data] if data else []
        return [data]

    def _informational(self) -> bool:
        """A 1xx response (100 Continue, 103 Early Hints) precedes the real one: forget it."""
        if self.status is not None and 100 <= self.status < 200:
            self.status, self.reason, self.version, self.headers = None, "", "", {}
            return True
        return False

    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("iso-8859-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise HttpProtocolError("not an HTTP/1.x status line: %r" % lines[0][:80])
        self.version = parts[0]
        self.status = int(parts[1])
        self.reason = parts[2] if len(parts) > 2 else ""
        headers: t.Dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise HttpProtocolError("malformed header line: %r" % line[:80])
            key = name.strip().lower()
            headers[key] = (headers[key] + ", " + value.strip()) if key in headers else value.strip()
        self.headers = headers
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._framing = _CHUNKED
        elif "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError:
                raise HttpProtocolError("bad Content-Length: %r" % headers["content-length"]) from None
            if self._remaining < 0:
                raise HttpProtocolError("bad Content-Length: %r" % headers["content-length"])
            self._framing = _LENGTH
        elif self.status in (204, 304):
            self._framing = _LENGTH
            self._remaining = 0
        else:
            self._framing = _UNTIL_CLOSE

    def _feed_chunked(self, data: bytes) -> t.List[bytes]:
        if self._pending:
            data = self._pending + data
            self._pending = b""
        out: t.List[bytes] = []
        pos = 0
        size = len(data)
        while pos < size and not self.complete:
            state = self._chunk_state
            if state == _DATA:
                take = min(self._remaining, size - pos)
                out.append(data[pos:pos + take])
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._chunk_state = _DATA_CRLF
                continue
            end = data.find(b"\r\n", pos)
            if end < 0:
                self._pending = data[pos:]
                if len(self._pending) > MAX_HEADER_BYTES:
                    raise HttpProtocolError("chunk size line longer than %d bytes" % MAX_HEADER_BYTES)
                break
            line = data[pos:end]
            pos = end + 2
            if state == _DATA_CRLF:
                if line:
                    raise HttpProtocolError("chunk data not followed by CRLF")
                self._chunk_state = _SIZE_LINE
            elif state == _SIZE_LINE:
                try:
                    chunk_size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise HttpProtocolError("bad chunk size line: %r" % line[:40]) from None
                if chunk_size == 0:
                    self._chunk_state = _TRAILER
                else:
                    self._remaining = chunk_size
                    self._chunk_state = _DATA
            elif not line:  # _TRAILER: an empty line ends the trailers and the body
                self.complete = True
        return out
