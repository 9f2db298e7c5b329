# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The server side of a benchmark, outside the timed runs: its URL, its models, its Prometheus counters.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import typing as t
from urllib.parse import urlsplit

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import Target
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.sse import CHAT
from ansible_collections.gpuops.fleet.plugins.module_utils._http.prometheus import total
from ansible_collections.gpuops.fleet.plugins.module_utils._http.request import http_get

ENDPOINT_PATHS = {"completions": "/v1/completions", CHAT: "/v1/chat/completions"}
GENERATION_TOKENS = "vllm:generation_tokens_total"


class ServerError(Exception):
    """The server cannot be benchmarked as asked (unreachable, model not served, bad URL)."""


class Unreachable(ServerError):
    """No HTTP answer at all (refused, no route, TLS failure, timeout)."""


class Server:
    """One OpenAI-compatible server, by base URL (http(s)://host:port, optionally with a path prefix)."""

    def __init__(self, url: str, api_key: t.Optional[str] = None, validate_certs: bool = True,
                 timeout: float = 30.0, metrics_url: t.Optional[str] = None) -> None:
        self.url = url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ServerError("url=%r: the scheme must be http or https" % url)
        if not parts.hostname:
            raise ServerError("url=%r: no host name" % url)
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise ServerError("url=%r: %s" % (url, exc)) from None
        if parts.query or parts.fragment:
            raise ServerError("url=%r: a base URL takes no query or fragment" % url)
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):
            prefix = prefix[:-3]
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = port
        self.prefix = prefix
        self.base = "%s://%s%s" % (parts.scheme, parts.netloc, prefix)
        self.api_key = api_key
        self.validate_certs = validate_certs
        self.timeout = timeout
        self.warnings: t.List[str] = []
        # Where the Prometheus text is read: <base>/metrics by default, a path under the base, another URL, or
        # '' for none at all (metrics_text() is then None and every cross-check is skipped)
        if metrics_url is None:
            metrics_url = "/metrics"
        self.metrics_url = self.base + metrics_url if metrics_url.startswith("/") else metrics_url

    def target(self, endpoint: str) -> Target:
        return Target(self.scheme, self.host, self.port, self.prefix + ENDPOINT_PATHS[endpoint], self.api_key,
                      self.validate_certs)

    def get(self, path: str) -> t.Tuple[int, str]:
        """GET base+path, or the URL itself when `path` is a whole URL; (status, body). Raises ServerError when no
        HTTP answer comes at all."""
        url = path if "://" in path else self.base + path
        headers = {"User-Agent": "gpuops.fleet-vllm_benchmark"}
        if self.api_key:
            headers["Authorization"] = "Bearer %s" % self.api_key
        reply = http_get(url, self.timeout, headers, validate_certs=self.validate_certs)
        if reply.status is None:
            raise Unreachable("url=%r: cannot reach %s: %s" % (self.url, url, reply.error))
        return reply.status, reply.body

    def models(self) -> t.List[str]:
        """The model ids the server lists at /v1/models."""
        status, body = self.get("/v1/models")
        if status != 200:
            raise ServerError("url=%r: GET /v1/models answered HTTP %d: %s" % (self.url, status, body[:300]))
        try:
            data = json.loads(body)
            return [str(entry["id"]) for entry in data["data"]]
        except (ValueError, KeyError, TypeError):
            raise ServerError("url=%r: /v1/models is not an OpenAI model list: %r" % (self.url, body[:300])) from None

    def resolve_model(self, model: t.Optional[str]) -> str:
        """The model to benchmark: as given (it must be listed when the server lists models), or the first one listed.
        With a model given, a server without a usable /v1/models (HTTP 404, not a model list) is used anyway, with a
        warning in self.warnings; one that does not answer at all is an error either way."""
        try:
            served = self.models()
        except ServerError as exc:
            if model is None or isinstance(exc, Unreachable):
                raise
            self.warnings.append("%s; benchmarking model=%r as given, unchecked" % (exc, model))
            return model
        if model is None:
            if not served:
                raise ServerError("url=%r: the server lists no model at /v1/models; set model" % self.url)
            return served[0]
        if model not in served:
            raise ServerError("model=%r is not served at url=%r; the server lists: %s" % (model, self.url, ", ".join(served) or "none"))
        return model

    def metrics_text(self) -> t.Optional[str]:
        """The Prometheus text at metrics_url; None when it is '' or does not answer HTTP 200."""
        if not self.metrics_url:
            return None
        try:
            status, body = self.get(self.metrics_url)
        except ServerError:
            return None
        if status != 200:
            return None
        return body

    def generation_tokens(self, model: str) -> t.Optional[float]:
        """The server's vllm:generation_tokens_total for the model (None when the metrics do not offer it)."""
        text = self.metrics_text()
        return None if text is None else total(text, GENERATION_TOKENS, model)
