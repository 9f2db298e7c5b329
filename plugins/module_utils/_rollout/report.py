# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_rollout): see decision.py.

"""The rollout's run folder and report: the measurements (baseline/HOST.json, canary/HOST.json, written by the playbook),
each gated batch's verdicts (batches/NN.json), and at the end report.json, summary.md, chart.png and the one-screen
summary the playbook prints.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import os
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._io import write_if_changed
from ansible_collections.gpuops.fleet.plugins.module_utils._matrix.render import chart_bytes, chart_pyplot, fmt, workload_text
from ansible_collections.gpuops.fleet.plugins.module_utils._rollout.decision import RolloutError, judge_batch

HOST_NAME_SAFE = str.maketrans({"/": "_", "\\": "_", "\0": "_"})


def _file(run_dir: str, side: str, host: str) -> str:
    return os.path.join(run_dir, side, host.translate(HOST_NAME_SAFE) + ".json")


def read_json(path: str) -> t.Optional[t.Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RolloutError("path: cannot read %s: %s" % (path, exc)) from exc


def write(path: str, content: t.Union[str, bytes], check_mode: bool) -> bool:
    """Write ``content`` atomically (0644) unless the file already holds it; whether it changed."""
    return write_if_changed(path, content, check_mode, prefix=".rollout.")


def judge(run_dir: str, batch: int, hosts: t.Sequence[str], failures: t.Sequence[t.Mapping[str, t.Any]],
          settings: t.Mapping[str, t.Any], batch_hosts: t.Optional[t.Sequence[str]] = None) -> t.Dict[str, t.Any]:
    """The verdicts of one gated batch, from its measurement files and the failures the playbook passes. ``hosts``: the
    measured ones; ``batch_hosts``: all of the batch (default ``hosts``), a host not measured (a headless node of a
    server across hosts) judged only when it failed."""
    every = list(batch_hosts) if batch_hosts is not None else list(hosts)
    failed = {str(f.get("host")): f for f in failures if f.get("host") in every}
    judged = list(hosts) + [h for h in every if h not in hosts and h in failed]
    baselines = {h: read_json(_file(run_dir, "baseline", h)) for h in hosts}
    canaries = {h: read_json(_file(run_dir, "canary", h)) for h in hosts}
    verdict = judge_batch(judged, baselines, canaries, failed, settings)
    verdict.update(batch=batch, settings=dict(settings), baselines=baselines, canaries=canaries)
    return verdict


def batches(run_dir: str) -> t.List[t.Dict[str, t.Any]]:
    folder = os.path.join(run_dir, "batches")
    names = sorted(n for n in os.listdir(folder) if n.endswith(".json")) if os.path.isdir(folder) else []
    return [read_json(os.path.join(folder, n)) for n in names]


def startup_words(startup: t.Any) -> str:
    """A start-up in a few words: '35.0 s (compiled, 20 s)', '16.0 s (compile: cache hit, 1.0 s)'; 'n/a' when none
    was kept (a server started before start-ups were kept, or one this run did not launch)."""
    if not isinstance(startup, dict) or startup.get("total_s") is None:
        return "n/a"
    text = "%.1f s" % float(startup["total_s"])
    for phase in startup.get("phases") or []:
        if isinstance(phase, dict) and phase.get("name") == "compile" and phase.get("cache") in ("hit", "miss"):
            how = "compile: cache hit" if phase["cache"] == "hit" else "compiled"
            text += " (%s%s)" % (how, ", %s s" % fmt(phase["seconds"], 1) if phase.get("seconds") is not None else "")
    return text


def startup_lines(verdict: t.Mapping[str, t.Any]) -> t.List[t.Tuple[str, str]]:
    """(host, 'start-up: baseline ... -> canary ...') for each measured host of a gated batch that has either."""
    lines = []
    for host in verdict.get("hosts") or []:
        name = host.get("host")
        base = ((verdict.get("baselines") or {}).get(name) or {}).get("startup")
        canary = ((verdict.get("canaries") or {}).get(name) or {}).get("startup")
        if base or canary:
            lines.append((str(name), "start-up: baseline %s -> canary %s" % (startup_words(base), startup_words(canary))))
    return lines


def _metric_rows(verdict: t.Mapping[str, t.Any]) -> t.List[str]:
    rows = []
    for host in verdict["hosts"]:
        for m in host["metrics"]:
            rows.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                host["host"], m["label"], fmt(m["baseline"]), fmt(m["canary"]),
                fmt(m["change_pct"], 1, True) + ("%" if m["change_pct"] is not None else ""), fmt(m["spread"]),
                "n/a" if m["threshold_pct"] is None else "%.1f%%" % m["threshold_pct"], m["verdict"].replace("|", "/")))
        if not host["metrics"]:
            rows.append("| %s | - | - | - | - | - | - | %s |" % (host["host"], host["reason"].replace("|", "/")))
    return rows


def build(run_dir: str, plan: t.Mapping[str, t.Any], fleet: t.Sequence[t.Mapping[str, t.Any]],
          rollbacks: t.Sequence[t.Mapping[str, t.Any]], outcome: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """report.json's content."""
    reached = [entry.get("host") for entry in fleet]
    fleet = list(fleet) + [{"host": host, "runs": "unknown"} for host in plan.get("hosts", []) if host not in reached]
    return {"plan": dict(plan), "batches": batches(run_dir), "fleet": fleet, "rollbacks": list(rollbacks),
            "outcome": dict(outcome)}


