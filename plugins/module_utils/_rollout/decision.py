# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_rollout): the benchmark gate of playbooks/rollout_vllm.yml, judged and reported on the controller. It
# imports the flat files of module_utils and the matrix report's figures (_matrix.analysis, _matrix.render), never a
# module or a plugin; nothing imports it but vllm_rollout_report.

"""The gate's rule: is the canary's new configuration a regression against the baseline measured just before it?

Each side is one benchmark of the role (``vllm_server_benchmark_repeats`` repeats of the same load). Per metric, the
figure of a side is the median over its repeats, and the run-to-run spread of a side is max - min over its repeats;
the gate's spread is the larger of the two sides'. A metric regresses when it got worse by MORE than the threshold
(percent of the baseline) AND by MORE than that spread (in the metric's unit): the threshold says how much worse is
too much, the spread says how much of a difference this machine's noise alone makes, so noise never halts a rollout
and a drop that is both large and real always does. Metrics: decode tok/s per stream (higher is better, threshold
``threshold_pct``) and median TTFT (lower is better, ``ttft_threshold_pct``, and only a rise of more than
``ttft_floor_ms`` too: a few milliseconds of TTFT move with the machine's load and a fresh process, and matter to no
user); p99 TTFT is reported, not gated (a p99 of a few dozen requests is one request).

A side with a failed request (an HTTP 500 such as vLLM's EngineDeadError, an error event, a timeout, a dropped
connection) is a failed measurement, not a slow or a fast one: the figures of the requests that did complete say nothing
of a server that fails the others, so the host fails the gate, naming the failures.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import math
import re
import statistics
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._matrix.analysis import change, number, requests_failed

# (key, unit, higher is better, gated)
METRICS = (
    ("decode_tok_s", "tok/s", True, True),
    ("median_ttft_ms", "ms", False, True),
    ("p99_ttft_ms", "ms", False, False),
)
LABELS = {"decode_tok_s": "decode tok/s per stream", "median_ttft_ms": "median TTFT", "p99_ttft_ms": "p99 TTFT"}
SERIAL = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(%?)\s*$")


class RolloutError(ValueError):
    """A setting or a file the gate cannot use; the message names it and its value."""


def _percent(name: str, value: t.Any) -> float:
    figure = number(value)
    if figure is None or math.isnan(figure) or figure < 0 or figure > 100:
        raise RolloutError("%s=%s must be a number of percent from 0 to 100" % (name, value))
    return figure


def _floor(value: t.Any) -> float:
    figure = number(value)
    if figure is None or math.isnan(figure) or figure < 0:
        raise RolloutError("vllm_rollout_ttft_floor_ms=%s must be 0 or more milliseconds" % (value,))
    return figure


def _serial_one(value: t.Any) -> None:
    match = SERIAL.match(str(value)) if not isinstance(value, bool) else None
    if match is None or float(match.group(1)) <= 0 or (match.group(2) == "" and float(match.group(1)) != int(float(match.group(1)))):
        raise RolloutError("vllm_rollout_serial=%s must be a whole number of hosts (at least 1), a percentage above 0 "
                           "such as '25%%', or a list of those; the first batch is the canary" % (value,))
    if match.group(2) and float(match.group(1)) > 100:
        raise RolloutError("vllm_rollout_serial=%s: a percentage of the hosts is at most 100%%" % (value,))


def check_settings(settings: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """The gate's settings, checked together; RolloutError names the first variable that cannot be used."""
    serial = settings.get("serial")
    for value in (serial if isinstance(serial, list) and serial else [serial]):
        _serial_one(value)
    repeats = number(settings.get("repeats"))
    if repeats is None or repeats < 2 or repeats != int(repeats):
        raise RolloutError("vllm_server_benchmark_repeats=%s: the gate needs at least 2 repeats per measurement to know "
                           "the run-to-run spread" % (settings.get("repeats"),))
    return {
        "threshold_pct": _percent("vllm_rollout_threshold_pct", settings.get("threshold_pct")),
        "ttft_threshold_pct": _percent("vllm_rollout_ttft_threshold_pct", settings.get("ttft_threshold_pct")),
        "ttft_floor_ms": _floor(settings.get("ttft_floor_ms", 20)),
        "repeats": int(repeats),
    }


def figures(runs: t.Sequence[t.Mapping[str, t.Any]], key: str) -> t.List[float]:
    """The metric of every repeat that completed a request."""
    values = []
    for run in runs:
        if run.get("completed", 1) in (0, "0"):
            continue
        value = number(run.get(key))
        if value is not None:
            values.append(value)
    return values


