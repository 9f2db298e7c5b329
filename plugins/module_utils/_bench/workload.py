# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What a benchmark sends: the `workload` option checked, and what every kind of workload shares.

- synthetic (the default): O(input_len) random words per prompt, O(output_len) tokens (prompts.py).
- dataset: prompts or chat messages read from a file (dataset.py).
- replay: a timed trace, sent on its schedule, prompts sharing the trace's cache blocks (trace.py).
- sessions: multi-turn conversations, each turn appending the previous answer (sessions.py).

WorkloadSpec is the option checked (no file read); the kinds' loaders read their file and fail, naming the file and
the line, before any request. `lengths()` is the distribution the result reports for prompt and output lengths.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.stats import percentile

SYNTHETIC = "synthetic"
DATASET = "dataset"
REPLAY = "replay"
SESSIONS = "sessions"
KINDS = (SYNTHETIC, DATASET, REPLAY, SESSIONS)
FORMATS = ("auto", "jsonl", "sharegpt")
MAX_WORDS = 1024 * 1024
MAX_SESSIONS = 100000
MAX_TURNS = 1000
MAX_THINK_S = 3600.0
MAX_SPEEDUP = 1e6

# Each suboption of `workload`, its default, and the kinds it belongs to (another kind refuses it).
OPTIONS: t.Dict[str, t.Tuple[t.Any, t.Tuple[str, ...]]] = {
    "kind": (SYNTHETIC, KINDS),
    "file": (None, (DATASET, REPLAY)),
    "format": ("auto", (DATASET,)),
    "min_prompt_len": (None, (DATASET,)),
    "max_prompt_len": (None, (DATASET,)),
    "speedup": (1.0, (REPLAY,)),
    "block_size": (512, (REPLAY,)),
    "sessions": (8, (SESSIONS,)),
    "turns": (4, (SESSIONS,)),
    "think_time": (0.0, (SESSIONS,)),
}
# The module's argument spec of `workload` (no defaults there: a suboption given for another kind is refused)
OPTION_TYPES = {"kind": "str", "file": "path", "format": "str", "min_prompt_len": "int", "max_prompt_len": "int",
                "speedup": "float", "block_size": "int", "sessions": "int", "turns": "int", "think_time": "float"}


class WorkloadSpec(t.NamedTuple):
    """The `workload` option, checked; the defaults filled in for its kind."""
    kind: str = SYNTHETIC
    file: t.Optional[str] = None
    format: str = "auto"
    min_prompt_len: t.Optional[int] = None
    max_prompt_len: t.Optional[int] = None
    speedup: float = 1.0
    block_size: int = 512
    sessions: int = 8
    turns: int = 4
    think_time: float = 0.0


class WorkloadError(SpecError):
    """A workload file that cannot be used; the message names the option, the file and the line."""


