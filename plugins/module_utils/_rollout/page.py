# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_rollout): see decision.py.

"""report.html of a rollout: one self-contained page (the matrix page's rules and sections, _matrix/page): the
outcome and its reason, the hosts in order and which batches are gated, each gated batch's baseline against canary
per host (charts of the gated metrics with the min - max over the repeats, and every metric's figures and verdict in a
table), the latency percentiles of each side, the workload and, when the results carry them, per-turn TTFT, schedule
slip and prefix cache; then the rollbacks and what runs where.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._html import document, esc
from ansible_collections.gpuops.fleet.plugins.module_utils._matrix.analysis import extras, workloads
from ansible_collections.gpuops.fleet.plugins.module_utils._matrix.chart_svg import Bar, bar_chart
from ansible_collections.gpuops.fleet.plugins.module_utils._matrix.page import (
    STYLE, latency_section, num, optional_sections, row, section, short_hash, table, text, workload_section)
from ansible_collections.gpuops.fleet.plugins.module_utils._rollout.report import rollback_text, runs_text, startup_lines

PAGE = "report.html"
SIDES = ("baseline", "canary")
MEASURED = {"baseline": "baselines", "canary": "canaries"}  # where a batch's verdict keeps each side's measurements
GATE_HEAD = ("host", "metric", "baseline", "canary", "change", "spread", "threshold", "verdict")


def _gate_chart(verdict: t.Mapping[str, t.Any], metric: str) -> str:
    """Baseline and canary of one metric per host of the batch, whiskers from the min to the max over the repeats."""
    groups = []
    unit = label = metric
    for host in verdict["hosts"]:
        found = next((m for m in host["metrics"] if m["metric"] == metric), None)
        if found is None:
            continue
        unit, label = found["unit"], found["label"]
        groups.append((host["host"], [Bar(side, found[side], min(found[side + "_runs"]) if found[side + "_runs"] else None,
                                          max(found[side + "_runs"]) if found[side + "_runs"] else None) for side in SIDES]))
    if not groups:
        return ""
    return bar_chart(groups, unit, "%s, batch %s: baseline against the new configuration (whiskers: min - max over the repeats)" % (
        label, verdict["batch"]), "gate-%s-%s" % (verdict["batch"], metric))


def _gate_rows(verdict: t.Mapping[str, t.Any]) -> t.List[str]:
    rows = []
    for host in verdict["hosts"]:
        for m in host["metrics"]:
            rows.append('<tr class="%s" data-host="%s" data-metric="%s">%s</tr>' % (
                "regression" if m["regression"] else "ok", esc(host["host"]), esc(m["metric"]), "".join([
                    text(host["host"]), text(m["label"]), num(m["baseline"]), num(m["canary"]), num(m["change_pct"], 1, True, "%"),
                    num(m["spread"]), num(m["threshold_pct"], 1, suffix="%"),
                    '<td class="%s">%s</td>' % ("bad" if m["regression"] else "", esc(m["verdict"]))])))
        if not host["metrics"]:
            rows.append('<tr class="failed" data-host="%s" data-metric=""><td>%s</td><td colspan="7" class="bad">%s</td></tr>' % (
                esc(host["host"]), esc(host["host"]), esc(host["reason"])))
    return rows


def _batch_section(verdict: t.Mapping[str, t.Any]) -> str:
    verdicts = "".join('<li data-host="%s" data-verdict="%s"><b>%s</b>: %s</li>' % (
        esc(h["host"]), esc(h["verdict"]), esc(h["verdict"].upper()), esc(h["reason"])) for h in verdict["hosts"])
    ups = "".join('<li data-host="%s">%s</li>' % (esc(name), esc(words)) for name, words in startup_lines(verdict))
    verdicts += '</ul><ul class="startups">%s' % ups if ups else ""
    return section("batch-%s" % verdict["batch"], "Batch %s: %s" % (verdict["batch"], "HALT" if verdict["halt"] else "pass"), "".join((
        _gate_chart(verdict, "decode_tok_s"), _gate_chart(verdict, "median_ttft_ms"),
        table("gate-table-%s" % verdict["batch"], GATE_HEAD, _gate_rows(verdict)), "<ul class=\"verdicts\">%s</ul>" % verdicts)))


def _sides(report: t.Mapping[str, t.Any]) -> t.List[t.Tuple[str, t.Mapping[str, t.Any]]]:
    """(host and side, the measurement) of every gated host with a measurement, baseline then canary."""
    found = []
    for verdict in report["batches"]:
        for host in verdict["hosts"]:
            for side in SIDES:
                measured = (verdict.get(MEASURED[side]) or {}).get(host["host"])
                if isinstance(measured, dict) and measured.get("runs"):
                    found.append(("%s %s" % (host["host"], side), measured))
    return found


def render_page(report: t.Mapping[str, t.Any]) -> str:
    """report.html of the rollout ``report`` (report.build(), as report.json holds it)."""
    plan, outcome = report["plan"], report["outcome"]
    status = str(outcome.get("status", "?"))
    sides = _sides(report)
    series = [(label, extras([measured])) for label, measured in sides]
    rollbacks = [row([text(r.get("host")), text(r.get("status")), text(rollback_text(r))], host=r.get("host"), status=r.get("status"))
                 for r in report["rollbacks"]]
    fleet = [row([text(e.get("host")), text(e.get("runs")), text(runs_text(e))], host=e.get("host"), runs=e.get("runs"))
             for e in report["fleet"]]
    body = "".join((
        "<h1>vLLM rollout</h1>",
        '<p class="meta">new configuration <code title="%s">%s</code> (%s); %d host(s) in order: <span id="plan-hosts">%s</span>, '
        'in batches of %s; the first batch is the canary, %s. A regression: decode tok/s '
        'per stream down by more than %s%%, or median TTFT up by more than %s%% (and %s ms), each beyond the run-to-run spread. '
        'p99 TTFT is reported, not gated. Each measurement: %s endpoint, %s input words, %s output tokens, %s requests at '
        'concurrency %s, %s repeats.</p>' % (
            esc(plan.get("config_hash")), esc(short_hash(plan.get("config_hash"))), esc(plan.get("config_shown") or "?"),
            len(plan.get("hosts", [])), esc(", ".join(str(host) for host in plan.get("hosts", []))), esc(plan.get("serial")),
            "every batch is gated by a benchmark" if plan.get("every_batch")
            else "the only batch gated by a benchmark: the later ones roll out once it passes",
            esc(plan.get("threshold_pct")), esc(plan.get("ttft_threshold_pct")),
            esc(plan.get("ttft_floor_ms")), *(esc((plan.get("benchmark") or {}).get(key, "?")) for key in (
                "endpoint", "input_len", "output_len", "num_requests", "concurrency", "repeats"))),
        '<p class="verdict %s" id="outcome" data-status="%s">ROLLOUT %s: %s</p>' % (
            "good" if status == "passed" else "bad" if status == "halted" else "", esc(status), esc(status.upper()),
            esc(outcome.get("reason", ""))),
        workload_section(workloads([measured for _l, measured in sides])),
        "".join(_batch_section(verdict) for verdict in report["batches"]) or section("batches", "Gate", "<p>No batch was gated.</p>"),
        latency_section(series, "host and side") if series else "",
        optional_sections(series, "host and side"),
        section("rollbacks", "Rollback", table("rollback-table", ("host", "status", "what happened"), rollbacks) if rollbacks
                else '<p class="none">None.</p>'),
        section("fleet", "What runs where", table("fleet-table", ("host", "runs", "in words"), fleet)),
        section("files", "Files", "<ul><li><code>baseline/</code>, <code>canary/</code>: each measurement, every repeat's figures</li>"
                "<li><code>batches/</code>: each gated batch's verdicts</li><li><code>report.json</code>: the figures of this page</li>"
                "<li><code>summary.md</code>: the same in Markdown</li></ul>"),
    ))
    return document("vLLM rollout: %s" % status, STYLE, body)
