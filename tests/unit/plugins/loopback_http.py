# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Loopback helpers for unit tests of the code that reads a server: a port that refuses connections (refused_port), and
an HTTP server whose each GET or POST is answered by ``answer(handler, body) -> (status, body bytes)`` and kept in
``seen`` as (method, path, headers, body).

Neither asks for a free port and binds it later (the gap in which another test may take it): each binds port 0 and
reads the port the kernel gave, held for as long as the test uses it. The tests that start a fake server or host of
their own (tests/integration, tests/simulator, bench/) take their ports from gpusim.api.free_port instead, which
ansible-test's staged copy of the unit tests cannot import."""

from __future__ import annotations

import contextlib
import socket
import threading
import typing as t
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Answer = t.Callable[[BaseHTTPRequestHandler, bytes], t.Tuple[int, bytes]]


@contextlib.contextmanager
def refused_port() -> t.Iterator[int]:
    """A TCP port on loopback that nothing listens on while the block runs: bound by this socket, which never listens, so
    a connection to it is refused and no other test can listen on it until the block ends."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


class LoopbackServer:
    """Started at once on 127.0.0.1 and an ephemeral port (``url``); close() ends it."""

    def __init__(self, answer: Answer) -> None:
        seen: t.List[t.Tuple[str, str, t.Dict[str, str], bytes]] = []
        self.seen = seen

        class Handler(BaseHTTPRequestHandler):
            def _reply(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                seen.append((self.command, self.path, dict(self.headers), raw))
                status, body = answer(self, raw)
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _reply  # noqa: N815

            def log_message(self, *args: t.Any) -> None:  # pylint: disable=arguments-differ
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
