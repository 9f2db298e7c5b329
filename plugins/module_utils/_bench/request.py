# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What one benchmark request is: where it goes (Target), how it ended (Outcome), and the failure reasons counted.

The client fills these in, the metrics read them, the server probe builds a Target: the one file they share.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import ssl
import typing as t

# Failure reasons, as counted in a run's failed_by_reason
CONNECT_ERROR = "connect_error"
HTTP_ERROR = "http_error"
ERROR_EVENT = "error_event"
TIMEOUT = "timeout"
DROPPED = "connection_dropped"
BAD_RESPONSE = "bad_response"
NO_CONTENT = "no_content"
REASONS = (CONNECT_ERROR, HTTP_ERROR, ERROR_EVENT, TIMEOUT, DROPPED, BAD_RESPONSE, NO_CONTENT)
# Not a failure: a request still running when a time-bounded run (duration) ended; counted in in_flight_at_end
IN_FLIGHT = "in_flight_at_end"


class Target:
    """Where requests go: host, port, path, TLS settings and the headers every request carries."""

    def __init__(self, scheme: str, host: str, port: int, path: str, api_key: t.Optional[str] = None,
                 validate_certs: bool = True) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self.path = path
        self.api_key = api_key
        self.ssl: t.Optional[ssl.SSLContext] = None
        if scheme == "https":
            context = ssl.create_default_context()
            if not validate_certs:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            self.ssl = context

    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = "[%s]" % self.host if ":" in self.host else self.host
        return host if self.port == default else "%s:%d" % (host, self.port)

    def request_head(self, body_length: int) -> bytes:
        lines = [
            "POST %s HTTP/1.1" % self.path,
            "Host: %s" % self.host_header(),
            "User-Agent: gpuops.fleet-vllm_benchmark",
            "Accept: text/event-stream",
            "Content-Type: application/json",
            "Content-Length: %d" % body_length,
            "Connection: close",
        ]
        if self.api_key:
            lines.append("Authorization: Bearer %s" % self.api_key)
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class Outcome:
    """One request's result, in the terms `vllm bench serve` uses (times in seconds, perf_counter clock)."""

    __slots__ = ("index", "success", "reason", "error", "arrival", "start", "ttft", "latency", "itl",
                 "output_tokens", "prompt_tokens", "content_chunks", "approximate", "tokens_seen", "cached_tokens", "http_status",
                 "text")

    def __init__(self, index: int) -> None:
        self.index = index
        self.success = False
        self.reason = ""
        self.error = ""
        self.arrival = 0.0
        self.start = 0.0
        self.ttft = 0.0
        self.latency = 0.0
        self.itl: t.List[float] = []
        self.output_tokens = 0
        self.prompt_tokens: t.Optional[int] = None
        self.content_chunks = 0
        self.approximate = False
        self.tokens_seen = 0  # what the client saw generated, failed requests included (for the server cross-check)
        self.cached_tokens: t.Optional[int] = None  # prompt tokens the server reported as cached (prompt_tokens_details)
        self.http_status: t.Optional[int] = None  # the HTTP status of an answer that was not 200
        self.text = ""  # the generated text, when the client was asked to keep it
