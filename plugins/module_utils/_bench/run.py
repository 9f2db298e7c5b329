# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A whole benchmark: resolve the model, warm up, run each repeat, cross-check with the server's counter.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils and
its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import random
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.client import Client, arrival_offsets
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import Outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.metrics import aggregate, run_metrics
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.prompts import request_bodies
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.save import vllm_result, write_results
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.server import GENERATION_TOKENS, Server
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.spec import BenchSpec

# The server's counter may lag the last chunk a little: read it again while it still moves.
COUNTER_SETTLE_READS = 5
COUNTER_SETTLE_S = 0.2


class BenchmarkFailed(Exception):
    """Nothing could be measured; `result` holds what was gathered (runs, warmup) for the report."""

    def __init__(self, message: str, result: t.Dict[str, t.Any]) -> None:
        super().__init__(message)
        self.result = result


class Benchmark:
    def __init__(self, spec: BenchSpec, server: t.Optional[Server] = None) -> None:
        self.spec = spec
        self.server = server or Server(spec.url, spec.api_key, spec.validate_certs, timeout=min(spec.timeout, 30.0))
        self.warnings: t.List[str] = []

    def run(self) -> t.Dict[str, t.Any]:
        spec = self.spec
        model = self.server.resolve_model(spec.model)
        client = Client(self.server.target(spec.endpoint), spec.endpoint, spec.timeout)
        counter = self.server.generation_tokens(model)
        if counter is None:
            self.warnings.append("the server offers no %s at %s/metrics: the token cross-check is skipped"
                                 % (GENERATION_TOKENS, self.server.base))
        result: t.Dict[str, t.Any] = {"url": spec.url, "model": model, "endpoint": spec.endpoint, "warmup": None,
                                      "runs": [], "metrics": {}}
        if spec.warmup_requests:
            bodies = self._bodies(model, spec.warmup_requests, "warmup")
            outcomes, duration = client.run(bodies, spec.concurrency, [0.0] * len(bodies))
            warmup = _phase_summary(outcomes, duration)
            counter = self._cross_check("warmup", warmup, counter, model)
            result["warmup"] = warmup
            if not warmup["completed"]:
                raise BenchmarkFailed("every warmup request failed, so the server cannot be benchmarked as asked: %s"
                                      % _reasons_text(warmup), result)
        for repeat in range(1, spec.repeats + 1):
            bodies = self._bodies(model, spec.num_requests, "repeat%d" % repeat)
            offsets = arrival_offsets(len(bodies), spec.request_rate, random.Random("%d/arrivals/%d" % (spec.seed, repeat)))
            outcomes, duration = client.run(bodies, spec.concurrency, offsets)
            metrics = run_metrics(outcomes, duration)
            metrics["repeat"] = repeat
            counter = self._cross_check("repeat %d" % repeat, metrics, counter, model)
            self._warn_about_run(repeat, metrics)
            result["runs"].append(metrics)
        result["metrics"] = aggregate([run for run in result["runs"] if run["completed"]])
        if spec.save_result:
            try:
                write_results(spec.save_result, [
                    vllm_result(run, endpoint=spec.endpoint, model=model, num_requests=spec.num_requests,
                                request_rate=spec.request_rate, concurrency=spec.concurrency)
                    for run in result["runs"]])
            except OSError as exc:
                raise BenchmarkFailed("save_result: %r cannot be written: %s" % (spec.save_result, exc), result) from None
            result["save_result"] = spec.save_result
        if not any(run["completed"] for run in result["runs"]):
            raise BenchmarkFailed("no request completed in any repeat: %s"
                                  % "; ".join("repeat %d: %s" % (run["repeat"], _reasons_text(run)) for run in result["runs"]),
                                  result)
        return result

    def _bodies(self, model: str, count: int, phase: str) -> t.List[bytes]:
        spec = self.spec
        return request_bodies(spec.endpoint, model, count, spec.input_len, spec.output_len, spec.ignore_eos, spec.seed, phase)

    def _cross_check(self, phase: str, figures: t.Dict[str, t.Any], before: t.Optional[float],
                     model: str) -> t.Optional[float]:
        """Put the server's generated-token count over the phase next to the client's; warn on a mismatch."""
        client_tokens = figures["client_tokens_seen"]
        figures["client_generation_tokens"] = client_tokens
        figures["server_generation_tokens"] = None
        if before is None:
            return None
        after = self.server.generation_tokens(model)
        for _read in range(COUNTER_SETTLE_READS):
            if after is None or after - before == client_tokens:
                break
            time.sleep(COUNTER_SETTLE_S)
            again = self.server.generation_tokens(model)
            if again == after:
                break
            after = again
        if after is None:
            return None
        served = after - before
        figures["server_generation_tokens"] = int(served) if served == int(served) else served
        if served != client_tokens:
            self.warnings.append(
                "%s: the server counted %d generated tokens (%s), the client saw %d (%+d): other traffic on the "
                "server, or tokens that never reached the client (failed requests)"
                % (phase, served, GENERATION_TOKENS, client_tokens, served - client_tokens))
        return after

    def _warn_about_run(self, repeat: int, metrics: t.Dict[str, t.Any]) -> None:
        spec = self.spec
        if metrics["failed"]:
            self.warnings.append("repeat %d: %d of %d requests failed (%s)"
                                 % (repeat, metrics["failed"], spec.num_requests, _reasons_text(metrics)))
        if metrics["approximate_token_count"]:
            self.warnings.append("repeat %d: the server sent no usage for %d requests; their output tokens are counted "
                                 "as content chunks, which undercounts when a chunk carries several tokens"
                                 % (repeat, metrics["approximate_requests"]))
        expected = spec.output_len * metrics["completed"]
        if spec.ignore_eos and metrics["completed"] and metrics["total_output_tokens"] != expected:
            self.warnings.append("repeat %d: %d output tokens where ignore_eos and output_len=%d ask for %d"
                                 % (repeat, metrics["total_output_tokens"], spec.output_len, expected))


def _phase_summary(outcomes: t.Sequence[Outcome], duration: float) -> t.Dict[str, t.Any]:
    metrics = run_metrics(outcomes, duration)
    keys = ("completed", "failed", "duration", "total_output_tokens", "failed_by_reason", "errors", "client_tokens_seen")
    return {key: metrics[key] for key in keys}


def _reasons_text(figures: t.Dict[str, t.Any]) -> str:
    reasons = ", ".join("%s: %d" % item for item in sorted(figures["failed_by_reason"].items()))
    first = figures["errors"][0]["error"] if figures.get("errors") else ""
    return "%s%s" % (reasons, "; first error: %s" % first if first else "")
