# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A headless node waits for its head to stop: against a real HTTP server on loopback, then a closed port."""

from __future__ import annotations

import http.server
import socket
import threading

from ansible_collections.gpuops.fleet.plugins.module_utils._server import head_gone


class Answer503(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(503)
        self.end_headers()

    def log_message(self, *args):  # quiet
        pass


def test_a_head_that_answers_503_still_runs_and_a_closed_port_is_gone():
    server = http.server.HTTPServer(("127.0.0.1", 0), Answer503)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = "http://127.0.0.1:%d/health" % server.server_address[1]
    try:
        assert head_gone.answers(url)
    finally:
        server.shutdown()
        server.server_close()
    assert not head_gone.answers(url)


def test_the_wait_ends_when_the_head_is_gone_or_when_its_time_is_up():
    ticks = iter([0.0, 0.5, 1.0, 1.5])
    seen = []
    gone = head_gone.wait_gone("http://h/health", 10, clock=lambda: next(ticks), sleep=seen.append,
                               probe=lambda url: len(seen) < 2)
    assert gone == {"url": "http://h/health", "gone": True, "waited_s": 1.5} and seen == [head_gone.POLL_S] * 2
    clock = iter([0.0, 3.0, 6.0])
    late = head_gone.wait_gone("http://h/health", 5, clock=lambda: next(clock), sleep=lambda s: None, probe=lambda url: True)
    assert late == {"url": "http://h/health", "gone": False, "waited_s": 6.0}


def test_a_head_that_hangs_is_not_gone():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts the connection, never answers
    try:
        assert head_gone.answers("http://127.0.0.1:%d/health" % listener.getsockname()[1], timeout=0.3)
    finally:
        listener.close()
