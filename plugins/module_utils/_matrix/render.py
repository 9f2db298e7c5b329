# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_matrix): the report of playbooks/benchmark_matrix.yml, written on the controller from the run folder's
# files. It stands alone: it imports only the flat files of module_utils, no other package, never a module or a plugin.

"""The benchmark matrix report's text: results.csv (one row per measurement), summary.md (the tables, the winner and
the judgement of its margin, the failures, what each server was left running) and chart.png.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import csv
import io
import json
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._matrix.analysis import REQUESTS_FAILED, requests_failed, runs_of, startup_words, status

CSV_COLUMNS = [
    "host", "config", "round", "order", "status", "decode_tok_s", "median_tpot_ms", "median_ttft_ms",
    "median_itl_ms", "output_throughput", "request_throughput", "completed", "failed", "server_pid",
    "env", "args", "started", "finished", "stage", "error", "raw_file", "startup_s", "compile_cache",
]
NCCL_NOTE = (
    "NCCL's documentation discourages setting `NCCL_PROTO` in production: NCCL picks the protocol per "
    "message size itself, and a forced protocol can be slower elsewhere (other message sizes, other "
    "topologies, other NCCL versions). `LL128` can silently corrupt data on platforms that do not support it. "
    "Confirm the gain on the production workload and NCCL version before adopting it."
)

Report = t.Dict[str, t.Any]
Configs = t.Dict[str, t.Dict[str, t.Any]]


def csv_row(cell: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    """One measurement as a row of results.csv (a missing value is an empty field)."""
    summary = cell.get("summary") or {}
    server = cell.get("server") or {}
    row = {key: cell.get(key) for key in ("host", "config", "round", "order", "status", "started", "finished", "raw_file")}
    row.update({key: summary.get(key) for key in ("decode_tok_s", "median_tpot_ms", "median_ttft_ms", "median_itl_ms",
                                                  "output_throughput", "request_throughput", "completed", "failed")})
    row.update({
        "server_pid": server.get("pid"),
        "env": json.dumps(cell.get("env") or {}, sort_keys=True), "args": json.dumps(cell.get("args") or []),
        "stage": cell.get("stage", ""), "error": " ".join(str(cell.get("error") or "").split()),
    })
    up = server.get("startup") if isinstance(server.get("startup"), dict) else {}
    compiled = [phase.get("cache") for phase in up.get("phases") or [] if isinstance(phase, dict) and phase.get("name") == "compile"]
    row.update(startup_s=up.get("total_s"), compile_cache=compiled[0] if compiled else None)
    if status(cell) == REQUESTS_FAILED:
        row.update(status=REQUESTS_FAILED, stage=cell.get("stage") or "benchmark", error=requests_failed(runs_of(cell)))
    return {key: ("" if value is None else value) for key, value in row.items()}


def results_csv(cells: t.Sequence[t.Dict[str, t.Any]]) -> str:
    """The content of results.csv."""
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    for cell in cells:
        writer.writerow(csv_row(cell))
    return out.getvalue()


def env_text(config: t.Dict[str, t.Any]) -> str:
    """A configuration's environment and arguments in words (a variable set to null is removed from the inventory's)."""
    env = config.get("env") or {}
    words = ["%s=%s" % (k, "(removed)" if v is None else v) for k, v in sorted(env.items())]
    words += [str(a) for a in config.get("args") or []]
    return " ".join(words) if words else "(inventory's own)"


def fmt(value: t.Optional[float], digits: int = 2, sign: bool = False) -> str:
    """A figure with ``digits`` decimals (a sign when asked), n/a when unknown."""
    if value is None:
        return "n/a"
    return ("%+.*f" if sign else "%.*f") % (digits, value)


def _pct(value: t.Optional[float]) -> str:
    return fmt(value, 1, True) + ("%" if value is not None else "")


def sets_nccl_proto(config: t.Dict[str, t.Any]) -> bool:
    return bool((config.get("env") or {}).get("NCCL_PROTO"))


def table(report: Report, configs: Configs, env: t.Dict[str, str]) -> t.List[str]:
    """The Markdown table of one host's (or the fleet's) figures per configuration."""
    lines = [
        "| configuration | environment / args | ok / runs | median decode tok/s | min - max | vs baseline"
        " | median TPOT ms | vs baseline | spread tok/s | start-up |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in report["names"]:
        s = configs[name]
        label = "%s (baseline)" % name if name == report["baseline"] else name
        lines.append("| %s | %s | %d / %d | %s | %s - %s | %s | %s | %s | %s | %s |" % (
            label, env[name], s["ok"], s["runs"], fmt(s["decode_tok_s"]), fmt(s["decode_tok_s_min"]),
            fmt(s["decode_tok_s_max"]), _pct(s["change_decode_pct"]), fmt(s["median_tpot_ms"]), _pct(s["change_tpot_pct"]),
            fmt(s["spread_tok_s"]), startup_words(s.get("startup"))))
    return lines


def winner_line(report: Report, configs: Configs, win: t.Dict[str, t.Any]) -> str:
    """The winner in one sentence, and whether its margin is larger than the run-to-run spread."""
    if win["config"] is None:
        return "No winner: no configuration was measured without a failure."
    best = configs[win["config"]]
    text = "Winner: **%s**, %s tok/s per stream" % (win["config"], fmt(best["decode_tok_s"]))
    if win["config"] != report["baseline"] and best["change_decode_pct"] is not None:
        text += " (%s%% vs the baseline configuration, %s)" % (fmt(best["change_decode_pct"], 1, True), report["baseline"])
    if win["runner_up"] is None:
        return text + "; the only configuration measured without a failure, so no margin."
    text += "; margin over %s: %s tok/s" % (win["runner_up"], fmt(win["margin_tok_s"]))
    if win["spread_tok_s"] is None:
        return text + "; the run-to-run spread is unknown (one round): run more rounds to judge the margin."
    if win["significant"]:
        return text + ", larger than the run-to-run spread (%s tok/s): a real difference." % fmt(win["spread_tok_s"])
    return text + ", NOT larger than the run-to-run spread (%s tok/s): within noise." % fmt(win["spread_tok_s"])


def workload_text(workload: t.Any) -> str:
    """The measurement's workload in a sentence (the plan's vllm_server_benchmark_workload); '' for synthetic prompts."""
    if not isinstance(workload, dict) or workload.get("kind", "synthetic") == "synthetic":
        return ""
    details = ", ".join("%s %s" % (key, workload[key]) for key in sorted(workload) if key != "kind" and workload[key] is not None)
    return " Workload: %s%s." % (workload["kind"], " (%s)" % details if details else "")


def _header(report: Report) -> t.List[str]:
    plan = report["plan"]
    bench = plan.get("benchmark") or {}
    return [
        "# vLLM benchmark matrix",
        "",
        "%d host(s) x %d configuration(s) x %d round(s), each round running every configuration in turn "
        "(forced restart, then one measurement); started %s." % (
            len(report["hosts"]), len(report["names"]), plan["repeats"], plan.get("started", "?")),
        "Each measurement: %s endpoint, %s input words, %s output tokens, %s requests at concurrency %s, "
        "%s warmup requests left out." % (
            bench.get("endpoint", "?"), bench.get("input_len", "?"), bench.get("output_len", "?"),
            bench.get("num_requests", "?"), bench.get("concurrency", "?"), bench.get("warmup_requests", "?"))
        + workload_text(bench.get("workload")),
        "decode tok/s = 1000 / median TPOT, one stream's decode rate; TPOT = (E2EL - TTFT) / (output tokens - 1), "
        "as vllm bench serve. Spread = max - min of decode tok/s over the rounds on one host (the largest host's "
        "across the fleet).",
    ]


def _host_section(report: Report, host: str, env: t.Dict[str, str], configs_by_name: t.Dict[str, t.Any]) -> t.List[str]:
    host_report = report["per_host"][host]
    out = ["", "## %s" % host, ""] + table(report, host_report["configs"], env)
    line = winner_line(report, host_report["configs"], host_report["winner"])
    win = host_report["winner"]["config"]
    fleet_win = report["winner"]["config"]
    if win is not None and sets_nccl_proto(configs_by_name[win]):
        # the note stands once, under the fleet's table, when the fleet's winner sets NCCL_PROTO too
        if fleet_win is not None and sets_nccl_proto(configs_by_name[fleet_win]):
            line += " (sets NCCL_PROTO: see the note above)"
        else:
            line += " Note on NCCL_PROTO: " + NCCL_NOTE
    out += ["", line]
    if host_report["missing"]:
        out += ["", "Not measured in every round on this host: %s." % ", ".join(host_report["missing"])]
    return out


def _failures(report: Report) -> t.List[str]:
    if not report["failures"]:
        return ["", "## Failures", "", "None."]
    out = ["", "## Failures", "", "| host | configuration | round | stage | task | error |", "|---|---|---:|---|---|---|"]
    for failure in report["failures"]:
        error = " ".join(str(failure.get("error") or "").split()).replace("|", "/")
        if len(error) > 300:
            error = error[:297] + "..."
        out.append("| %s | %s | %s | %s | %s | %s |" % (
            failure["host"], failure["config"], failure["round"], failure.get("stage") or "?", failure.get("task") or "?", error))
    return out + ["", "A failed measurement is left out of every median; its configuration cannot win. "
                      "Each one's full record (with the server's log tail) is its raw file."]


def markdown(report: Report) -> str:
    """The content of summary.md, up to the configuration to leave running (left_running_lines() add what runs)."""
    configs_by_name = {str(c["name"]): c for c in report["plan"]["configs"]}
    env = {n: env_text(configs_by_name[n]) for n in report["names"]}
    out = _header(report) + ["", "## Fleet", ""] + table(report, report["fleet"], env)
    out += ["", winner_line(report, report["fleet"], report["winner"])]
    if report["winner"]["config"] is not None and sets_nccl_proto(configs_by_name[report["winner"]["config"]]):
        out += ["", "> **Note on NCCL_PROTO:** " + NCCL_NOTE]
    for host in report["hosts"]:
        out += _host_section(report, host, env, configs_by_name)
    out += _failures(report)
    out += ["", "## Files", "",
            "- `results.csv`: one row per host x configuration x round (%d)" % report["cells"],
            "- `raw/`: each measurement's full record (every repeat's figures, the server it measured)",
            "- `report.json`: the figures of this summary",
            "- `report.html`: this report as one page, with its charts (open it in a browser)"]
    chart = report.get("chart")
    out.append("- `%s`: median decode tok/s per configuration and host" % chart if chart else "- chart: %s" % report.get("chart_note"))
    out += ["", "## Left running", "",
            "Configuration to leave running: **%s** (%s)." % (report["leave"]["config"], report["leave"]["reason"])]
    return "\n".join(out) + "\n"


def left_running_lines(report: Report, left: t.Sequence[t.Dict[str, t.Any]]) -> t.List[str]:
    """One line per host: the configuration its server runs now, why it could not be left running one, or not reached."""
    lines = []
    for entry in left:
        if entry.get("status") == "ok":
            lines.append("- %s: runs **%s** (server PID %s, %s)" % (entry["host"], entry["config"], entry.get("pid"), entry.get("action")))
        else:
            lines.append("- %s: FAILED to leave %s running at \"%s\": %s" % (
                entry["host"], entry["config"], entry.get("task"), " ".join(str(entry.get("msg")).split())))
    reached = [e.get("host") for e in left]
    lines += ["- %s: not reached (unreachable, or failed before the end)" % h for h in report["hosts"] if h not in reached]
    return lines


def chart_pyplot() -> t.Tuple[t.Any, str]:
    """(matplotlib's pyplot on the Agg backend, ''), or (None, why) when matplotlib is not importable."""
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
        matplotlib.use("Agg")
        from matplotlib import pyplot  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        return None, "skipped: matplotlib is not importable on the controller (%s); pip install matplotlib" % exc
    return pyplot, ""


def chart_bytes(pyplot: t.Any, figure: t.Any, axes: t.Any) -> t.Tuple[bytes, str]:
    """(the PNG's bytes, ''): the chart with its legend, laid out tight at 100 dpi; the figure is closed."""
    axes.legend(fontsize="small")
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=100)
    pyplot.close(figure)
    return out.getvalue(), ""