def whole(option: str, value: t.Any, lower: int, upper: int, unit: str) -> int:
    """`value` when it is a whole number from `lower` to `upper`; else SpecError naming the option and the value."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError("%s: %r is not a whole number of %s" % (option, value, unit))
    if not lower <= value <= upper:
        raise SpecError("%s: %r is out of range: give %d to %d %s" % (option, value, lower, upper, unit))
    return value


def _whole(option: str, value: t.Any, lower: int, upper: int, unit: str) -> int:
    return whole("workload." + option, value, lower, upper, unit)


def _number(option: str, value: t.Any, lower: float, upper: float, unit: str, strict: bool) -> float:
    try:
        number = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        number = float("nan")
    if math.isnan(number) or math.isinf(number) or number < lower or (strict and number == lower) or number > upper:
        raise SpecError("workload.%s: %r must be a %s number of %s, at most %g" % (
            option, value, "positive" if strict else "non-negative", unit, upper))
    return number


def workload_spec(value: t.Any) -> WorkloadSpec:
    """The `workload` option checked (its file is not read here); None is the synthetic default."""
    if value is None:
        return WorkloadSpec()
    if not isinstance(value, dict):
        raise SpecError("workload: %r is not a dict; give at least kind (%s)" % (value, ", ".join(KINDS)))
    unknown = sorted(str(key) for key in value if key not in OPTIONS)
    if unknown:
        raise SpecError("workload: unknown key %s; the keys are %s" % (", ".join(repr(key) for key in unknown), ", ".join(OPTIONS)))
    kind = value.get("kind") if value.get("kind") is not None else SYNTHETIC
    if kind not in KINDS:
        raise SpecError("workload.kind: %r is not one of %s" % (kind, ", ".join(KINDS)))
    for key, (_default, kinds) in OPTIONS.items():
        if value.get(key) is not None and kind not in kinds:
            raise SpecError("workload.%s: %r is not used by kind %s (only by %s)" % (key, value[key], kind, ", ".join(kinds)))
    given = {key: item for key, item in value.items() if item is not None}
    spec = WorkloadSpec(kind=kind)
    if kind in (DATASET, REPLAY):
        path = given.get("file")
        if not isinstance(path, str) or not path.strip():
            raise SpecError("workload.file: %r: kind %s needs the file to read, on the host the task runs on" % (path, kind))
        path = os.path.expanduser(path.strip())
        if not os.path.isfile(path):
            raise SpecError("workload.file: %r is not a file on the host the task runs on" % (path,))
        spec = spec._replace(file=path)
    if kind == DATASET:
        fmt = given.get("format", "auto")
        if fmt not in FORMATS:
            raise SpecError("workload.format: %r is not one of %s" % (fmt, ", ".join(FORMATS)))
        low = None if "min_prompt_len" not in given else _whole("min_prompt_len", given["min_prompt_len"], 1, MAX_WORDS, "words")
        high = None if "max_prompt_len" not in given else _whole("max_prompt_len", given["max_prompt_len"], 1, MAX_WORDS, "words")
        if low is not None and high is not None and low > high:
            raise SpecError("workload.min_prompt_len: %d is more than workload.max_prompt_len: %d" % (low, high))
        spec = spec._replace(format=fmt, min_prompt_len=low, max_prompt_len=high)
    if kind == REPLAY:
        spec = spec._replace(
            speedup=_number("speedup", given.get("speedup", 1.0), 0.0, MAX_SPEEDUP, "times the trace's pace", strict=True),
            block_size=_whole("block_size", given.get("block_size", 512), 1, MAX_WORDS, "words"))
    if kind == SESSIONS:
        spec = spec._replace(
            sessions=_whole("sessions", given.get("sessions", 8), 1, MAX_SESSIONS, "sessions"),
            turns=_whole("turns", given.get("turns", 4), 1, MAX_TURNS, "turns"),
            think_time=_number("think_time", given.get("think_time", 0.0), 0.0, MAX_THINK_S, "seconds", strict=False))
    return spec


class Synthetic:
    """The synthetic workload (prompts.py): every prompt input_len words, every request output_len tokens."""

    kind = SYNTHETIC
    file = None
    sha256 = None

    def __init__(self, input_len: int, output_len: int) -> None:
        self.input_len = input_len
        self.output_len = output_len

    def summary(self, requests: t.Optional[int]) -> t.Dict[str, t.Any]:
        return {"kind": SYNTHETIC, "file": None, "sha256": None, "requests": requests,
                "prompt_len": lengths([self.input_len]), "output_len": lengths([self.output_len])}


def read_text(path: str) -> t.Tuple[str, str]:
    """(text, sha256) of a workload file, named in the error when it cannot be read as UTF-8."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise WorkloadError("workload.file: %r cannot be read: %s" % (path, exc)) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise WorkloadError("workload.file: %r line %d: not UTF-8 text (%s)" % (path, line, exc.reason)) from None
    return text, hashlib.sha256(data).hexdigest()


def line_error(path: str, line: int, message: str) -> WorkloadError:
    return WorkloadError("workload.file: %r line %d: %s" % (path, line, message))


def json_lines(path: str, text: str) -> t.Iterator[t.Tuple[int, t.Any]]:
    """(line number, JSON value) of each line that is not blank; a line that is not JSON fails, naming it."""
    for line, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            yield line, json.loads(raw)
        except ValueError as exc:
            raise line_error(path, line, "not JSON: %s" % exc) from None


def lengths(values: t.Sequence[int]) -> t.Optional[t.Dict[str, t.Any]]:
    """min, p50, p90 and max of some lengths (numpy's percentiles); None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return {"min": ordered[0], "p50": _plain(percentile(ordered, 50, presorted=True)),
            "p90": _plain(percentile(ordered, 90, presorted=True)), "max": ordered[-1]}


def _plain(value: float) -> t.Union[int, float]:
    return int(value) if value == int(value) else round(value, 2)


def words(text: str) -> int:
    return len(text.split())
