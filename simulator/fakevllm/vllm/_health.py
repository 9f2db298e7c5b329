# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API server's HTTP side: `GET /health` (200 once every worker holds its GPU) and `/v1/models`."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from vllm._args import ServerArgs


def serve_health(args: ServerArgs, port: int, is_ready: Callable[[], bool]) -> None:
    """Listen on args.host:port in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/health":
                self._reply(200 if is_ready() else 503, b"")
            elif self.path == "/v1/models":
                body = {"object": "list", "data": [{"id": args.model, "object": "model", "owned_by": "vllm"}]}
                self._reply(200, json.dumps(body).encode())
            else:
                self._reply(404, b'{"detail":"Not Found"}')

        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *values: object) -> None:  # pylint: disable=redefined-builtin
            print(f"INFO {self.address_string()} pid {os.getpid()} " + format % values, flush=True)

    server = ThreadingHTTPServer((args.host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
