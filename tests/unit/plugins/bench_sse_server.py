# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A tiny scripted OpenAI-style streaming server on a real socket, for the benchmark client's unit tests.

Each generation request takes the next behaviour from `behaviours` (default "ok"): a normal stream, or one fault.
It counts what it generated in a Prometheus counter at /metrics, as vLLM does.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
import typing as t

FAULTS = ("ok", "http500", "error_event", "stall", "drop", "garbage", "no_usage", "empty", "event_error_field")


class ScriptedServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, models: t.Sequence[str] = ("tiny-model",), tokens_per_chunk: int = 1, gap_s: float = 0.0,
                 ttft_s: float = 0.0, metrics: bool = True, close_delimited: bool = False, models_endpoint: bool = True,
                 chat_only: bool = False, cached_tokens: t.Optional[int] = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.models = list(models)
        self.tokens_per_chunk = tokens_per_chunk
        self.gap_s = gap_s
        self.ttft_s = ttft_s
        self.metrics = metrics
        self.close_delimited = close_delimited
        self.models_endpoint = models_endpoint  # False: /v1/models answers 404, as some OpenAI-compatible servers do
        self.chat_only = chat_only  # True: /v1/completions answers 404, as a server that serves only chat does
        self.cached_tokens = cached_tokens  # sent as usage.prompt_tokens_details.cached_tokens when set
        self.arrived: t.List[float] = []  # perf_counter() when each generation request's body was read, in order
        self.seen: t.List[str] = []  # "METHOD /path" of every request, in order
        self.behaviours: t.List[str] = []
        self.requests: t.List[t.Dict[str, t.Any]] = []
        self.headers: t.List[t.Dict[str, str]] = []
        self.generated = 0
        self.extra_generated = 0  # tokens "generated" for nobody: other traffic
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self.server_address[1]

    def __enter__(self) -> "ScriptedServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self.shutdown()
        self.server_close()

    def next_behaviour(self) -> str:
        with self.lock:
            return self.behaviours.pop(0) if self.behaviours else "ok"


class _Handler(socketserver.StreamRequestHandler):
    server: ScriptedServer

    def handle(self) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            data = self.connection.recv(65536)
            if not data:
                return
            head += data
        head, _sep, body = head.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _version = lines[0].split(" ")
        headers = {k.strip().lower(): v.strip() for k, _s, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            body += self.connection.recv(65536)
        with self.server.lock:
            self.server.seen.append("%s %s" % (method, path))
        if method == "GET" and path == "/v1/models" and self.server.models_endpoint:
            self.reply(200, json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in self.server.models]}))
        elif method == "GET" and path == "/metrics":
            if not self.server.metrics:
                self.reply(404, '{"detail":"Not Found"}')
                return
            total = self.server.generated + self.server.extra_generated
            text = ("# TYPE vllm:generation_tokens_total counter\n"
                    'vllm:generation_tokens_total{model_name="%s"} %d.0\n' % (self.server.models[0], total))
            self.reply(200, text, "text/plain")
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions") and not (
                self.server.chat_only and path == "/v1/completions"):
            arrived = time.perf_counter()
            request = json.loads(body)
            with self.server.lock:
                self.server.arrived.append(arrived)
                self.server.requests.append(request)
                self.server.headers.append(headers)
            self.generate(request, path.endswith("chat/completions"))
        else:
            self.reply(404, '{"detail":"Not Found"}')

    def reply(self, status: int, body: str, content_type: str = "application/json") -> None:
        data = body.encode()
        self.connection.sendall(b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                                % (status, content_type.encode(), len(data), data))

    def send_event(self, obj: t.Any) -> None:
        payload = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
        if self.server.close_delimited:
            self.connection.sendall(payload)
        else:
            self.connection.sendall(b"%x\r\n%s\r\n" % (len(payload), payload))

    def generate(self, request: t.Dict[str, t.Any], chat: bool) -> None:
        server = self.server
        behaviour = server.next_behaviour()
        if behaviour == "http500":
            self.reply(500, json.dumps({"error": {"message": "scripted failure", "type": "InternalServerError", "code": 500}}))
            return
        if behaviour == "garbage":
            self.connection.sendall(b"SSH-2.0-not-http\r\n\r\n")
            return
        framing = b"" if server.close_delimited else b"Transfer-Encoding: chunked\r\n"
        self.connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + framing
                                + (b"Connection: close\r\n" if server.close_delimited else b"") + b"\r\n")
        if chat:
            self.send_event(chunk(chat, role=True))
        total = int(request.get("max_tokens") or 16)
        prompt_tokens = len((request.get("prompt") or request.get("messages", [{}])[0].get("content", "")).split())
        if behaviour == "empty":
            total = 0
        if server.ttft_s:
            time.sleep(server.ttft_s)
        sent = 0
        while sent < total:
            n = min(server.tokens_per_chunk, total - sent)
            if behaviour in ("error_event", "drop", "stall", "event_error_field") and sent >= 2:
                break
            if sent and server.gap_s:
                time.sleep(server.gap_s)
            sent += n
            with server.lock:
                server.generated += n
            self.send_event(chunk(chat, text=" tok" * n, finish="length" if sent == total else None))
        if behaviour == "error_event":
            self.send_event({"error": {"message": "scripted mid-stream failure", "type": "InternalServerError", "code": 500}})
            self.send_event(b"[DONE]")
            return
        if behaviour == "event_error_field":
            self.connection.sendall(b"%x\r\n%s\r\n" % (len(b"event: error\ndata: overloaded\n\n"), b"event: error\ndata: overloaded\n\n"))
            return
        if behaviour == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if behaviour == "stall":
            server.closing.wait(30)
            return
        if behaviour != "no_usage":
            usage: t.Dict[str, t.Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": sent, "total_tokens": prompt_tokens + sent}
            if server.cached_tokens is not None:
                usage["prompt_tokens_details"] = {"cached_tokens": server.cached_tokens}
            self.send_event({"choices": [], "usage": usage})
        self.send_event(b"[DONE]")
        if not server.close_delimited:
            self.connection.sendall(b"0\r\n\r\n")


def chunk(chat: bool, text: str = "", finish: t.Optional[str] = None, role: bool = False) -> t.Dict[str, t.Any]:
    if chat:
        delta = {"role": "assistant", "content": ""} if role else {"content": text}
        return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}
