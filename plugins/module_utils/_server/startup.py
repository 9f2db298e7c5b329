# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A start-up by phase, read from the server's own log as vLLM prints it; the ready step's timeout from the last
start-ups of the same configuration.

Phases, in order (each one only when the log printed it: a phase a vLLM version does not print is absent, not zero):
  weights      "Model loading took G GiB [memory] and S seconds" (V1), else "Loading weights took S seconds";
               V0's "Loading model weights took G GB" gives the GiB only
  compile      "torch.compile takes|took S s in total"; cache "hit" when vLLM said "Directly load the compiled graph(s)
               ... from the cache", "miss" when it said "Compiling a graph for ... takes S s"
  graphs       "Graph capturing finished in S secs[, took G GiB]"
  engine_init  "init engine (profile, create kv cache, warmup model) took S seconds" (in V1 it includes compile and
               graphs)
  api          "Starting vLLM API server [N] on URL" or uvicorn's "Application startup complete."; seconds from the
               engine's init line to it when both lines carry vLLM's timestamp
A log in a format this does not know gives the total only, never an error. Pure functions: the ready step calls them
once, on this start-up's lines only.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _http, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import re
import typing as t

PHASES = ("weights", "compile", "graphs", "engine_init", "api")
LABELS = {"weights": "weights", "compile": "compile", "graphs": "graphs", "engine_init": "engine init", "api": "API up"}

_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
_MODEL_LOADING = re.compile(r"Model loading took " + _NUMBER + r" ?GiB(?: memory)? and " + _NUMBER + r" seconds")
_LOADING_WEIGHTS = re.compile(r"Loading weights took " + _NUMBER + r" seconds")
_V0_WEIGHTS = re.compile(r"Loading model weights took " + _NUMBER + r" ?GB")
_COMPILE_TOTAL = re.compile(r"torch\.compile (?:takes|took) " + _NUMBER + r" s in total")
_COMPILE_HIT = re.compile(r"Directly load the compiled graph")
_COMPILE_HIT_S = re.compile(r"from the cache, took " + _NUMBER + r" s")
_COMPILE_MISS = re.compile(r"Compiling a graph for .* takes " + _NUMBER + r" s")
_GRAPHS = re.compile(r"Graph capturing finished in " + _NUMBER + r" secs?(?:, took " + _NUMBER + r" GiB)?")
_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took " + _NUMBER + r" seconds")
_API = re.compile(r"Starting vLLM API server(?: [0-9]+)? on |Application startup complete")
# vLLM's prefix: "(EngineCore_DP0 pid=12) INFO 06-02 11:03:55 [core.py:167] ..."
_STAMP = re.compile(r"^(?:\([^)]*\) )?(?:DEBUG|INFO|WARNING|ERROR) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) ")
# a cheap filter: a line without one of these words is no start-up line
_WORDS = ("took", "takes", "Graph capturing", "Directly load", "Starting vLLM API server", "Application startup complete")


def _seconds_of_day(line: str) -> t.Optional[float]:
    found = _STAMP.match(line)
    if not found:
        return None
    _month, day, hour, minute, second = (int(part) for part in found.groups())
    return float(((day * 24 + hour) * 60 + minute) * 60 + second)


class _Reading:
    """What the lines said, phase by phase (seconds seen, GiB seen, the order in which phases ended)."""

    def __init__(self) -> None:
        self.seconds: t.Dict[str, t.List[float]] = {}
        self.gib: t.Dict[str, t.List[float]] = {}
        self.cache: t.Optional[str] = None
        self.order: t.List[str] = []
        self.weights_fallback: t.List[float] = []
        self.compile_parts: t.List[float] = []
        self.init_at: t.Optional[float] = None
        self.api_at: t.Optional[float] = None

    def saw(self, phase: str, seconds: t.Optional[float] = None, gib: t.Optional[float] = None) -> None:
        if seconds is not None:
            self.seconds.setdefault(phase, []).append(seconds)
        if gib is not None:
            self.gib.setdefault(phase, []).append(gib)
        if phase in self.order:
            self.order.remove(phase)
        self.order.append(phase)

    def read(self, line: str) -> None:  # pylint: disable=too-many-branches  # one branch per line vLLM prints
        if not any(word in line for word in _WORDS):
            return
        found = _MODEL_LOADING.search(line)
        if found:
            self.saw("weights", float(found.group(2)), float(found.group(1)))
            return
        found = _LOADING_WEIGHTS.search(line)
        if found:
            self.weights_fallback.append(float(found.group(1)))
            self.saw("weights")
            return
        found = _V0_WEIGHTS.search(line)
        if found:
            self.saw("weights", None, float(found.group(1)))
            return
        if _COMPILE_HIT.search(line):
            self.cache = self.cache or "hit"
            took = _COMPILE_HIT_S.search(line)
            if took:
                self.compile_parts.append(float(took.group(1)))
            self.saw("compile")
            return
        found = _COMPILE_MISS.search(line)
        if found:
            self.cache = "miss"
            self.compile_parts.append(float(found.group(1)))
            self.saw("compile")
            return
        found = _COMPILE_TOTAL.search(line)
        if found:
            self.saw("compile", float(found.group(1)))
            return
        found = _GRAPHS.search(line)
        if found:
            self.saw("graphs", float(found.group(1)), float(found.group(2)) if found.group(2) else None)
            return
        found = _INIT.search(line)
        if found:
            self.saw("engine_init", float(found.group(1)))
            self.init_at = _seconds_of_day(line)
            return
        if _API.search(line) and "api" not in self.order:
            self.api_at = _seconds_of_day(line)
            self.saw("api")

    def phases(self) -> t.List[t.Dict[str, t.Any]]:
        seconds = dict(self.seconds)
        if "weights" not in seconds and self.weights_fallback:
            seconds["weights"] = self.weights_fallback
        if "compile" not in seconds and self.compile_parts:
            seconds["compile"] = [sum(self.compile_parts)]
        if self.init_at is not None and self.api_at is not None and self.api_at >= self.init_at:
            seconds["api"] = [self.api_at - self.init_at]
        shown = []
        for name in PHASES:
            if name not in self.order:
                continue
            # several ranks print their own line: the slowest one is the phase's time
            took = max(seconds[name]) if seconds.get(name) else None
            gib = max(self.gib[name]) if self.gib.get(name) else None
            shown.append({"name": name, "seconds": None if took is None else round(took, 2),
                          "gib": None if gib is None else round(gib, 2),
                          "cache": self.cache if name == "compile" else None})
        return shown


