# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server as the benchmark sees it (_bench/server): the metrics URL, its counters and the model list."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.server import Server, ServerError
from ansible_collections.gpuops.fleet.tests.unit.plugins.bench_sse_server import ScriptedServer


def test_metrics_url_forms():
    server = Server("http://127.0.0.1:8000/v1")
    assert server.metrics_url == "http://127.0.0.1:8000/metrics"
    assert Server("http://h:1/p", metrics_url="/vllm/metrics").metrics_url == "http://h:1/p/vllm/metrics"
    assert Server("http://h:1", metrics_url="http://other:9/m").metrics_url == "http://other:9/m"
    assert Server("http://h:1", metrics_url="").metrics_text() is None  # read nothing, not even a connection


def test_models_endpoint_missing():
    with ScriptedServer(models_endpoint=False) as server:
        probe = Server(server.url)
        assert probe.resolve_model("tiny-model") == "tiny-model"
        assert len(probe.warnings) == 1 and "GET /v1/models answered HTTP 404" in probe.warnings[0]
        assert "benchmarking model='tiny-model' as given, unchecked" in probe.warnings[0]
        with pytest.raises(ServerError, match="GET /v1/models answered HTTP 404"):
            Server(server.url).resolve_model(None)  # no model given: /v1/models is needed
    with ScriptedServer() as server:
        with pytest.raises(ServerError, match="model='other' is not served"):
            Server(server.url).resolve_model("other")  # a server that lists models still gets checked
