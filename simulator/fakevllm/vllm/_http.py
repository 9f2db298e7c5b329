# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API server's HTTP side: /health, /v1/*, /metrics, /version and the simulator's /sim/* endpoints
(/sim/pace, /sim/faults, /sim/sent). With GPUOPS_SIM_CHAT_ONLY, /v1/completions answers 404.

A threading HTTP/1.1 server (a thread per connection, keep-alive, TCP_NODELAY so a small SSE event is
not held back by Nagle's algorithm). The port is bound when the API server starts, before any worker.
"""

from __future__ import annotations

import hmac
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Tuple
from urllib.parse import parse_qs

from vllm import __version__
from vllm._args import ServerArgs
from vllm._faults import HTTP_500, FaultError, FaultQueue, parse_faults
from vllm._generation import ENGINE_DEAD_MESSAGE, FAULT_MESSAGE, Generation
from vllm._knobs import Knobs
from vllm._lora import PATHS as LORA_PATHS, LoraAdapters, LoraError, request_fields
from vllm._metrics import CONTENT_TYPE, Metrics
from vllm._openai import ApiError, bad_request, dumps, parse_generation
from vllm._pace import PaceModel
from vllm._prefix_cache import PrefixCache
from vllm._proctree import log
from vllm._sent import SentLog

MAX_BODY_BYTES = 64 * 1024 * 1024
GENERATION_PATHS = {"/v1/completions": False, "/v1/chat/completions": True}
CHAT_ONLY_MESSAGE = "This server serves only /v1/chat/completions: /v1/completions does not exist here."


@dataclass
class Serving:  # pylint: disable=too-many-instance-attributes
    """What every request handler shares."""

    args: ServerArgs
    knobs: Knobs
    is_ready: Callable[[], bool]
    metrics: Metrics = field(init=False)
    prefix_cache: PrefixCache = field(init=False)
    faults: FaultQueue = field(default_factory=FaultQueue)
    sent: SentLog = field(default_factory=SentLog)
    pace: PaceModel = field(init=False)
    lora: LoraAdapters = field(init=False)
    stopping: threading.Event = field(default_factory=threading.Event)
    stop_fd: int = field(init=False)
    _stop_w: int = field(init=False)
    _served: int = field(init=False, default=0)  # generation requests the engine took (GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS)
    _served_lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        args = self.args
        self.metrics = Metrics(args.served_model_names[0], args.num_gpu_blocks)
        self.prefix_cache = PrefixCache(args.block_size, args.num_gpu_blocks, args.enable_prefix_caching)
        self.pace = PaceModel(self.knobs.tokens_per_s, self.knobs.concurrency_slowdown, self.knobs.jitter)
        self.stop_fd, self._stop_w = os.pipe()
        self.lora = LoraAdapters.for_server(args.enable_lora, args.max_loras, args.lora_modules, args.port)

    def engine_takes(self) -> bool:
        """Whether the engine core takes one more generation request (False once it is dead: every request after the
        first GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS)."""
        limit = self.knobs.engine_dead_after
        state = os.environ.get("GPUOPS_SIM_STATE")
        # the engine killed while it runs: $GPUOPS_SIM_STATE/engine-dead/<this API server's PID> (docs/simulator.md)
        if state and os.path.exists(os.path.join(state, "engine-dead", str(os.getpid()))):
            return False
        with self._served_lock:
            if limit is not None and self._served >= limit:
                return False
            self._served += 1
            return True

    def stop(self) -> None:
        """Cut every in-flight request at once (each waits on stop_fd too) and refuse new ones."""
        self.stopping.set()
        os.write(self._stop_w, b"x")  # never read: stop_fd stays readable from now on

    def pace_report(self, query: Dict[str, List[str]]) -> Dict[str, Any]:
        knobs = self.knobs
        report: Dict[str, Any] = {
            "tokens_per_s": knobs.tokens_per_s, "source": knobs.pace_source, "nccl_proto": knobs.nccl_proto,
            "ttft_ms": knobs.ttft_ms, "tokens_per_chunk": knobs.tokens_per_chunk,
            "concurrency_slowdown": knobs.concurrency_slowdown, "jitter": knobs.jitter,
            "natural_len": knobs.natural_len, "fault_after_tokens": knobs.fault_after_tokens,
            "prefill_ms_per_token": knobs.prefill_ms_per_token, "chat_only": knobs.chat_only,
            "prefix_caching": self.args.enable_prefix_caching, "block_size": self.args.block_size,
            "num_gpu_blocks": self.args.num_gpu_blocks, "cached_blocks": self.prefix_cache.size(),
            "running_requests": self.metrics.running_now(),
        }
        if "concurrency" in query:
            raw = query["concurrency"][-1]
            if not raw.isdigit() or int(raw) < 1:
                raise bad_request(f"concurrency must be a whole number of at least 1, not {raw!r}", "concurrency")
            report["concurrency"] = int(raw)
            report["tokens_per_s_at"] = self.pace.at(int(raw))
        return report


class ApiHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024  # 64+ clients connecting at once must not overflow the listen backlog

    def __init__(self, address: Tuple[str, int], serving: Serving) -> None:
        self.serving = serving
        super().__init__(address, Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakevllm/" + __version__
    sys_version = ""
    server: ApiHTTPServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # -- routing -------------------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 (http.server's names)
        path, _sep, query = self.path.partition("?")
        serving = self.server.serving
        if not self._authorized(path):
            return
        try:
            if path == "/health":
                ok = serving.is_ready() and not serving.stopping.is_set()
                self.reply_json(200 if ok else 503, b"")
            elif path == "/metrics":
                self.reply(200, serving.metrics.render().encode(), CONTENT_TYPE)
            elif path == "/version":
                self.reply_json(200, dumps({"version": __version__}))
            elif path == "/sim/pace":
                self.reply_json(200, dumps(serving.pace_report(parse_qs(query))))
            elif path == "/sim/faults":
                self.reply_json(200, dumps({"queued": serving.faults.snapshot()}))
            elif path == "/sim/sent":
                self.reply_json(200, dumps({"requests": serving.sent.after(self._after_id(parse_qs(query)))}))
            elif path == "/sim/lora":
                self.reply_json(200, dumps(serving.lora.report()))
            elif path == "/v1/models":
                self._require_ready()
                self.reply_json(200, dumps(self._models()))
            elif path in GENERATION_PATHS:
                self._require_route(path)
                self.reply_json(405, b'{"detail":"Method Not Allowed"}')
            else:
                self.reply_json(404, b'{"detail":"Not Found"}')
        except ApiError as error:
            self.reply_json(error.status, error.body())

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.partition("?")[0]
        try:
            raw = self._read_body()  # read first, so a refused request leaves the connection usable
            if not self._authorized(path):
                return
            if path in GENERATION_PATHS:
                self._require_route(path)
                self._generate(raw, GENERATION_PATHS[path])
            elif path == "/sim/faults":
                self._queue_faults(raw)
            elif path in LORA_PATHS and self.server.serving.lora.runtime:
                self._lora(path, raw)
            elif path in ("/health", "/metrics", "/v1/models", "/sim/pace", "/sim/sent"):
                self.reply_json(405, b'{"detail":"Method Not Allowed"}')
            else:
                self.reply_json(404, b'{"detail":"Not Found"}')
        except ApiError as error:
            self.reply_json(error.status, error.body())

    def do_DELETE(self) -> None:  # noqa: N802
        if not self._authorized(self.path.partition("?")[0]):
            return
        if self.path.partition("?")[0] == "/sim/faults":
            cleared = self.server.serving.faults.clear()
            self.reply_json(200, dumps({"cleared": cleared, "queued": []}))
        else:
            self.reply_json(404, b'{"detail":"Not Found"}')

    def _authorized(self, path: str) -> bool:
        """As vLLM with --api-key or VLLM_API_KEY: /v1/* needs `Authorization: Bearer KEY`, anything else is open.
        Answers 401 and returns False when the header is missing or names no key."""
        keys = self.server.serving.args.api_keys
        if not keys or not path.startswith("/v1"):
            return True
        given = self.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
        if any(hmac.compare_digest(given, ("Bearer " + key).encode("utf-8", "surrogateescape")) for key in keys):
            return True
        self.reply_json(401, b'{"error":"Unauthorized"}')
        return False

    # -- endpoints -----------------------------------------------------------------------------------------

    def _generate(self, raw: bytes, chat: bool) -> None:
        arrival = time.monotonic()
        serving = self.server.serving
        self._require_ready()
        request = parse_generation(raw, chat, serving.args.served_model_names + serving.lora.names(),
                                   serving.args.max_model_len, serving.knobs.natural_len)
        serving.lora.generated(request.model)
        if not serving.engine_takes():  # as vLLM's API server once its EngineCore died: /health still 200, this 500
            log(f"APIServer: vllm.v1.engine.exceptions.EngineDeadError: {ENGINE_DEAD_MESSAGE}", level="ERROR")
            raise ApiError(500, ENGINE_DEAD_MESSAGE, "EngineDeadError")
        fault = serving.faults.take()
        if fault == HTTP_500:
            raise ApiError(500, FAULT_MESSAGE, "InternalServerError")
        Generation(self, request, fault, arrival).run()

    def _lora(self, path: str, raw: bytes) -> None:
        """/v1/load_lora_adapter and /v1/unload_lora_adapter (with VLLM_ALLOW_RUNTIME_LORA_UPDATING only)."""
        self._require_ready()
        lora = self.server.serving.lora
        try:
            fields = request_fields(raw, ("lora_name", "lora_path"))
        except (ValueError, UnicodeDecodeError) as error:
            raise bad_request(f"the request body is not a valid JSON object: {error}") from error
        try:
            said = (lora.load(fields["lora_name"], fields["lora_path"]) if path.endswith("/load_lora_adapter")
                    else lora.unload(fields["lora_name"]))
        except LoraError as error:
            raise ApiError(error.status, error.message, error.err_type) from error
        self.reply(200, said.encode(), "text/plain; charset=utf-8")

    @staticmethod
    def _after_id(query: Dict[str, List[str]]) -> int:
        raw = query.get("after", ["0"])[-1]
        if not raw.isdigit():
            raise bad_request(f"after must be a request id (a whole number), not {raw!r}", "after")
        return int(raw)

    def _queue_faults(self, raw: bytes) -> None:
        faults = self.server.serving.faults
        try:
            faults.extend(parse_faults(json.loads(raw)))
        except (ValueError, FaultError) as error:
            raise bad_request(f"/sim/faults: {error}") from error
        self.reply_json(200, dumps({"queued": faults.snapshot()}))

    def _models(self) -> Dict[str, Any]:
        args = self.server.serving.args
        created = int(time.time())
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "vllm", "root": args.model,
             "parent": None, "max_model_len": args.max_model_len}
            for name in args.served_model_names] + self.server.serving.lora.cards(args.served_model_names[0], created)}

    def _require_route(self, path: str) -> None:
        """A chat-only server (GPUOPS_SIM_CHAT_ONLY) has no /v1/completions: 404 with an OpenAI-style error body."""
        if self.server.serving.knobs.chat_only and not GENERATION_PATHS[path]:
            raise ApiError(404, CHAT_ONLY_MESSAGE, "NotFoundError")

    def _require_ready(self) -> None:
        serving = self.server.serving
        if serving.stopping.is_set():
            raise ApiError(503, "The server is shutting down.", "ServiceUnavailableError")
        if not serving.is_ready():
            raise ApiError(503, "The server is still starting up.", "ServiceUnavailableError")

    # -- plumbing ------------------------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._read_chunked()
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError as error:
            self.close_connection = True
            raise bad_request("invalid Content-Length") from error
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            raise bad_request(f"the request body must be 0 to {MAX_BODY_BYTES} bytes")
        return self.rfile.read(length)

    def _read_chunked(self) -> bytes:
        parts: List[bytes] = []
        size_total = 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError as error:
                self.close_connection = True
                raise bad_request("malformed chunked request body") from error
            size_total += size
            if size_total > MAX_BODY_BYTES:
                self.close_connection = True
                raise bad_request(f"the request body must be at most {MAX_BODY_BYTES} bytes")
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline(1024)

    def reply_json(self, status: int, body: bytes) -> None:
        self.reply(status, body, "application/json")

    def reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *values: object) -> None:  # pylint: disable=redefined-builtin
        print(f"INFO {self.address_string()} pid {os.getpid()} " + format % values, flush=True)


def start_http(serving: Serving, host: str, port: int) -> ApiHTTPServer:
    """Bind host:port now (OSError if taken) and serve from a daemon thread."""
    server = ApiHTTPServer((host, port), serving)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.25}, daemon=True,
                     name="http").start()
    return server


def stop_http(server: ApiHTTPServer) -> None:
    """Cut in-flight requests at once; close the listening socket from a helper thread (never blocks)."""
    server.serving.stop()

    def close() -> None:
        server.shutdown()
        server.server_close()

    threading.Thread(target=close, daemon=True, name="http-stop").start()