def screen(report: t.Mapping[str, t.Any]) -> t.List[str]:
    """The one-screen summary: the outcome and its reason, each gated host's headline figures, what runs where."""
    plan, outcome = report["plan"], report["outcome"]
    lines = ["ROLLOUT %s: %s" % (outcome.get("status", "?").upper(), outcome.get("reason", "")),
             "new configuration %s (%s); hosts %s; batches of %s; regression: decode tok/s -%s%%, median TTFT +%s%% (and +%s ms), "
             "each beyond the spread" % (
                 str(plan.get("config_hash", ""))[:12], plan.get("config_shown") or "?", len(plan.get("hosts", [])),
                 plan.get("serial"), plan.get("threshold_pct"), plan.get("ttft_threshold_pct"), plan.get("ttft_floor_ms"))]
    for verdict in report["batches"]:
        for host in verdict["hosts"]:
            decode = next((m for m in host["metrics"] if m["metric"] == "decode_tok_s"), None)
            ttft = next((m for m in host["metrics"] if m["metric"] == "median_ttft_ms"), None)
            if decode and ttft:
                lines.append("  batch %s %s: %s  decode %s -> %s tok/s (%s%%, spread %s), TTFT %s -> %s ms" % (
                    verdict["batch"], host["host"], host["verdict"].upper(), fmt(decode["baseline"]), fmt(decode["canary"]),
                    fmt(decode["change_pct"], 1, True), fmt(decode["spread"]), fmt(ttft["baseline"], 1), fmt(ttft["canary"], 1)))
            else:
                lines.append("  batch %s %s: %s  %s" % (verdict["batch"], host["host"], host["verdict"].upper(), host["reason"]))
        lines.extend("  batch %s %s: %s" % (verdict["batch"], name, words) for name, words in startup_lines(verdict))
    for rollback in report["rollbacks"]:
        lines.append("  rollback %s: %s" % (rollback.get("host"), rollback_text(rollback)))
    for entry in report["fleet"]:
        lines.append("  %s: %s" % (entry.get("host"), runs_text(entry)))
    lines.append("report: %s" % plan.get("dir", "?"))
    return lines


def rollback_text(rollback: t.Mapping[str, t.Any]) -> str:
    if rollback.get("status") != "ok":
        return "FAILED at \"%s\": %s" % (rollback.get("task"), " ".join(str(rollback.get("msg")).split()))
    checks = rollback.get("checks") or []
    return "%s to the last known-good configuration %s, PID %s, ready in %s s, %d check(s) passed%s" % (
        rollback.get("action"), str(rollback.get("config_hash", ""))[:12], rollback.get("pid"), rollback.get("ready_s"),
        len(checks), (" (%s)" % "; ".join(str(c) for c in checks)) if checks and len(checks) <= 3 else "")


def runs_text(entry: t.Mapping[str, t.Any]) -> str:
    runs = entry.get("runs")
    words = {"new": "runs the NEW configuration", "good": "runs the previous (last known-good) configuration",
             "other": "runs ANOTHER configuration (neither the new one nor the last known-good one)",
             "down": "runs NO managed server", "unknown": "not read (unreachable or failed before the end)"}
    text = words.get(runs, str(runs))
    if entry.get("pid"):
        text += ", PID %s" % entry["pid"]
    if entry.get("note"):
        text += " (%s)" % entry["note"]
    return text