def compare_metric(key: str, base_runs: t.Sequence[t.Mapping[str, t.Any]], new_runs: t.Sequence[t.Mapping[str, t.Any]],
                   threshold_pct: t.Optional[float], floor: float = 0.0) -> t.Dict[str, t.Any]:
    """One metric, baseline against canary: medians, spreads, how much worse, and whether that is a regression."""
    _key, unit, higher_better, gated = next(m for m in METRICS if m[0] == key)
    base, new = figures(base_runs, key), figures(new_runs, key)
    out: t.Dict[str, t.Any] = {
        "metric": key, "label": LABELS[key], "unit": unit, "higher_is_better": higher_better, "gated": gated and threshold_pct is not None,
        "baseline": statistics.median(base) if base else None, "canary": statistics.median(new) if new else None,
        "baseline_runs": base, "canary_runs": new,
        "baseline_spread": (max(base) - min(base)) if len(base) >= 2 else None,
        "canary_spread": (max(new) - min(new)) if len(new) >= 2 else None,
        "threshold_pct": threshold_pct if gated else None, "floor": floor if gated else None, "regression": False,
    }
    spreads = [s for s in (out["baseline_spread"], out["canary_spread"]) if s is not None]
    out["spread"] = max(spreads) if spreads else None
    out["change_pct"] = change(out["canary"], out["baseline"])
    if out["baseline"] is None or out["canary"] is None:
        out["worse"] = out["worse_pct"] = None
        out["verdict"] = "not measured"
        return out
    worse = (out["baseline"] - out["canary"]) if higher_better else (out["canary"] - out["baseline"])
    out["worse"] = worse
    out["worse_pct"] = worse / out["baseline"] * 100.0 if out["baseline"] else None
    spread = out["spread"] or 0.0
    if not out["gated"]:
        out["verdict"] = "reported, not gated"
    elif worse <= 0:
        out["verdict"] = "better" if worse < 0 else "same"
    elif out["worse_pct"] is not None and out["worse_pct"] > threshold_pct and worse > spread and worse > floor:
        out["regression"] = True
        out["verdict"] = "REGRESSION: %.1f%% worse, beyond the %.1f%% threshold and the spread of %.2f %s" % (
            out["worse_pct"], threshold_pct, spread, unit)
    elif worse <= floor:
        out["verdict"] = "worse by %.2f %s, under the floor of %.2f %s" % (worse, unit, floor, unit)
    elif worse <= spread:
        out["verdict"] = "worse by %.2f %s, within the run-to-run spread (%.2f %s): noise" % (worse, unit, spread, unit)
    else:
        out["verdict"] = "worse by %.1f%%, within the %.1f%% threshold" % (out["worse_pct"] or 0.0, threshold_pct)
    return out


def failed_requests(side: str, runs: t.Sequence[t.Mapping[str, t.Any]]) -> t.Optional[str]:
    """Why the measurement of one side failed (its requests that failed, by reason, and the first error), or None when
    every request of every repeat completed."""
    why = requests_failed(runs)
    return "the %s measurement failed: %s" % (side, why) if why else None


def judge_host(host: str, baseline: t.Optional[t.Mapping[str, t.Any]], canary: t.Optional[t.Mapping[str, t.Any]],
               failure: t.Optional[t.Mapping[str, t.Any]], settings: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """One canary host's verdict: pass, regression, or failed (it did not come up, or a side was not measured)."""
    out: t.Dict[str, t.Any] = {"host": host, "metrics": [], "failure": dict(failure) if failure else None}
    if failure:
        out.update(verdict="failed", reason="%s failed at \"%s\": %s" % (
            host, failure.get("task") or failure.get("stage") or "?", " ".join(str(failure.get("msg") or "").split())))
        return out
    if not baseline or not baseline.get("runs"):
        out.update(verdict="failed", reason="%s: no baseline measurement" % host)
        return out
    if not canary or not canary.get("runs"):
        out.update(verdict="failed", reason="%s: the new configuration was not measured" % host)
        return out
    broken = [why for why in (failed_requests("baseline", baseline["runs"]), failed_requests("new configuration's", canary["runs"]))
              if why]
    if broken:
        out.update(verdict="failed", reason="%s: %s" % (host, "; ".join(broken)))
        return out
    thresholds = {"decode_tok_s": settings["threshold_pct"], "median_ttft_ms": settings["ttft_threshold_pct"], "p99_ttft_ms": None}
    floors = {"median_ttft_ms": settings.get("ttft_floor_ms", 0.0)}
    out["metrics"] = [compare_metric(key, baseline["runs"], canary["runs"], thresholds[key], floors.get(key, 0.0))
                      for key, _u, _h, _g in METRICS]
    bad = [m for m in out["metrics"] if m["regression"]]
    unmeasured = [m for m in out["metrics"] if m["gated"] and m["verdict"] == "not measured"]
    if bad:
        out.update(verdict="regression", reason="%s: %s" % (host, "; ".join("%s %s -> %s (%s)" % (
            m["label"], _num(m["baseline"]), _num(m["canary"]), m["verdict"]) for m in bad)))
    elif unmeasured:
        out.update(verdict="failed", reason="%s: %s not measured" % (host, ", ".join(m["label"] for m in unmeasured)))
    else:
        out.update(verdict="pass", reason="%s: %s" % (host, "; ".join("%s %s -> %s (%s)" % (
            m["label"], _num(m["baseline"]), _num(m["canary"]), m["verdict"]) for m in out["metrics"] if m["gated"])))
    return out


def judge_batch(hosts: t.Sequence[str], baselines: t.Mapping[str, t.Any], canaries: t.Mapping[str, t.Any],
                failures: t.Mapping[str, t.Any], settings: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """The batch's verdicts; it halts the rollout when any host regressed or failed."""
    judged = [judge_host(h, baselines.get(h), canaries.get(h), failures.get(h), settings) for h in hosts]
    halted = [j for j in judged if j["verdict"] != "pass"]
    return {"hosts": judged, "halt": bool(halted),
            "reason": "; ".join(j["reason"] for j in (halted or judged))}


def _num(value: t.Optional[float]) -> str:
    return "n/a" if value is None else "%.2f" % value
