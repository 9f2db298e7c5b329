# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A whole benchmark: resolve the model, then for each level of a sweep (one level without) warm up, run each
repeat, cross-check with the server's counter; the knee of a sweep.

Each repeat sends the workload's requests (workload.py): synthetic prompts, a dataset's, a trace on its schedule
(with each request's send slip), or multi-turn sessions (with figures per turn). With the endpoint left unset, a
server whose /v1/completions answers the first warm-up request (without a warm-up, the first repeat's first request,
and the repeat is sent again) with HTTP 404 is measured through chat instead.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import random
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.client import Client, OpenArrivals, arrival_offsets
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.goodput import GOODPUT_FIGURES, goodput
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import IN_FLIGHT, Outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.metrics import aggregate, headline, run_metrics
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.prompts import prompt_words, request_bodies, request_body
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.save import vllm_result, write_results
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.server import ENDPOINT_PATHS, GENERATION_TOKENS, Server
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.server_view import Phase, prefix_figures
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.sessions import per_turn
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.spec import MAX_REQUESTS, BenchSpec
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.sse import CHAT
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.trace import send_slip
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.workload import DATASET, REPLAY, SESSIONS

# The server's counter may lag the last chunk a little: read it again while it still moves.
COUNTER_SETTLE_READS = 5
COUNTER_SETTLE_S = 0.2
# The figure a sweep's knee is judged by: the decode rate of one stream (median across repeats)
KNEE_FIGURE = "decode_tok_s"
# A replay sent this late (p99 of the send slip, ms) says the client, not the server, set the pace
SLIP_WARNING_MS = 50.0
# What a level (and the top level, for the first one) has of its workload's figures, over all its repeats
LEVEL_WORKLOAD_FIGURES = ("per_turn", "schedule_slip_ms", "prefix_cache")


class BenchmarkFailed(Exception):
    """Nothing could be measured; `result` holds what was gathered (runs, warmup) for the report."""

    def __init__(self, message: str, result: t.Dict[str, t.Any]) -> None:
        super().__init__(message)
        self.result = result


class Benchmark:
    def __init__(self, spec: BenchSpec, server: t.Optional[Server] = None) -> None:
        self.spec = spec
        self.server = server or Server(spec.url, spec.api_key, spec.validate_certs, timeout=min(spec.timeout, 30.0),
                                       metrics_url=spec.metrics_url)
        self.warnings: t.List[str] = []
        self.notes: t.List[str] = []
        self.endpoint = spec.endpoint  # chat after a fallback
        self.fallback_open = spec.endpoint_fallback  # until the first answer from /v1/completions says whether it exists
        self.endpoint_fallback: t.Optional[str] = None

    def client(self) -> Client:
        return Client(self.server.target(self.endpoint), self.endpoint, self.spec.timeout,
                      keep_text=self.spec.kind == SESSIONS)

    def run(self) -> t.Dict[str, t.Any]:
        """Every level of the sweep; the top-level metrics, runs and warmup are those of the first level."""
        spec = self.spec
        model = self.server.resolve_model(spec.model)
        self.warnings.extend(self.server.warnings)
        result: t.Dict[str, t.Any] = {"url": spec.url, "model": model, "endpoint": spec.endpoint, "warmup": None,
                                      "runs": [], "metrics": {}, "sweep": [], "knee": None,
                                      "metrics_url": self.server.metrics_url, "notes": self.notes,
                                      "workload": spec.workload.summary(spec.num_requests), "endpoint_fallback": None}
        if not self.server.metrics_url:
            self.notes.append("metrics_url is empty: the server's metrics were not read, so its count of generated tokens "
                              "is not compared with the client's (server_generation_tokens is null)")
        option = spec.sweep_option
        for number, level_spec in enumerate(spec.levels()):
            level = self._level(level_spec, model, number, result)
            result["sweep"].append(level)
            if number == 0:
                result.update(warmup=level["warmup"], runs=level["runs"], metrics=level["metrics"])
                result.update({key: level[key] for key in LEVEL_WORKLOAD_FIGURES if key in level})
        result["workload"] = spec.workload.summary(spec.num_requests)  # a sessions workload knows its prompts now
        if option:
            result["knee"] = find_knee(option, [(_level_value(level[option]), (level["metrics"].get(KNEE_FIGURE) or {}).get("median"))
                                                for level in result["sweep"]], spec.knee_tolerance)
        if spec.save_result:
            try:
                write_results(spec.save_result, [
                    vllm_result(run, endpoint=self.endpoint, model=model,
                                num_requests=spec.num_requests or run["completed"] + run["failed"] + run["in_flight_at_end"],
                                request_rate=level_spec.request_rate, concurrency=level_spec.concurrency or None,
                                percentiles=spec.percentiles, goodput=spec.goodput)
                    for level_spec, level in zip(spec.levels(), result["sweep"]) for run in level["runs"]])
            except OSError as exc:
                raise BenchmarkFailed("save_result: %r cannot be written: %s" % (spec.save_result, exc), result) from None
            result["save_result"] = spec.save_result
        if not any(run["completed"] for level in result["sweep"] for run in level["runs"]):
            raise BenchmarkFailed("no request completed in any repeat: %s" % "; ".join(
                "%srepeat %d: %s" % (self._prefix(level_spec), run["repeat"], _reasons_text(run))
                for level_spec, level in zip(spec.levels(), result["sweep"]) for run in level["runs"]), result)
        return result

    def _prefix(self, spec: BenchSpec) -> str:
        """How warnings name a level of a sweep ('' without a sweep)."""
        option = self.spec.sweep_option
        return "%s %s: " % (option, _level_value(getattr(spec, option))) if option else ""

    def _level(self, spec: BenchSpec, model: str, number: int, result: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
        """One level: warmup and repeats at its concurrency and request rate, in today's result shape."""
        prefix = self._prefix(spec)
        phase = "" if number == 0 else "level%d/" % number  # each level draws prompts of its own (no cached prefix)
        level: t.Dict[str, t.Any] = {"concurrency": spec.concurrency or None, "request_rate": _level_value(spec.request_rate),
                                     "warmup": None, "runs": [], "metrics": {}}
        if spec.duration is None and spec.kind != SESSIONS and t.cast(int, spec.num_requests) < spec.concurrency:
            self.warnings.append("%sconcurrency %d is more than num_requests %d: at most %d requests are ever in flight"
                                 % (prefix, spec.concurrency, spec.num_requests, spec.num_requests))
        counter = self.server.generation_tokens(model)
        if counter is None and number == 0 and self.server.metrics_url:
            self.warnings.append("the server offers no %s at %s: the token cross-check is skipped"
                                 % (GENERATION_TOKENS, self.server.metrics_url))
        warmup = self._warmup(spec, model, phase + "warmup") if spec.warmup_requests else None
        result.update(endpoint=self.endpoint, endpoint_fallback=self.endpoint_fallback)
        if warmup is not None:
            counter = self._cross_check(prefix + "warmup", warmup, counter, model)
            level["warmup"] = warmup
            if not warmup["completed"]:
                message = "every warmup request failed, so the server cannot be benchmarked as asked: %s" % _reasons_text(warmup)
                if not self.spec.sweep_option:
                    result["warmup"] = warmup
                    raise BenchmarkFailed(message, result)
                self.warnings.append("%s%s; this level has no repeats" % (prefix, message))
                level["metrics"] = aggregate([], headline(spec.percentiles))
                return level
        sent: t.List[Outcome] = []  # every repeat's requests, for the level's workload figures
        for repeat in range(1, spec.repeats + 1):
            view = Phase(self.server.metrics_text, model, spec.percentiles) if self.server.metrics_url else None
            args = (spec, model, "%srepeat%d" % (phase, repeat), "%d/arrivals/%s%d" % (spec.seed, phase, repeat),
                    number == 0 and repeat == 1)
            outcomes, duration, requested = self._repeat(*args)
            if self.fallback_open:
                # no warm-up: the first repeat's first request tells whether /v1/completions exists
                self.fallback_open = False
                if outcomes and outcomes[0].http_status == 404:
                    self._fall_back_to_chat(outcomes[0].error)
                    result.update(endpoint=self.endpoint, endpoint_fallback=self.endpoint_fallback)
                    if view is not None:
                        view.finish()
                        view = Phase(self.server.metrics_text, model, spec.percentiles)
                    outcomes, duration, requested = self._repeat(*args)
            metrics = self._figures(outcomes, duration)
            metrics["repeat"] = repeat
            metrics["server"] = view.finish(metrics["completed"], metrics.get("mean_ttft_ms")) if view else None
            metrics["prefix_cache"] = view.prefix_cache if view else None
            if spec.kind == REPLAY:
                metrics["schedule_slip_ms"] = send_slip(outcomes)
            if spec.kind == SESSIONS:
                metrics["per_turn"] = per_turn(outcomes, spec.workload.turns)
            sent.extend(outcomes)
            counter = self._cross_check("%srepeat %d" % (prefix, repeat), metrics, counter, model)
            expected = sum(requested(outcome.index) for outcome in outcomes if outcome.success)
            self._warn_about_run("%srepeat %d" % (prefix, repeat), metrics, expected)
            level["runs"].append(metrics)
        names = headline(spec.percentiles) + ("in_flight_at_end",) + (GOODPUT_FIGURES if spec.goodput else ())
        level["metrics"] = aggregate([run for run in level["runs"] if run["completed"]], names)
        if spec.kind == SESSIONS:
            level["per_turn"] = per_turn(sent, spec.workload.turns)
        if spec.kind == REPLAY:
            level["schedule_slip_ms"] = send_slip(sent)
        level["prefix_cache"] = total_prefix_cache([run["prefix_cache"] for run in level["runs"]])
        return level

    def _warmup(self, spec: BenchSpec, model: str, phase: str) -> t.Dict[str, t.Any]:
        """The warm-up, all at once (up to the concurrency); with the endpoint left unset, through chat when its first
        request finds no /v1/completions (HTTP 404)."""
        count = spec.warmup_requests
        outcomes, duration = self.client().run(self._warmup_bodies(model, count, phase), spec.concurrency or count,
                                               [0.0] * count)
        if self.fallback_open:
            self.fallback_open = False
            if outcomes and outcomes[0].http_status == 404:
                self._fall_back_to_chat(outcomes[0].error)
                outcomes, duration = self.client().run(self._warmup_bodies(model, count, phase), spec.concurrency or count,
                                                       [0.0] * count)
        return _phase_summary(outcomes, duration)

    def _figures(self, outcomes: t.Sequence[Outcome], duration: float) -> t.Dict[str, t.Any]:
        """One repeat's figures: requests in flight at the end of a time-bounded run are counted apart, in no other figure
        (their tokens still count in client_generation_tokens, for the cross-check)."""
        spec = self.spec
        ended = [outcome for outcome in outcomes if outcome.reason != IN_FLIGHT]
        metrics = run_metrics(ended, duration, spec.percentiles)
        metrics["in_flight_at_end"] = len(outcomes) - len(ended)
        metrics["client_tokens_seen"] = sum(outcome.tokens_seen for outcome in outcomes)
        if spec.goodput:
            metrics.update(goodput(ended, spec.goodput, duration))
        return metrics

    def _repeat(self, spec: BenchSpec, model: str, phase: str, arrivals_seed: str,
                first: bool) -> t.Tuple[t.List[Outcome], float, t.Callable[[int], int]]:
        """Send one repeat of the workload: its outcomes, its duration and the output tokens each request asked for
        (by its index)."""
        workload = spec.workload
        endpoint, ignore_eos = self.endpoint, spec.ignore_eos
        client = self.client()
        cap = spec.num_requests or MAX_REQUESTS
        if spec.kind == REPLAY:
            count = workload.count(spec.num_requests)
            prompts = workload.prompts(phase)
            bodies: t.Sequence[bytes] = _LazyBodies(lambda index: prompts.body(index, endpoint, model, ignore_eos), count)
            outcomes, duration = client.run_schedule(bodies, workload.offsets(count), spec.concurrency or None, spec.duration)
            return outcomes, duration, lambda index: workload.lines[index].output_length
        if spec.kind == SESSIONS:
            conversations = workload.conversations(phase)
            outcomes, duration = client.run_sessions(
                workload.sessions, workload.turns, spec.concurrency, workload.think_time,
                lambda session: conversations.conversation(session, endpoint, model, ignore_eos), spec.duration)
            if first:
                workload.prompt_words = conversations.prompt_words
            return outcomes, duration, lambda index: spec.output_len
        if spec.duration is None:
            count = t.cast(int, spec.num_requests)
            offsets: t.Sequence[float] = arrival_offsets(count, spec.request_rate, random.Random(arrivals_seed))
        else:
            offsets = OpenArrivals(spec.request_rate, random.Random(arrivals_seed), cap)
        if spec.kind == DATASET:
            # the same requests in the same order in every repeat and level: the dataset's order from the seed
            if spec.duration is None:
                bodies = [workload.body(workload.entry(index), endpoint, model, ignore_eos) for index in range(count)]
            else:
                bodies = _LazyBodies(lambda index: workload.body(workload.entry(index), endpoint, model, ignore_eos), cap)
            outcomes, duration = client.run(bodies, spec.concurrency, offsets, spec.duration)
            return outcomes, duration, lambda index: workload.output_len(workload.entry(index))
        if spec.duration is None:
            bodies = self._bodies(model, count, phase)
        else:
            bodies = _OpenBodies(spec, model, phase, cap, endpoint)
        outcomes, duration = client.run(bodies, spec.concurrency, offsets, spec.duration)
        return outcomes, duration, lambda index: spec.output_len

    def _warmup_bodies(self, model: str, count: int, phase: str) -> t.List[bytes]:
        """The warm-up's requests, of the workload's kind, none of them one a repeat sends."""
        spec = self.spec
        workload = spec.workload
        endpoint, ignore_eos = self.endpoint, spec.ignore_eos
        if spec.kind == DATASET:
            return [workload.body(workload.warmup_entry(index), endpoint, model, ignore_eos) for index in range(count)]
        if spec.kind == REPLAY:
            prompts = workload.prompts(phase)
            return [prompts.body(index % len(workload.lines), endpoint, model, ignore_eos) for index in range(count)]
        if spec.kind == SESSIONS:
            conversations = workload.conversations(phase)
            return [conversations.body(index, [], endpoint, model, ignore_eos) for index in range(count)]
        return self._bodies(model, count, phase)

    def _bodies(self, model: str, count: int, phase: str) -> t.List[bytes]:
        spec = self.spec
        return request_bodies(self.endpoint, model, count, spec.input_len, spec.output_len, spec.ignore_eos, spec.seed, phase)

    def _fall_back_to_chat(self, error: str) -> None:
        self.endpoint = CHAT
        self.endpoint_fallback = (
            "%s answered %s, and endpoint was not set: the benchmark went through %s instead"
            % (ENDPOINT_PATHS["completions"], error[:200], ENDPOINT_PATHS[CHAT]))
        self.warnings.append(self.endpoint_fallback)

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
                "server, or tokens that never reached the client (failed requests%s)"
                % (phase, served, GENERATION_TOKENS, client_tokens, served - client_tokens,
                   ", requests closed at the end of the duration" if figures.get("in_flight_at_end") else ""))
        return after

    def _warn_about_run(self, phase: str, metrics: t.Dict[str, t.Any], expected: int) -> None:
        spec = self.spec
        if metrics["failed"]:
            self.warnings.append("%s: %d of %d requests failed (%s)"
                                 % (phase, metrics["failed"], metrics["completed"] + metrics["failed"], _reasons_text(metrics)))
        if metrics["approximate_token_count"]:
            self.warnings.append("%s: the server sent no usage for %d requests; their output tokens are counted "
                                 "as content chunks, which undercounts when a chunk carries several tokens"
                                 % (phase, metrics["approximate_requests"]))
        if spec.ignore_eos and metrics["completed"] and metrics["total_output_tokens"] != expected:
            self.warnings.append("%s: %d output tokens where ignore_eos and the requests' output lengths ask for %d"
                                 % (phase, metrics["total_output_tokens"], expected))
        slip = metrics.get("schedule_slip_ms")
        if slip and slip["p99"] > SLIP_WARNING_MS:
            self.warnings.append("%s: the client sent requests late against the trace's schedule (p99 %.1f ms, max %.1f ms): "
                                 "the replay's pace is the client's, not the server's; lower workload.speedup or raise "
                                 "concurrency" % (phase, slip["p99"], slip["max"]))


class _OpenBodies:
    """Request bodies made one at a time as a time-bounded run sends them (how many is not known in advance),
    the same ones request_bodies makes for the phase, without keeping them."""

    def __init__(self, spec: BenchSpec, model: str, phase: str, cap: int, endpoint: t.Optional[str] = None) -> None:
        self.spec = spec
        self.endpoint = endpoint or spec.endpoint
        self.model = model
        self.rng = random.Random("%d/%s" % (spec.seed, phase))
        self.cap = cap
        self.next = 0

    def __len__(self) -> int:
        return self.cap

    def __getitem__(self, index: int) -> bytes:
        spec = self.spec
        if index < self.next:
            raise IndexError("request %d was made already" % index)
        while True:
            prompt = prompt_words(spec.input_len, self.rng)
            self.next += 1
            if self.next > index:
                return request_body(self.endpoint, self.model, prompt, spec.output_len, spec.ignore_eos)


class _LazyBodies:
    """`count` request bodies, each made when the client asks for it (a trace's prompts, or an open run's)."""

    def __init__(self, make: t.Callable[[int], bytes], count: int) -> None:
        self.make = make
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> bytes:
        if not 0 <= index < self.count:
            raise IndexError(index)
        return self.make(index)


def _level_value(value: float) -> t.Union[float, str]:
    """A level as results show it: an infinite request rate (all at once) is 'inf', as vllm bench serve writes it."""
    return "inf" if value == float("inf") else value


def find_knee(option: str, levels: t.Sequence[t.Tuple[t.Any, t.Optional[float]]], tolerance_pct: float) -> t.Dict[str, t.Any]:
    """The knee of a sweep: going up from the lowest level, the last level whose decode rate per stream is within
    tolerance_pct of the lowest level's, before the first that is not (or has none). `levels` are (level, figure)."""
    def order(item: t.Tuple[t.Any, t.Optional[float]]) -> float:
        return float("inf") if item[0] == "inf" else float(item[0])

    ordered = sorted(levels, key=order)
    reference_level, reference = ordered[0]
    knee: t.Dict[str, t.Any] = {
        "option": option, "tolerance_pct": tolerance_pct, "figure": KNEE_FIGURE,
        "reference_level": reference_level, "reference_value": reference,
        "level": None, "value": None, "next_level": None, "next_value": None,
    }
    if reference is None:
        return knee
    floor = reference * (1 - tolerance_pct / 100.0)
    for level, value in ordered:
        if value is None or value < floor:
            knee.update(next_level=level, next_value=value)
            break
        knee.update(level=level, value=value)
    return knee


def total_prefix_cache(repeats: t.Sequence[t.Optional[t.Dict[str, t.Any]]]) -> t.Optional[t.Dict[str, t.Any]]:
    """The prefix-cache lookups of several repeats together; None when a repeat has none (the server did not count)."""
    if not repeats or any(figures is None for figures in repeats):
        return None
    return prefix_figures(sum(t.cast(t.Dict[str, t.Any], figures)["queries"] for figures in repeats),
                          sum(t.cast(t.Dict[str, t.Any], figures)["hits"] for figures in repeats))


def _phase_summary(outcomes: t.Sequence[Outcome], duration: float) -> t.Dict[str, t.Any]:
    metrics = run_metrics(outcomes, duration, ())
    keys = ("completed", "failed", "duration", "total_output_tokens", "failed_by_reason", "errors", "client_tokens_seen")
    return {key: metrics[key] for key in keys}


def _reasons_text(figures: t.Dict[str, t.Any]) -> str:
    reasons = ", ".join("%s: %d" % item for item in sorted(figures["failed_by_reason"].items()))
    first = figures["errors"][0]["error"] if figures.get("errors") else ""
    return "%s%s" % (reasons, "; first error: %s" % first if first else "")
