# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The HTTP response reader (_bench/http_reader): chunked, Content-Length and close-delimited bodies fed in any split, protocol errors."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.http_reader import HttpProtocolError, ResponseReader


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def feed_in_pieces(reader: ResponseReader, data: bytes, size: int) -> bytes:
    body = b""
    for i in range(0, len(data), size):
        body += b"".join(reader.feed(data[i:i + size]))
    return body


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 100000])
def test_chunked_body_any_split(size):
    payload = [b"data: {\"a\":1}\n\n", b"data: [DONE]\n\n", b"x" * 300]
    reader = ResponseReader()
    body = feed_in_pieces(reader, HEAD + chunked(*payload), size)
    assert reader.status == 200 and reader.headers["content-type"] == "text/event-stream"
    assert body == b"".join(payload)
    assert reader.complete and reader.keep_alive


def test_chunk_extensions_trailers_and_bytes_after_end():
    reader = ResponseReader()
    data = HEAD + b"5;name=value\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\nGARBAGE"
    assert b"".join(reader.feed(data)) == b"hello"
    assert reader.complete
    assert reader.feed(b"more") == []


def test_content_length_body_and_error_status():
    reader = ResponseReader()
    body = b'{"error":{"message":"boom"}}'
    head = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    assert feed_in_pieces(reader, head + body + b"extra", 4) == body
    assert reader.status == 500 and reader.reason == "Internal Server Error"
    assert reader.complete and not reader.keep_alive


def test_close_delimited_body_never_completes():
    reader = ResponseReader()
    assert reader.feed(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: 1\n\n") == [b"data: 1\n\n"]
    assert reader.close_delimited and not reader.complete and not reader.keep_alive


def test_informational_response_is_skipped():
    reader = ResponseReader()
    body = feed_in_pieces(reader, b"HTTP/1.1 100 Continue\r\n\r\n" + HEAD + chunked(b"ok"), 5)
    assert reader.status == 200 and body == b"ok" and reader.complete


def test_empty_content_length_completes_at_headers():
    reader = ResponseReader()
    assert reader.feed(b"HTTP/1.1 204 No Content\r\n\r\n") == []
    assert reader.complete


@pytest.mark.parametrize("data, message", [
    (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "bad Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad Content-Length"),
    (HEAD + b"zz\r\n", "bad chunk size"),
    (HEAD + b"2\r\nabXY\r\n", "not followed by CRLF"),
])
def test_protocol_errors(data, message):
    with pytest.raises(HttpProtocolError, match=message):
        ResponseReader().feed(data)


def test_header_flood_is_refused():
    with pytest.raises(HttpProtocolError, match="longer than"):
        ResponseReader().feed(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70000)
