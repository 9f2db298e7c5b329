# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_matrix): the report of playbooks/benchmark_matrix.yml, written on the controller from the run folder's
# files. It stands alone: it imports only the flat files of module_utils, no other package, never a module or a plugin.

"""The figures of a benchmark matrix: the measurements of a run folder, their medians per configuration (per host
and for the fleet), the run-to-run spread, the winner and whether its margin is larger than that spread; beside them
the latency percentiles, and what a workload's results carry (figures per turn of a session, the client's schedule
slip of a replayed trace, the server's prefix cache).

Figures follow vllm bench serve: TPOT of a request is (E2EL - TTFT) / (output tokens - 1), and decode tok/s is
1000 / median TPOT, the decode rate of one stream. A failed measurement is left out of every median, and a
configuration with a failed measurement cannot win. A measurement fails when its restart or its benchmark failed, and
also when requests of its repeats failed (an HTTP 500 such as vLLM's EngineDeadError, an error event, a timeout, a
dropped connection): the figures of the requests that completed say nothing of a server that fails the others.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import os
import statistics
import typing as t

Cell = t.Dict[str, t.Any]
Report = t.Dict[str, t.Any]

LATENCIES = ("ttft", "itl", "tpot")
PERCENTILES = ("p50", "p90", "p99")
TURN_FIGURES = ("mean", "p50", "p90", "p99")
SLIP_FIGURES = ("mean", "p50", "p90", "p99", "max")


def load_cells(run_dir: str) -> t.List[Cell]:
    """Every raw measurement of ``run_dir``/raw/*.json, in the order each host ran them."""
    raw = os.path.join(run_dir, "raw")
    cells = []
    for name in sorted(os.listdir(raw)) if os.path.isdir(raw) else []:
        if not name.endswith(".json"):
            continue
        with open(os.path.join(raw, name), encoding="utf-8") as handle:
            cell = json.load(handle)
        cell["raw_file"] = "raw/" + name
        cells.append(cell)
    cells.sort(key=lambda c: (str(c.get("host")), int(c.get("order") or 0)))
    return cells


def number(value: t.Any) -> t.Optional[float]:
    """``value`` as a float, or None when it is missing or not a number."""
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# results.csv's and the failures' status of a measurement whose task succeeded but some of whose requests failed
REQUESTS_FAILED = "requests failed"


def requests_failed(runs: t.Sequence[t.Mapping[str, t.Any]]) -> t.Optional[str]:
    """``N of M requests failed (reason: n, ...)`` over the repeats of a measurement, with its first error; None when
    every request of every repeat completed."""
    failed = total = 0
    reasons: t.Dict[str, int] = {}
    first = ""
    for run in runs:
        count = int(number(run.get("failed")) or 0)
        failed += count
        total += count + int(number(run.get("completed")) or 0)
        for reason, times in (run.get("failed_by_reason") or {}).items():
            reasons[str(reason)] = reasons.get(str(reason), 0) + int(number(times) or 0)
        errors = run.get("errors") or []
        if not first and errors and isinstance(errors[0], dict):
            first = " ".join(str(errors[0].get("error") or "").split())[:300]
    if not failed:
        return None
    return "%d of %d requests failed (%s)%s" % (
        failed, total, ", ".join("%s: %d" % item for item in sorted(reasons.items())) or "no reason given",
        "; first error: %s" % first if first else "")


def status(cell: Cell) -> str:
    """A measurement's status: its own (``ok``, ``failed``; ``ok`` when it has none), or REQUESTS_FAILED for one whose
    task succeeded while requests of its repeats failed."""
    own = str(cell.get("status", "ok"))
    return REQUESTS_FAILED if own == "ok" and requests_failed(runs_of(cell)) else own


def measured(cell: Cell) -> bool:
    """Whether a measurement counts: its task succeeded and every request of its repeats completed."""
    return status(cell) == "ok"


def _decode(cell: Cell) -> t.Optional[float]:
    return number((cell.get("summary") or {}).get("decode_tok_s"))


def stats(cells: t.Sequence[Cell], spread_groups: t.Optional[t.Sequence[t.Sequence[Cell]]] = None) -> t.Dict[str, t.Any]:
    """Median decode tok/s and TPOT over the measured cells, and the run-to-run spread (max - min of one group, the
    largest group's; a group is one host's cells)."""
    ok = [c for c in cells if measured(c) and _decode(c) is not None]
    decode = [_decode(c) for c in ok]
    tpot = [v for v in (number(c["summary"].get("median_tpot_ms")) for c in ok) if v is not None]
    spreads = []
    for group in (spread_groups if spread_groups is not None else [cells]):
        values = [v for v in (_decode(c) for c in group if measured(c)) if v is not None]
        if len(values) >= 2:
            spreads.append(max(values) - min(values))
    return {
        "runs": len(cells), "ok": len(ok), "failed": sum(1 for c in cells if not measured(c)),
        "decode_tok_s": statistics.median(decode) if decode else None,
        "decode_tok_s_min": min(decode) if decode else None,
        "decode_tok_s_max": max(decode) if decode else None,
        "median_tpot_ms": statistics.median(tpot) if tpot else None,
        "spread_tok_s": max(spreads) if spreads else None,
    }


def runs_of(cell: Cell) -> t.List[t.Dict[str, t.Any]]:
    """The repeats of one measurement: its own ``runs`` (a rollout's side), else its benchmark result's."""
    runs = cell.get("runs") or (cell.get("benchmark") or {}).get("runs") or []
    return [run for run in runs if isinstance(run, dict)]


def result_key(cell: Cell, key: str) -> t.Any:
    """An optional figure of a measurement (a workload's per_turn, schedule_slip_ms, prefix_cache, workload): from its
    summary, else its own top level, else its benchmark result's (or that result's first level's); None when none has it."""
    benchmark = cell.get("benchmark") or {}
    levels = benchmark.get("sweep") or [{}]
    for where in (cell.get("summary") or {}, cell, benchmark, levels[0] if isinstance(levels[0], dict) else {}):
        if isinstance(where, dict) and where.get(key) is not None:
            return where[key]
    return None


def _median(values: t.Iterable[t.Any]) -> t.Optional[float]:
    figures = [v for v in (number(value) for value in values) if v is not None]
    return statistics.median(figures) if figures else None


def latency(cells: t.Sequence[Cell]) -> t.Dict[str, t.Dict[str, t.Optional[float]]]:
    """TTFT, ITL and TPOT percentiles (p50, p90, p99, ms): each the median over the repeats of the measured cells."""
    runs = [run for c in cells if measured(c) for run in runs_of(c) if run.get("completed", 1) not in (0, "0")]
    return {"%s_ms" % name: {p: _median(run.get("%s_%s_ms" % (p, name)) for run in runs) for p in PERCENTILES} for name in LATENCIES}


def per_turn(cells: t.Sequence[Cell]) -> t.Optional[t.List[t.Dict[str, t.Any]]]:
    """Each turn of a session workload: its requests, TTFT figures and cached tokens, each the median over the measured
    cells; None when no cell has per-turn figures."""
    turns: t.Dict[int, t.List[t.Dict[str, t.Any]]] = {}
    for cell in (c for c in cells if measured(c)):
        for entry in result_key(cell, "per_turn") or []:
            turn = number(entry.get("turn")) if isinstance(entry, dict) else None
            if turn is not None:
                turns.setdefault(int(turn), []).append(entry)
    if not turns:
        return None
    return [{"turn": turn, "requests": _median(e.get("requests") for e in entries),
             "ttft_ms": {f: _median((e.get("ttft_ms") or {}).get(f) for e in entries) for f in TURN_FIGURES},
             "cached_tokens": _median(e.get("cached_tokens") for e in entries), "measurements": len(entries)}
            for turn, entries in sorted(turns.items())]


def schedule_slip(cells: t.Sequence[Cell]) -> t.Optional[t.Dict[str, t.Optional[float]]]:
    """How late the client sent a replayed trace's requests (ms): each figure the largest over the measured cells (the
    worst measurement's); None when no cell has one."""
    slips = [s for s in (result_key(c, "schedule_slip_ms") for c in cells if measured(c)) if isinstance(s, dict)]
    if not slips:
        return None
    out: t.Dict[str, t.Optional[float]] = {}
    for key in SLIP_FIGURES:
        values = [v for v in (number(s.get(key)) for s in slips) if v is not None]
        out[key] = max(values) if values else None
    return out


def prefix_cache(cells: t.Sequence[Cell]) -> t.Optional[t.Dict[str, t.Optional[float]]]:
    """The server's prefix cache over the measured cells: queries and hits summed, and the hit rate of those sums; None
    when no cell has the counters."""
    found = [p for p in (result_key(c, "prefix_cache") for c in cells if measured(c)) if isinstance(p, dict)]
    if not found:
        return None
    queries = sum(number(p.get("queries")) or 0.0 for p in found)
    hits = sum(number(p.get("hits")) or 0.0 for p in found)
    return {"queries": queries, "hits": hits, "hit_rate": hits / queries if queries else None}


def workloads(cells: t.Sequence[Cell]) -> t.List[t.Dict[str, t.Any]]:
    """The workloads the cells ran (file workloads: one per distinct file hash), in the order first met."""
    found: t.List[t.Dict[str, t.Any]] = []
    for cell in cells:
        workload = result_key(cell, "workload")
        if isinstance(workload, dict) and not any(w.get("sha256") == workload.get("sha256") and w.get("kind") == workload.get("kind")
                                                  for w in found):
            found.append(workload)
    return found


def startup(cells: t.Sequence[Cell]) -> t.Optional[t.Dict[str, t.Any]]:
    """The start-ups of the servers measured (the role's vllm_server_result.startup, kept in each cell's server):
    the median total and compile seconds, and how many compiled or loaded their graphs from vLLM's cache; None when no
    cell carries one."""
    ups = [(c.get("server") or {}).get("startup") for c in cells]
    ups = [up for up in ups if isinstance(up, dict)]
    if not ups:
        return None
    compiles = [phase for up in ups for phase in up.get("phases") or [] if isinstance(phase, dict) and phase.get("name") == "compile"]
    return {"startups": len(ups), "total_s": _median(up.get("total_s") for up in ups),
            "compile_s": _median(phase.get("seconds") for phase in compiles),
            "compiled": sum(1 for phase in compiles if phase.get("cache") == "miss"),
            "cache_hits": sum(1 for phase in compiles if phase.get("cache") == "hit")}


def startup_words(figures: t.Optional[t.Mapping[str, t.Any]]) -> str:
    """'35.1 s (compiled)', '16.0 s (cache hit)', '22.4 s (1 compiled, 2 cache hits)'; 'n/a' without a start-up."""
    if not figures or figures.get("total_s") is None:
        return "n/a"
    text = "%.1f s" % figures["total_s"]
    compiled, hits = figures.get("compiled") or 0, figures.get("cache_hits") or 0
    if compiled and hits:
        return text + " (%d compiled, %d cache hit%s)" % (compiled, hits, "" if hits == 1 else "s")
    if compiled or hits:
        return text + (" (compiled)" if compiled else " (cache hit)")
    return text


def extras(cells: t.Sequence[Cell]) -> t.Dict[str, t.Any]:
    """The figures beyond decode tok/s: latency percentiles, what a workload's results carry (per_turn,
    schedule_slip_ms, prefix_cache; None when they carry none), and the servers' start-ups (startup)."""
    return {"latency": latency(cells), "per_turn": per_turn(cells), "schedule_slip_ms": schedule_slip(cells),
            "prefix_cache": prefix_cache(cells), "startup": startup(cells)}


def change(value: t.Optional[float], base: t.Optional[float]) -> t.Optional[float]:
    """Percent change of ``value`` from ``base``; None when either is unknown or the base is 0."""
    if value is None or base is None or base == 0:
        return None
    return (value - base) / base * 100.0


def winner(per_config: t.Dict[str, t.Dict[str, t.Any]], eligible: t.Sequence[str]) -> t.Dict[str, t.Any]:
    """The configuration with the highest median decode tok/s among the eligible ones, and its margin."""
    ranked = sorted((n for n in eligible if per_config[n]["decode_tok_s"] is not None),
                    key=lambda n: per_config[n]["decode_tok_s"], reverse=True)
    if not ranked:
        return {"config": None, "runner_up": None, "margin_tok_s": None, "spread_tok_s": None, "significant": False}
    best = ranked[0]
    if len(ranked) == 1:
        return {"config": best, "runner_up": None, "margin_tok_s": None, "spread_tok_s": per_config[best]["spread_tok_s"],
                "significant": False}
    second = ranked[1]
    margin = per_config[best]["decode_tok_s"] - per_config[second]["decode_tok_s"]
    spreads = [s for s in (per_config[best]["spread_tok_s"], per_config[second]["spread_tok_s"]) if s is not None]
    spread = max(spreads) if spreads else None
    return {"config": best, "runner_up": second, "margin_tok_s": margin, "spread_tok_s": spread,
            "significant": spread is not None and margin > spread}


def _with_changes(configs: t.Dict[str, t.Dict[str, t.Any]], names: t.Sequence[str], baseline: str) -> None:
    for name in names:
        configs[name]["change_decode_pct"] = change(configs[name]["decode_tok_s"], configs[baseline]["decode_tok_s"])
        configs[name]["change_tpot_pct"] = change(configs[name]["median_tpot_ms"], configs[baseline]["median_tpot_ms"])


def _leave(plan: t.Dict[str, t.Any], best: t.Dict[str, t.Any], baseline: str) -> t.Dict[str, t.Any]:
    """The configuration each server is left running (vllm_benchmark_leave), and why."""
    if plan.get("leave", "best") != "best":
        return {"mode": "baseline", "config": baseline, "reason": "vllm_benchmark_leave=baseline"}
    if best["config"] is not None:
        return {"mode": "best", "config": best["config"], "reason": "the fleet's winner"}
    return {"mode": "best", "config": baseline, "reason": "no configuration was measured without a failure: the baseline instead"}


def _failure(cell: Cell) -> t.Dict[str, t.Any]:
    """A failed measurement as the report lists it; one whose requests failed is named by them (stage benchmark)."""
    out = {key: cell.get(key) for key in ("host", "config", "round", "stage", "task", "error", "log_tail", "raw_file")}
    out["status"] = status(cell)
    if out["status"] == REQUESTS_FAILED:
        out.update(stage=cell.get("stage") or "benchmark", error=requests_failed(runs_of(cell)))
    return out


def analyse(plan: t.Dict[str, t.Any], cells: t.Sequence[Cell]) -> Report:
    """The whole report: per host and for the fleet, each configuration's figures, the winner, what to leave running,
    the failures."""
    names = [str(c["name"]) for c in plan["configs"]]
    hosts = list(plan["hosts"])
    baseline = plan["baseline"]
    by = {(h, n): [c for c in cells if c.get("host") == h and c.get("config") == n] for h in hosts for n in names}
    per_host: t.Dict[str, t.Any] = {}
    for host in hosts:
        configs = {n: dict(stats(by[(host, n)]), **extras(by[(host, n)])) for n in names}
        _with_changes(configs, names, baseline)
        ran = [n for n in names if configs[n]["runs"] > 0]
        per_host[host] = {"configs": configs,
                          "winner": winner(configs, [n for n in ran if configs[n]["failed"] == 0]),
                          "missing": [n for n in names if configs[n]["runs"] < plan["repeats"]]}
    fleet = {n: dict(stats([c for h in hosts for c in by[(h, n)]], [by[(h, n)] for h in hosts]),
                     **extras([c for h in hosts for c in by[(h, n)]])) for n in names}
    _with_changes(fleet, names, baseline)
    best = winner(fleet, [n for n in names if fleet[n]["ok"] > 0 and fleet[n]["failed"] == 0])
    failures = [_failure(c) for c in cells if not measured(c)]
    return {"plan": plan, "names": names, "hosts": hosts, "baseline": baseline, "fleet": fleet, "winner": best,
            "per_host": per_host, "leave": _leave(plan, best, baseline), "failures": failures, "cells": len(cells),
            "workloads": workloads(cells)}