def chart_png(report: Report) -> t.Tuple[t.Optional[bytes], str]:
    """chart.png's bytes, or (None, why) when matplotlib is not importable or nothing was measured."""
    pyplot, why = chart_pyplot()
    if pyplot is None:
        return None, why
    names, hosts = report["names"], report["hosts"]
    if not any(report["fleet"][n]["decode_tok_s"] is not None for n in names):
        return None, "skipped: nothing was measured"
    figure, axes = pyplot.subplots(figsize=(max(6.0, 1.6 * len(names) * max(1, len(hosts)) ** 0.5 + 2), 4.5))
    width = 0.8 / max(1, len(hosts))
    for i, host in enumerate(hosts):
        configs = report["per_host"][host]["configs"]
        values = [configs[n]["decode_tok_s"] or 0.0 for n in names]
        low = [(configs[n]["decode_tok_s"] or 0.0) - (configs[n]["decode_tok_s_min"] or configs[n]["decode_tok_s"] or 0.0)
               for n in names]
        high = [(configs[n]["decode_tok_s_max"] or configs[n]["decode_tok_s"] or 0.0) - (configs[n]["decode_tok_s"] or 0.0)
                for n in names]
        positions = [j - 0.4 + width * (i + 0.5) for j in range(len(names))]
        axes.bar(positions, values, width, yerr=[low, high], capsize=3, label=host)
        for position, value in zip(positions, values):
            if value:
                axes.text(position, value, "%.1f" % value, ha="center", va="bottom", fontsize="small")
    for j, name in enumerate(names):
        if report["fleet"][name]["ok"] == 0:
            axes.text(j, 0, "failed", ha="center", va="bottom", color="red")
    axes.set_xticks(list(range(len(names))))
    axes.set_xticklabels(["%s%s" % (n, " (baseline)" if n == report["baseline"] else "") for n in names])
    axes.set_ylabel("median decode tok/s per stream (min-max over rounds)")
    axes.set_title("vLLM benchmark matrix" + (": %s wins" % report["winner"]["config"] if report["winner"]["config"] else ""))
    return chart_bytes(pyplot, figure, axes)
