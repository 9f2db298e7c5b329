# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading a server's /health, /v1/models and /metrics."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.http_get import http_get, listed_models, metric_sum

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_running_total 99
vllm:generation_tokens_total{model_name="m"} 1.5e3
"""


def test_metric_sum_adds_label_sets_and_ignores_other_names():
    assert metric_sum(METRICS, "vllm:num_requests_running") == 5.0
    assert metric_sum(METRICS, "vllm:generation_tokens_total") == 1500.0
    assert metric_sum(METRICS, "vllm:num_requests_waiting") is None


@pytest.mark.parametrize("body, expected", [
    ('{"object": "list", "data": [{"id": "a"}, {"id": "b"}]}', ["a", "b"]),
    ('{"data": "x"}', []), ("not json", []), ("[]", []),
])
def test_listed_models(body, expected):
    assert listed_models(body) == expected


@pytest.fixture
def server():
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            status = 200 if self.path == "/health" else 503
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_http_get_returns_statuses(server):
    assert http_get(server + "/health", 5).status == 200
    reply = http_get(server + "/other", 5)
    assert reply.status == 503 and reply.describe() == "HTTP 503"


def test_http_get_refused_is_a_reply_without_status():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    reply = http_get("http://127.0.0.1:%d/health" % port, 2)
    assert reply.status is None and reply.describe() == "connection refused"