def _s(seconds: float) -> str:
    return "%.1f s" % seconds if seconds < 10 else "%.0f s" % seconds


def _phase_words(phase: t.Mapping[str, t.Any]) -> str:
    name, seconds, gib = phase["name"], phase["seconds"], phase["gib"]
    if name == "compile":
        how = {"hit": "cache hit", "miss": "compiled"}.get(phase["cache"] or "")
        parts = [part for part in (how, _s(seconds) if seconds is not None else None) if part]
        return "compile: " + ", ".join(parts) if parts else "compile"
    words = LABELS[name]
    if seconds is not None:
        words += " " + _s(seconds)
    if gib is not None:
        words += " (%.2f GiB)" % gib
    return words


def summary_line(total_s: t.Optional[float], phases: t.Sequence[t.Mapping[str, t.Any]]) -> str:
    """One line: 'start-up 37 s: weights 8.0 s (14.99 GiB), compile: cache hit, 2.1 s, graphs 6.0 s (0.45 GiB), ...'."""
    head = "start-up" + (" " + _s(total_s) if total_s is not None else "")
    if not phases:
        return head + " (no start-up phases in the log)"
    return head + ": " + ", ".join(_phase_words(phase) for phase in phases)


def parse_startup(lines: t.Iterable[str], total_s: t.Optional[float]) -> t.Dict[str, t.Any]:
    """``startup`` of a ready result: total_s, phases (only those printed), last_phase (the last phase the log
    reached, None when none), line (the summary's words). ``lines``: this start-up's lines of the server's log."""
    reading = _Reading()
    for line in lines:
        reading.read(line)
    phases = reading.phases()
    return {"total_s": None if total_s is None else round(float(total_s), 2), "phases": phases,
            "last_phase": reading.order[-1] if reading.order else None, "line": summary_line(total_s, phases)}


# ---- the ready step's timeout from the last start-ups -------------------------------------------------------------

HISTORY_KEEP = 5  # start-ups kept per configuration
HISTORY_HASHES = 20  # configurations kept (the oldest forgotten first)


def adaptive_timeout(history: t.Sequence[float], ceiling: float, factor: float, floor: float) -> t.Tuple[float, str]:
    """(the ready step's timeout, why): ``factor`` times the slowest of the last start-ups of this configuration, at
    least ``floor``, at most ``ceiling`` (vllm_server_ready_timeout); the ceiling when none is known or factor is 0."""
    known = [float(took) for took in history if isinstance(took, (int, float)) and took > 0]
    if not known or factor <= 0:
        return float(ceiling), "vllm_server_ready_timeout"
    wanted = max(float(floor), factor * max(known))
    if wanted >= ceiling:
        return float(ceiling), "vllm_server_ready_timeout"
    return wanted, "%g x the slowest of the last %d start-up(s) of this configuration (%s)" % (
        factor, len(known), _s(max(known)))


# seconds a process's start time may read before the time taken just before its launch (psutil's start time is the
# boot time, a whole second, plus the process's ticks)
LAUNCH_SLACK_S = 2.0


def launched_here(launched: t.Optional[float], started: t.Optional[float]) -> bool:
    """Whether the server whose process started at ``started`` is the one launched at ``launched`` (the ready step
    follows this run's launch): a start-up to keep. A server already running before the launch, or either time
    unknown, is not."""
    if launched is None or started is None:
        return False
    return float(started) >= float(launched) - LAUNCH_SLACK_S


def remember(history: t.Mapping[str, t.Any], config_hash: str, startup: t.Mapping[str, t.Any], at: float) -> t.Dict[str, t.Any]:
    """``history`` ({config_hash: [{total_s, at, phases}...]}) with this start-up added: the last HISTORY_KEEP of each
    configuration, the HISTORY_HASHES configurations started last."""
    kept = {key: list(value) for key, value in history.items() if isinstance(value, list)}
    entry = {"total_s": startup.get("total_s"), "at": round(at, 3),
             "phases": [{"name": phase["name"], "seconds": phase["seconds"], "cache": phase["cache"]} for phase in startup.get("phases") or []]}
    kept[config_hash] = (kept.get(config_hash, []) + [entry])[-HISTORY_KEEP:]
    newest = sorted(kept, key=lambda key: max((item.get("at") or 0) for item in kept[key]) if kept[key] else 0)
    return {key: kept[key] for key in newest[-HISTORY_HASHES:]}


def totals(history: t.Mapping[str, t.Any], config_hash: t.Optional[str]) -> t.List[float]:
    """The total seconds of the last start-ups of ``config_hash`` kept in ``history``."""
    entries = history.get(config_hash) if config_hash else None
    if not isinstance(entries, list):
        return []
    return [entry["total_s"] for entry in entries if isinstance(entry, dict) and isinstance(entry.get("total_s"), (int, float))]
