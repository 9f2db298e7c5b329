# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A replay workload: a timed trace in the Mooncake format, sent on its schedule, prompts sharing its cache blocks.

The file is JSON lines of {"timestamp": ms, "input_length": words, "output_length": tokens, "hash_ids": [int, ...]}
(Mooncake's trace; "hash_ids" may be left out). Timestamps never go back; request i is due (timestamp_i -
timestamp_0) / speedup after the repeat starts.

Prompts: each hash id stands for one block of `block_size` words (Mooncake's blocks are 512 tokens), drawn from the
seed, the phase and the id alone, so two requests whose hash_ids start alike share those blocks word for word, the
prefix a server can cache. A prompt is its blocks in order, cut at input_length words (the last block trimmed); a
prompt longer than its blocks ends in words of its own. Each phase (warm-up, each repeat) draws blocks of its own,
so a repeat finds nothing cached by the one before, and the same seed gives the same prompts in every configuration.

send_slip(): how late the client sent each request against the schedule (its own lateness: the event loop, the
connection, a concurrency cap), apart from the server's answer times.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import math
import random
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.prompts import WORDS, request_body
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import Outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.stats import mean, percentile
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.workload import (
    REPLAY, WorkloadError, WorkloadSpec, json_lines, lengths, line_error, read_text)

MAX_LENGTH = 1024 * 1024
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


class TraceLine(t.NamedTuple):
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: t.Tuple[int, ...]
    line: int


def _length(path: str, line: int, obj: t.Dict[str, t.Any], name: str) -> int:
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LENGTH:
        raise line_error(path, line, "%s %s is not a whole number from 1 to %d" % (name, json.dumps(value), MAX_LENGTH))
    return value


def parse_trace(path: str, text: str) -> t.List[TraceLine]:
    """Every request of the trace, in order; a bad line fails naming it."""
    lines: t.List[TraceLine] = []
    for number, obj in json_lines(path, text):
        if not isinstance(obj, dict):
            raise line_error(path, number, "not a JSON object with %s" % ", ".join(FIELDS))
        stamp = obj.get("timestamp")
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or math.isnan(stamp) or math.isinf(stamp) or stamp < 0:
            raise line_error(path, number, "timestamp %s is not a number of milliseconds (0 or more)" % json.dumps(stamp))
        if lines and stamp < lines[-1].timestamp_ms:
            raise line_error(path, number, "timestamp %s is before the one of line %d (%s): a trace goes forward in time"
                             % (json.dumps(stamp), lines[-1].line, json.dumps(lines[-1].timestamp_ms)))
        hash_ids = obj.get("hash_ids", [])
        if not isinstance(hash_ids, list) or any(isinstance(item, bool) or not isinstance(item, int) for item in hash_ids):
            raise line_error(path, number, "hash_ids %s is not a list of whole numbers" % json.dumps(hash_ids)[:200])
        lines.append(TraceLine(float(stamp), _length(path, number, obj, "input_length"),
                               _length(path, number, obj, "output_length"), tuple(hash_ids), number))
    if not lines:
        raise WorkloadError("workload.file: %r holds no request" % path)
    return lines


class Trace:
    """A trace file read; bodies and arrival offsets of a phase, built as they are sent."""

    kind = REPLAY

    def __init__(self, spec: WorkloadSpec, seed: int) -> None:
        self.file = t.cast(str, spec.file)
        text, self.sha256 = read_text(self.file)
        self.lines = parse_trace(self.file, text)
        self.speedup = spec.speedup
        self.block_size = spec.block_size
        self.seed = seed

    def count(self, cap: t.Optional[int]) -> int:
        """Requests one repeat sends: the whole trace, or its first `cap` lines."""
        return len(self.lines) if cap is None else min(cap, len(self.lines))

    def offsets(self, count: int) -> t.List[float]:
        """Seconds after the start at which each of the first `count` requests is due."""
        first = self.lines[0].timestamp_ms
        return [(line.timestamp_ms - first) / 1000.0 / self.speedup for line in self.lines[:count]]

    def prompts(self, phase: str) -> "TracePrompts":
        return TracePrompts(self, phase)

    def summary(self, requests: int) -> t.Dict[str, t.Any]:
        sent = self.lines[:requests]
        return {"kind": REPLAY, "file": self.file, "sha256": self.sha256, "requests": requests,
                "prompt_len": lengths([line.input_length for line in sent]),
                "output_len": lengths([line.output_length for line in sent])}


class TracePrompts:
    """The prompts of one phase: blocks drawn per hash id from the seed and the phase, kept while the phase runs."""

    def __init__(self, trace: Trace, phase: str) -> None:
        self.trace = trace
        self.phase = phase
        self.blocks: t.Dict[int, t.List[str]] = {}

    def block(self, hash_id: int) -> t.List[str]:
        words = self.blocks.get(hash_id)
        if words is None:
            rng = random.Random("%d/%s/block/%d" % (self.trace.seed, self.phase, hash_id))
            words = self.blocks[hash_id] = [rng.choice(WORDS) for _word in range(self.trace.block_size)]
        return words

    def prompt(self, index: int) -> str:
        line = self.trace.lines[index]
        words: t.List[str] = []
        for hash_id in line.hash_ids:
            if len(words) >= line.input_length:
                break
            words.extend(self.block(hash_id))
        del words[line.input_length:]
        if len(words) < line.input_length:
            rng = random.Random("%d/%s/request/%d" % (self.trace.seed, self.phase, index))
            words.extend(rng.choice(WORDS) for _word in range(line.input_length - len(words)))
        return " ".join(words)

    def body(self, index: int, endpoint: str, model: str, ignore_eos: bool) -> bytes:
        return request_body(endpoint, model, self.prompt(index), self.trace.lines[index].output_length, ignore_eos)


def send_slip(outcomes: t.Sequence[Outcome]) -> t.Optional[t.Dict[str, float]]:
    """How late each request was sent against its schedule (the moment its bytes went out, its connection made, minus
    its due time), in milliseconds: mean, p50, p90, p99 and max over the requests sent; None when none was."""
    slips = sorted((outcome.start - outcome.arrival) * 1000.0 for outcome in outcomes if outcome.start)
    if not slips:
        return None
    return {"mean": mean(slips), "p50": percentile(slips, 50, presorted=True), "p90": percentile(slips, 90, presorted=True),
            "p99": percentile(slips, 99, presorted=True), "max": slips[-1]}