def markdown(report: t.Mapping[str, t.Any]) -> str:
    plan, outcome = report["plan"], report["outcome"]
    bench = plan.get("benchmark") or {}
    out = ["# vLLM rollout", "",
           "**%s**: %s" % (outcome.get("status", "?").upper(), outcome.get("reason", "")), "",
           "New configuration `%s`: %s. Hosts in order: %s; batches of %s, the first is the canary%s." % (
               str(plan.get("config_hash", ""))[:12], plan.get("config_shown") or "?", ", ".join(plan.get("hosts", [])),
               plan.get("serial"), ", every batch gated" if plan.get("every_batch") else ""),
           "Each measurement: %s endpoint, %s input words, %s output tokens, %s requests at concurrency %s, %s repeats." % (
               bench.get("endpoint", "?"), bench.get("input_len", "?"), bench.get("output_len", "?"), bench.get("num_requests", "?"),
               bench.get("concurrency", "?"), bench.get("repeats", "?")) + workload_text(bench.get("workload")),
           "Rule: a metric regresses when the canary is worse than the baseline by more than its threshold (%s%% for decode "
           "tok/s per stream, %s%% for median TTFT) AND by more than the run-to-run spread (max - min over the repeats, the "
           "larger side's); a TTFT rise must also exceed %s ms. p99 TTFT is reported, not gated." % (
               plan.get("threshold_pct"), plan.get("ttft_threshold_pct"), plan.get("ttft_floor_ms"))]
    for verdict in report["batches"]:
        out += ["", "## Batch %s: %s" % (verdict["batch"], "HALT" if verdict["halt"] else "pass"), "",
                "| host | metric | baseline | canary | change | spread | threshold | verdict |",
                "|---|---|---:|---:|---:|---:|---:|---|"] + _metric_rows(verdict)
        out += ["", verdict["reason"]]
        ups = startup_lines(verdict)
        if ups:
            out += [""] + ["- %s: %s" % (name, words) for name, words in ups]
    out += ["", "## Rollback", ""]
    if report["rollbacks"]:
        out += ["- %s: %s" % (r.get("host"), rollback_text(r)) for r in report["rollbacks"]]
    else:
        out.append("None.")
    out += ["", "## What runs where", ""] + ["- %s: %s" % (e.get("host"), runs_text(e)) for e in report["fleet"]]
    chart = report.get("chart")
    out += ["", "## Files", "", "- `baseline/`, `canary/`: each measurement, every repeat's figures",
            "- `batches/`: each gated batch's verdicts", "- `report.json`: the figures of this summary",
            "- `report.html`: this report as one page, with the gate's charts (open it in a browser)",
            "- `%s`: baseline vs canary decode tok/s per host (min - max over the repeats)" % chart if chart
            else "- chart: %s" % report.get("chart_note")]
    return "\n".join(out) + "\n"


def chart_png(report: t.Mapping[str, t.Any]) -> t.Tuple[t.Optional[bytes], str]:
    """chart.png: baseline and canary decode tok/s per gated host, with min - max bars; or (None, why)."""
    pyplot, why = chart_pyplot()
    if pyplot is None:
        return None, why
    rows = [(h["host"], m) for v in report["batches"] for h in v["hosts"] for m in h["metrics"] if m["metric"] == "decode_tok_s"]
    if not rows:
        return None, "skipped: nothing was measured"
    figure, axes = pyplot.subplots(figsize=(max(6.0, 1.8 * len(rows) + 2), 4.5))
    for offset, side, color in ((-0.2, "baseline", "tab:blue"), (0.2, "canary", "tab:orange")):
        values = [m[side] or 0.0 for _h, m in rows]
        runs = [m[side + "_runs"] or [0.0] for _h, m in rows]
        low = [v - min(r) for v, r in zip(values, runs)]
        high = [max(r) - v for v, r in zip(values, runs)]
        positions = [i + offset for i in range(len(rows))]
        axes.bar(positions, values, 0.4, yerr=[low, high], capsize=3, label=side, color=color)
        for position, value in zip(positions, values):
            if value:
                axes.text(position, value, "%.1f" % value, ha="center", va="bottom", fontsize="small")
    axes.set_xticks(list(range(len(rows))))
    axes.set_xticklabels([h for h, _m in rows])
    axes.set_ylabel("median decode tok/s per stream (min-max over repeats)")
    axes.set_title("vLLM rollout: %s" % report["outcome"].get("status", "?"))
    return chart_bytes(pyplot, figure, axes)
