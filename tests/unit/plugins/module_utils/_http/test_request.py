# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one plain HTTP request: statuses, refusals, time-outs, headers, URLs it cannot use, no proxy, no redirect."""

from __future__ import annotations

import socket
import threading

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._http.request import http_get, http_post_json
from ansible_collections.gpuops.fleet.tests.unit.plugins.loopback_http import LoopbackServer, refused_port


def _serve(answer):
    """A loopback server whose replies are ``answer(handler) -> (status, body)``; yields its base URL."""
    server = LoopbackServer(lambda handler, raw: answer(handler))
    try:
        yield server.url
    finally:
        server.close()


@pytest.fixture
def server():
    yield from _serve(lambda handler: (200 if handler.path == "/health" else 503, b"ok"))


def test_http_get_returns_statuses(server):
    assert http_get(server + "/health", 5).status == 200
    reply = http_get(server + "/other", 5)
    assert reply.status == 503 and reply.describe() == "HTTP 503"


def test_http_get_refused_is_a_reply_without_status():
    with refused_port() as port:
        reply = http_get("http://127.0.0.1:%d/health" % port, 2)
    assert reply.status is None and reply.describe() == "connection refused"


@pytest.fixture
def echo_server():
    """Answers 401 without the right Authorization header, else 200 with the path it was asked for."""
    yield from _serve(lambda handler: (200 if handler.headers.get("Authorization") == "Bearer k" else 401, handler.path.encode()))


def test_http_get_sends_the_headers_and_keeps_path_and_query(echo_server):
    reply = http_get(echo_server + "/prefix/v1/models?x=1", 5, headers={"Authorization": "Bearer k"})
    assert (reply.status, reply.body) == (200, "/prefix/v1/models?x=1")
    refused = http_get(echo_server + "/v1/models", 5)
    assert refused.status == 401 and refused.body == "/v1/models"


def test_http_get_of_a_server_that_never_answers_times_out():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)  # accepts into the backlog, never reads
        reply = http_get("http://127.0.0.1:%d/health" % sock.getsockname()[1], 0.3)
    assert reply.status is None and reply.describe().startswith("timed out")


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/health", "127.0.0.1:8000/health", "http://127.0.0.1:port/health"])
def test_http_get_of_a_url_it_cannot_use_says_so(url):
    reply = http_get(url, 1)
    assert reply.status is None and url in reply.describe()


def test_http_get_goes_straight_to_the_server_whatever_proxy_is_set(echo_server, monkeypatch):
    # a check of the server's own port must not go through the host's proxy (here one that does not exist)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    assert http_get(echo_server + "/health", 5, headers={"Authorization": "Bearer k"}).status == 200


def test_http_get_follows_no_redirect():
    """A 302 to /health is the answer: one request reaches the server, not two."""
    requests = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]

        def serve():
            with listener.accept()[0] as conn:
                requests.append(conn.recv(65536).split(b"\r\n")[0])
                conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:%d/health\r\nContent-Length: 0\r\n"
                             b"Connection: close\r\n\r\n" % port)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        reply = http_get("http://127.0.0.1:%d/moved" % port, 5)
        thread.join(5)
    assert reply.status == 302
    assert requests == [b"GET /moved HTTP/1.1"]


def test_http_post_json_sends_the_payload_as_json():
    server = LoopbackServer(lambda handler, raw: (200, raw))
    try:
        reply = http_post_json(server.url + "/v1/completions", {"model": "m", "max_tokens": 1}, 5, headers={"X-Test": "1"})
        assert reply.status == 200 and reply.body == '{"model": "m", "max_tokens": 1}'
        method, path, headers, _body = server.seen[0]
        assert (method, path, headers["Content-Type"], headers["X-Test"]) == ("POST", "/v1/completions", "application/json", "1")
    finally:
        server.close()
