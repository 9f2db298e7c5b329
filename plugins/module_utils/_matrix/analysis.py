# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_matrix): the report of playbooks/benchmark_matrix.yml, written on the controller from the run folder's
# files. It stands alone: it imports only the flat files of module_utils, no other package, never a module or a plugin.

"""The figures of a benchmark matrix: the measurements of a run folder, their medians per configuration (per host
and for the fleet), the run-to-run spread, the winner and whether its margin is larger than that spread.

Figures follow vllm bench serve: TPOT of a request is (E2EL - TTFT) / (output tokens - 1), and decode tok/s is
1000 / median TPOT, the decode rate of one stream. A failed measurement is left out of every median, and a
configuration with a failed measurement cannot win.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import os
import statistics
import typing as t

Cell = t.Dict[str, t.Any]
Report = t.Dict[str, t.Any]


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


def _decode(cell: Cell) -> t.Optional[float]:
    return number((cell.get("summary") or {}).get("decode_tok_s"))


def stats(cells: t.Sequence[Cell], spread_groups: t.Optional[t.Sequence[t.Sequence[Cell]]] = None) -> t.Dict[str, t.Any]:
    """Median decode tok/s and TPOT over the measured cells, and the run-to-run spread (max - min of one group, the
    largest group's; a group is one host's cells)."""
    ok = [c for c in cells if c.get("status") == "ok" and _decode(c) is not None]
    decode = [_decode(c) for c in ok]
    tpot = [v for v in (number(c["summary"].get("median_tpot_ms")) for c in ok) if v is not None]
    spreads = []
    for group in (spread_groups if spread_groups is not None else [cells]):
        values = [v for v in (_decode(c) for c in group if c.get("status") == "ok") if v is not None]
        if len(values) >= 2:
            spreads.append(max(values) - min(values))
    return {
        "runs": len(cells), "ok": len(ok), "failed": sum(1 for c in cells if c.get("status") != "ok"),
        "decode_tok_s": statistics.median(decode) if decode else None,
        "decode_tok_s_min": min(decode) if decode else None,
        "decode_tok_s_max": max(decode) if decode else None,
        "median_tpot_ms": statistics.median(tpot) if tpot else None,
        "spread_tok_s": max(spreads) if spreads else None,
    }


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


def analyse(plan: t.Dict[str, t.Any], cells: t.Sequence[Cell]) -> Report:
    """The whole report: per host and for the fleet, each configuration's figures, the winner, what to leave running,
    the failures."""
    names = [str(c["name"]) for c in plan["configs"]]
    hosts = list(plan["hosts"])
    baseline = plan["baseline"]
    by = {(h, n): [c for c in cells if c.get("host") == h and c.get("config") == n] for h in hosts for n in names}
    per_host: t.Dict[str, t.Any] = {}
    for host in hosts:
        configs = {n: stats(by[(host, n)]) for n in names}
        _with_changes(configs, names, baseline)
        ran = [n for n in names if configs[n]["runs"] > 0]
        per_host[host] = {"configs": configs,
                          "winner": winner(configs, [n for n in ran if configs[n]["failed"] == 0]),
                          "missing": [n for n in names if configs[n]["runs"] < plan["repeats"]]}
    fleet = {n: stats([c for h in hosts for c in by[(h, n)]], [by[(h, n)] for h in hosts]) for n in names}
    _with_changes(fleet, names, baseline)
    best = winner(fleet, [n for n in names if fleet[n]["ok"] > 0 and fleet[n]["failed"] == 0])
    failures = [{key: c.get(key) for key in ("host", "config", "round", "stage", "task", "error", "log_tail", "raw_file")}
                for c in cells if c.get("status") != "ok"]
    return {"plan": plan, "names": names, "hosts": hosts, "baseline": baseline, "fleet": fleet, "winner": best,
            "per_host": per_host, "leave": _leave(plan, best, baseline), "failures": failures, "cells": len(cells)}
