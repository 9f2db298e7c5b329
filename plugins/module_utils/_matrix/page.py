# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_matrix): the report of playbooks/benchmark_matrix.yml, written on the controller from the run folder's
# files. It stands alone: it imports only the flat files of module_utils, no other package, never a module or a plugin.

"""report.html of a benchmark matrix, and the sections it shares with a rollout's page.

One self-contained page (the rules of _html: nothing fetched, no script at all, every value escaped): the winner,
the workload when the results name one, decode tok/s per configuration and host with the min - max over the rounds,
the TTFT, ITL and TPOT percentiles per configuration, and, only when the results carry them, TTFT per turn of a
session workload, the client's schedule slip of a replayed trace and the server's prefix cache; then the failures and
what each server was left running. Every chart (chart_svg) has its figures in a table beside it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._html import document, esc
from ansible_collections.gpuops.fleet.plugins.module_utils._matrix.analysis import LATENCIES, PERCENTILES, SLIP_FIGURES, TURN_FIGURES, number, startup_words
from ansible_collections.gpuops.fleet.plugins.module_utils._matrix.chart_svg import Bar, bar_chart
from ansible_collections.gpuops.fleet.plugins.module_utils._matrix.render import env_text, fmt, winner_line

PAGE = "report.html"
# a replayed trace whose p99 request left the client later than this behind its schedule measured the client too
SLIP_WARN_MS = 10.0
LATENCY_LABELS = {"ttft": "TTFT", "itl": "ITL", "tpot": "TPOT"}

STYLE = """
body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto 40px;padding:0 16px;max-width:1200px;color:#1d1d1f;background:#fff}
h1{font-size:20px;margin:14px 0 2px}h2{font-size:16px;margin:22px 0 6px}h3{font-size:14px;margin:12px 0 4px}
.meta{color:#555;margin:0 0 8px}.note{color:#555}
.verdict{font-size:15px;font-weight:600;border-radius:6px;padding:6px 10px;margin:8px 0;background:#eef3fb}
.verdict.bad{background:#fdecee;color:#8b0016}.verdict.good{background:#e6f4ea;color:#1e6b35}
.warn{border-left:4px solid #d9534f;background:#fdecee;padding:6px 10px;margin:8px 0}
.wrap{overflow-x:auto}
table{border-collapse:collapse;margin:4px 0 10px}th,td{border-bottom:1px solid #e4e4ea;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f7;font-weight:600}td:first-child{white-space:nowrap}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.failed td{background:#fdecee}.na{color:#999}.bad{color:#b00020}
figure.chart{margin:10px 0}figcaption{font-weight:600;margin:0 0 2px}svg.chart{display:block;max-width:100%;height:auto}
code{font:12px ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
@media print{body{max-width:none;margin:0}section{break-inside:avoid}.wrap{overflow:visible}}
"""

Series = t.Sequence[t.Tuple[str, t.Mapping[str, t.Any]]]


def num(value: t.Any, digits: int = 2, sign: bool = False, suffix: str = "") -> str:
    """A table cell of a figure: right-aligned, its exact value in data-value, N/A when unknown."""
    figure = number(value)
    if figure is None:
        return '<td class="num" data-value=""><span class="na">N/A</span></td>'
    return '<td class="num" data-value="%s">%s%s</td>' % (esc(repr(figure)), esc(fmt(figure, digits, sign)), esc(suffix))


def text(value: t.Any) -> str:
    return "<td>%s</td>" % esc(value)


def table(table_id: str, head: t.Sequence[str], rows: t.Sequence[str]) -> str:
    """A table (``rows`` are whole ``<tr>`` elements) in a box that scrolls sideways on a narrow screen."""
    return '<div class="wrap"><table id="%s"><thead><tr>%s</tr></thead><tbody>%s</tbody></table></div>' % (
        esc(table_id), "".join("<th>%s</th>" % esc(h) for h in head), "".join(rows))


def row(cells: t.Sequence[str], **data: t.Any) -> str:
    attrs = "".join(' data-%s="%s"' % (key.replace("_", "-"), esc(value)) for key, value in data.items())
    return "<tr%s>%s</tr>" % (attrs, "".join(cells))


def section(section_id: str, title: str, body: str) -> str:
    return '<section id="%s"><h2>%s</h2>%s</section>' % (esc(section_id), esc(title), body)


def short_hash(value: t.Any) -> str:
    return str(value or "")[:12] or "N/A"


def workload_section(workloads: t.Sequence[t.Mapping[str, t.Any]]) -> str:
    """What was sent: each workload's kind, file, hash (its first 12 digits, the whole in the title) and the sampled
    requests' prompt and output lengths; empty when the results name no workload."""
    if not workloads:
        return ""
    parts = []
    for i, workload in enumerate(workloads):
        lengths = []
        for key, label in (("prompt_len", "prompt length"), ("output_len", "output length")):
            dist = workload.get(key) if isinstance(workload.get(key), dict) else {}
            lengths.append(row([text(label)] + [num(dist.get(f), 0) for f in ("min", "p50", "p90", "max")], length=key))
        source = ('file <code>%s</code>, sha256 <code title="%s">%s</code>' % (
            esc(workload.get("file")), esc(workload.get("sha256")), esc(short_hash(workload.get("sha256"))))
            if workload.get("file") else "prompts generated by the client (no file)")
        parts.append(
            '<p class="workload" data-kind="%s" data-sha256="%s"><b>%s</b> workload, %s, %s request(s)</p>' % (
                esc(workload.get("kind")), esc(workload.get("sha256")), esc(workload.get("kind") or "?"), source,
                esc(workload.get("requests", "N/A")))
            + table("workload-lengths-%d" % (i + 1), ("tokens", "min", "p50", "p90", "max"), lengths))
    if len(workloads) > 1:
        parts.insert(0, '<p class="warn">The measurements ran %d different workloads: their figures do not compare.</p>' % len(workloads))
    return section("workload", "Workload", "".join(parts))


def _latency(figures: t.Mapping[str, t.Any], name: str) -> t.Mapping[str, t.Any]:
    return (figures.get("latency") or {}).get("%s_ms" % name) or {}


def latency_section(series: Series, what: str) -> str:
    """TTFT and ITL percentiles (p50, p90, p99) per ``what`` as charts, and TTFT, ITL and TPOT in a table."""
    charts = "".join(bar_chart(
        [(label, [Bar(p, _latency(figures, name).get(p)) for p in PERCENTILES]) for label, figures in series],
        "ms", "%s percentiles per %s (ms)" % (LATENCY_LABELS[name], what), "%s-chart" % name) for name in ("ttft", "itl"))
    rows = [row([text(label)] + [num(_latency(figures, name).get(p)) for name in LATENCIES for p in PERCENTILES],
                series=label) for label, figures in series]
    head = [what] + ["%s %s ms" % (LATENCY_LABELS[name], p) for name in LATENCIES for p in PERCENTILES]
    return section("latency", "Latency percentiles", charts + table("latency-table", head, rows)
                   + '<p class="note">Each the median over the repeats of the measurements without a failure.</p>')


def per_turn_section(series: Series, what: str) -> str:
    """TTFT per turn of a session workload (p50 per turn and ``what`` as a chart, every figure in a table); empty when
    no result has figures per turn."""
    found = [(label, figures["per_turn"]) for label, figures in series if figures.get("per_turn")]
    if not found:
        return ""
    turns = sorted({entry["turn"] for _l, entries in found for entry in entries})
    by_turn = {(label, entry["turn"]): entry for label, entries in found for entry in entries}
    chart = bar_chart([("turn %d" % turn, [Bar(label, ((by_turn.get((label, turn)) or {}).get("ttft_ms") or {}).get("p50"))
                                           for label, _e in found]) for turn in turns],
                      "ms", "median TTFT per turn (ms)", "turn-chart")
    rows = [row([text(label), text(entry["turn"]), num(entry["requests"], 0)]
                + [num((entry["ttft_ms"] or {}).get(f)) for f in TURN_FIGURES] + [num(entry["cached_tokens"], 0)],
                series=label, turn=entry["turn"]) for label, entries in found for entry in entries]
    return section("per-turn", "TTFT per turn", chart + table(
        "turn-table", [what, "turn", "requests"] + ["TTFT %s ms" % f for f in TURN_FIGURES] + ["cached tokens"], rows)
        + '<p class="note">The first turn sends a fresh prompt; each later one the conversation so far, which the server\'s '
          'prefix cache can serve. Each figure the median over the measurements.</p>')


def slip_section(series: Series, what: str) -> str:
    """How late the client sent a replayed trace's requests against its schedule, with a warning when the p99 is more
    than SLIP_WARN_MS; empty when no result has a schedule slip."""
    found = [(label, figures["schedule_slip_ms"]) for label, figures in series if figures.get("schedule_slip_ms")]
    if not found:
        return ""
    late = [(label, slip["p99"]) for label, slip in found if slip.get("p99") is not None and slip["p99"] > SLIP_WARN_MS]
    warning = ('<p class="warn" id="slip-warning">The client, not the server, was late: p99 schedule slip %s, more than %s ms. '
               "These requests left the client behind the trace's schedule, so the load was lighter and later than the trace "
               "says; measure with a faster client (fewer streams per process, a less loaded controller) before judging the "
               "server.</p>" % (esc(", ".join("%s ms for %s" % (fmt(v, 1), label) for label, v in late)), esc(fmt(SLIP_WARN_MS, 0)))
               if late else "")
    chart = bar_chart([(label, [Bar(f, slip.get(f)) for f in SLIP_FIGURES if f != "mean"]) for label, slip in found],
                      "ms", "schedule slip of the client (ms)", "slip-chart")
    rows = [row([text(label)] + [num(slip.get(f)) for f in SLIP_FIGURES], series=label) for label, slip in found]
    return section("slip", "Schedule slip (the client's lateness)", warning + chart + table(
        "slip-table", [what] + ["slip %s ms" % f for f in SLIP_FIGURES], rows)
        + '<p class="note">How much later than the trace\'s timestamp the client sent each request: the client\'s own delay, '
          'not the server\'s. Each figure the largest over the measurements.</p>')


def prefix_cache_section(series: Series, what: str) -> str:
    """The server's prefix cache queries, hits and hit rate; empty when no result has them."""
    found = [(label, figures["prefix_cache"]) for label, figures in series if figures.get("prefix_cache")]
    if not found:
        return ""
    rows = [row([text(label), num(cache.get("queries"), 0), num(cache.get("hits"), 0),
                 num(None if cache.get("hit_rate") is None else 100.0 * cache["hit_rate"], 1, suffix=" %")], series=label)
            for label, cache in found]
    return section("prefix-cache", "Prefix cache (the server's counters)", table(
        "prefix-cache-table", [what, "queries (tokens)", "hits (tokens)", "hit rate"], rows))


def optional_sections(series: Series, what: str) -> str:
    return per_turn_section(series, what) + slip_section(series, what) + prefix_cache_section(series, what)


def _config_rows(report: t.Mapping[str, t.Any], configs: t.Mapping[str, t.Any], env: t.Mapping[str, str], host: str = "") -> t.List[str]:
    rows = []
    for name in report["names"]:
        s = configs[name]
        label = "%s (baseline)" % name if name == report["baseline"] else name
        cells = ([text(host)] if host else []) + [
            text(label), "<td><code>%s</code></td>" % esc(env[name]), "<td>%d / %d</td>" % (s["ok"], s["runs"]),
            num(s["decode_tok_s"]), num(s["decode_tok_s_min"]), num(s["decode_tok_s_max"]), num(s["change_decode_pct"], 1, True, "%"),
            num(s["median_tpot_ms"]), num(s["change_tpot_pct"], 1, True, "%"), num(s["spread_tok_s"]),
            '<td class="startup">%s</td>' % esc(startup_words(s.get("startup")))]
        rows.append('<tr class="%s" data-config="%s"%s>%s</tr>' % (
            "failed" if s["failed"] else "ok", esc(name), ' data-host="%s"' % esc(host) if host else "", "".join(cells)))
    return rows


CONFIG_HEAD = ("configuration", "environment / args", "ok / runs", "median decode tok/s", "min", "max", "vs baseline",
               "median TPOT ms", "vs baseline", "spread tok/s", "start-up")


def _decode_section(report: t.Mapping[str, t.Any], env: t.Mapping[str, str]) -> str:
    groups = [(name, [Bar(host, report["per_host"][host]["configs"][name]["decode_tok_s"],
                          report["per_host"][host]["configs"][name]["decode_tok_s_min"],
                          report["per_host"][host]["configs"][name]["decode_tok_s_max"]) for host in report["hosts"]])
              for name in report["names"]]
    chart = bar_chart(groups, "decode tok/s per stream", "median decode tok/s per stream, per configuration and host "
                      "(whiskers: min - max over the rounds)", "decode-chart")
    host_rows = [r for host in report["hosts"] for r in _config_rows(report, report["per_host"][host]["configs"], env, host)]
    return section("decode", "Decode tok/s per configuration", chart
                   + "<h3>Fleet</h3>" + table("decode-table", CONFIG_HEAD, _config_rows(report, report["fleet"], env))
                   + "<h3>Per host</h3>" + table("host-table", ("host",) + CONFIG_HEAD, host_rows)
                   + '<p class="note">decode tok/s = 1000 / median TPOT, one stream\'s decode rate; TPOT = (E2EL - TTFT) / '
                     '(output tokens - 1), as vllm bench serve. Spread = max - min over the rounds on one host (the largest '
                     'host\'s for the fleet).</p>')


def _failures_section(report: t.Mapping[str, t.Any]) -> str:
    if not report["failures"]:
        return section("failures", "Failures", '<p class="none">None.</p>')
    rows = [row([text(f.get("host")), text(f.get("config")), text(f.get("round")), text(f.get("stage") or "?"), text(f.get("task") or "?"),
                 text(" ".join(str(f.get("error") or "").split())[:300]), "<td><code>%s</code></td>" % esc(f.get("raw_file"))],
                host=f.get("host"), config=f.get("config")) for f in report["failures"]]
    return section("failures", "Failures (%d)" % len(report["failures"]), table(
        "failures-table", ("host", "configuration", "round", "stage", "task", "error", "raw file"), rows)
        + '<p class="note">A failed measurement is left out of every median; its configuration cannot win.</p>')


def _left_section(report: t.Mapping[str, t.Any]) -> str:
    body = '<p>Configuration to leave running: <b>%s</b> (%s).</p>' % (esc(report["leave"]["config"]), esc(report["leave"]["reason"]))
    left = report.get("left_running")
    if left is not None:
        rows = [row([text(e.get("host")), text(e.get("config")), text(e.get("status")),
                     text("PID %s, %s" % (e.get("pid"), e.get("action")) if e.get("status") == "ok"
                          else "failed at \"%s\": %s" % (e.get("task"), " ".join(str(e.get("msg")).split())))],
                    host=e.get("host"), status=e.get("status")) for e in left]
        reached = [e.get("host") for e in left]
        rows += [row([text(h), text(""), text("not reached"), text("unreachable, or failed before the end")], host=h, status="not reached")
                 for h in report["hosts"] if h not in reached]
        body += table("left-table", ("host", "configuration", "status", "server"), rows)
    return section("left-running", "Left running", body)


def render_page(report: t.Mapping[str, t.Any]) -> str:
    """report.html of the matrix ``report`` (analysis.analyse(), with left_running once known)."""
    plan = report["plan"]
    bench = plan.get("benchmark") or {}
    configs_by_name = {str(c["name"]): c for c in plan["configs"]}
    env = {n: env_text(configs_by_name[n]) for n in report["names"]}
    win = report["winner"]
    series = [(name, report["fleet"][name]) for name in report["names"]]
    body = "".join((
        "<h1>vLLM benchmark matrix</h1>",
        '<p class="meta">%d host(s) x %d configuration(s) x %d round(s), started %s. Each measurement: %s endpoint, %s input words, '
        '%s output tokens, %s requests at concurrency %s, %s warmup requests left out.</p>' % (
            len(report["hosts"]), len(report["names"]), plan["repeats"], esc(plan.get("started", "?")), esc(bench.get("endpoint", "?")),
            esc(bench.get("input_len", "?")), esc(bench.get("output_len", "?")), esc(bench.get("num_requests", "?")),
            esc(bench.get("concurrency", "?")), esc(bench.get("warmup_requests", "?"))),
        '<p class="verdict %s" id="winner" data-winner="%s" data-significant="%s">%s</p>' % (
            "good" if win["significant"] else "", esc(win["config"] or ""), "yes" if win["significant"] else "no",
            esc(winner_line(report, report["fleet"], win).replace("**", ""))),
        workload_section(report.get("workloads") or []),
        _decode_section(report, env),
        latency_section(series, "configuration"),
        optional_sections(series, "configuration"),
        _failures_section(report),
        _left_section(report),
        section("files", "Files", "<ul><li><code>results.csv</code>: one row per host x configuration x round (%d)</li>"
                "<li><code>raw/</code>: each measurement's full record</li><li><code>report.json</code>: the figures of this page</li>"
                "<li><code>summary.md</code>: the same in Markdown</li></ul>" % report["cells"]),
    ))
    return document("vLLM benchmark matrix", STYLE, body)
