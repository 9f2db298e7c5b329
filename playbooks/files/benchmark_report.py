# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The report of playbooks/benchmark_matrix.yml, written on the controller from its run folder.

    python benchmark_report.py report RUN_DIR        results.csv, summary.md, report.json, chart.png
    python benchmark_report.py left-running RUN_DIR  adds left_running.json to summary.md and report.json

The run folder holds plan.json (hosts, configurations, baseline, rounds) and raw/*.json, one file per host x
configuration x round, failed ones included. Figures follow vllm bench serve: TPOT of a request is
(E2EL - TTFT) / (output tokens - 1), and decode tok/s is 1000 / median TPOT, the decode rate of one stream.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import sys
import typing as t
from pathlib import Path

CSV_COLUMNS = [
    "host", "config", "round", "order", "status", "decode_tok_s", "median_tpot_ms", "median_ttft_ms",
    "median_itl_ms", "output_throughput", "request_throughput", "completed", "failed", "server_pid",
    "env", "args", "started", "finished", "stage", "error", "raw_file",
]
NCCL_NOTE = (
    "NCCL's documentation discourages setting `NCCL_PROTO` in production: NCCL picks the protocol per "
    "message size itself, and a forced protocol can be slower elsewhere (other message sizes, other "
    "topologies, other NCCL versions). `LL128` can silently corrupt data on platforms that do not support it. "
    "Confirm the gain on the production workload and NCCL version before adopting it."
)

Cell = t.Dict[str, t.Any]


def load_cells(run_dir: Path) -> t.List[Cell]:
    """Every raw measurement, in the order each host ran them."""
    cells = []
    for path in sorted((run_dir / "raw").glob("*.json")):
        cell = json.loads(path.read_text())
        cell["raw_file"] = "raw/" + path.name
        cells.append(cell)
    cells.sort(key=lambda c: (str(c.get("host")), int(c.get("order") or 0)))
    return cells


def number(value: t.Any) -> t.Optional[float]:
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def csv_row(cell: Cell) -> t.Dict[str, t.Any]:
    summary = cell.get("summary") or {}
    server = cell.get("server") or {}
    row = {
        "host": cell.get("host"), "config": cell.get("config"), "round": cell.get("round"),
        "order": cell.get("order"), "status": cell.get("status"),
        "decode_tok_s": summary.get("decode_tok_s"), "median_tpot_ms": summary.get("median_tpot_ms"),
        "median_ttft_ms": summary.get("median_ttft_ms"), "median_itl_ms": summary.get("median_itl_ms"),
        "output_throughput": summary.get("output_throughput"),
        "request_throughput": summary.get("request_throughput"),
        "completed": summary.get("completed"), "failed": summary.get("failed"),
        "server_pid": server.get("pid"),
        "env": json.dumps(cell.get("env") or {}, sort_keys=True), "args": json.dumps(cell.get("args") or []),
        "started": cell.get("started"), "finished": cell.get("finished"),
        "stage": cell.get("stage", ""), "error": " ".join(str(cell.get("error") or "").split()),
        "raw_file": cell.get("raw_file"),
    }
    return {key: ("" if value is None else value) for key, value in row.items()}


def write_csv(run_dir: Path, cells: t.Sequence[Cell]) -> None:
    with open(run_dir / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for cell in cells:
            writer.writerow(csv_row(cell))


def stats(cells: t.Sequence[Cell], spread_groups: t.Optional[t.Sequence[t.Sequence[Cell]]] = None) -> t.Dict[str, t.Any]:
    """Median decode tok/s and TPOT over the measured cells, and the run-to-run spread (max - min per host)."""
    ok = [c for c in cells if c.get("status") == "ok" and number((c.get("summary") or {}).get("decode_tok_s")) is not None]
    decode = [number(c["summary"]["decode_tok_s"]) for c in ok]
    tpot = [number(c["summary"].get("median_tpot_ms")) for c in ok]
    tpot = [v for v in tpot if v is not None]
    spreads = []
    for group in (spread_groups if spread_groups is not None else [cells]):
        values = [number((c.get("summary") or {}).get("decode_tok_s")) for c in group if c.get("status") == "ok"]
        values = [v for v in values if v is not None]
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


def analyse(plan: t.Dict[str, t.Any], cells: t.Sequence[Cell]) -> t.Dict[str, t.Any]:
    names = [str(c["name"]) for c in plan["configs"]]
    hosts = list(plan["hosts"])
    baseline = plan["baseline"]
    by = {(h, n): [c for c in cells if c.get("host") == h and c.get("config") == n] for h in hosts for n in names}
    per_host: t.Dict[str, t.Any] = {}
    for host in hosts:
        configs = {n: stats(by[(host, n)]) for n in names}
        for n in names:
            configs[n]["change_decode_pct"] = change(configs[n]["decode_tok_s"], configs[baseline]["decode_tok_s"])
            configs[n]["change_tpot_pct"] = change(configs[n]["median_tpot_ms"], configs[baseline]["median_tpot_ms"])
        ran = [n for n in names if configs[n]["runs"] > 0]
        per_host[host] = {"configs": configs,
                          "winner": winner(configs, [n for n in ran if configs[n]["failed"] == 0]),
                          "missing": [n for n in names if configs[n]["runs"] < plan["repeats"]]}
    fleet = {}
    for n in names:
        fleet[n] = stats([c for h in hosts for c in by[(h, n)]], [by[(h, n)] for h in hosts])
    for n in names:
        fleet[n]["change_decode_pct"] = change(fleet[n]["decode_tok_s"], fleet[baseline]["decode_tok_s"])
        fleet[n]["change_tpot_pct"] = change(fleet[n]["median_tpot_ms"], fleet[baseline]["median_tpot_ms"])
    eligible = [n for n in names if fleet[n]["ok"] > 0 and fleet[n]["failed"] == 0]
    best = winner(fleet, eligible)
    if plan.get("leave", "best") == "best" and best["config"] is not None:
        leave = {"mode": "best", "config": best["config"], "reason": "the fleet's winner"}
    elif plan.get("leave", "best") == "best":
        leave = {"mode": "best", "config": baseline,
                 "reason": "no configuration was measured without a failure: the baseline instead"}
    else:
        leave = {"mode": "baseline", "config": baseline, "reason": "vllm_benchmark_leave=baseline"}
    failures = [{key: c.get(key) for key in ("host", "config", "round", "stage", "task", "error", "log_tail", "raw_file")}
                for c in cells if c.get("status") != "ok"]
    return {"plan": plan, "names": names, "hosts": hosts, "baseline": baseline, "fleet": fleet, "winner": best,
            "per_host": per_host, "leave": leave, "failures": failures, "cells": len(cells)}


def env_text(config: t.Dict[str, t.Any]) -> str:
    env = config.get("env") or {}
    words = ["%s=%s" % (k, "(removed)" if v is None else v) for k, v in sorted(env.items())]
    words += [str(a) for a in config.get("args") or []]
    return " ".join(words) if words else "(inventory's own)"


def fmt(value: t.Optional[float], digits: int = 2, sign: bool = False) -> str:
    if value is None:
        return "n/a"
    return ("%+.*f" if sign else "%.*f") % (digits, value)


def sets_nccl_proto(config: t.Dict[str, t.Any]) -> bool:
    return bool((config.get("env") or {}).get("NCCL_PROTO"))


def table(report: t.Dict[str, t.Any], configs: t.Dict[str, t.Dict[str, t.Any]], env: t.Dict[str, str]) -> t.List[str]:
    lines = [
        "| configuration | environment / args | ok / runs | median decode tok/s | min - max | vs baseline"
        " | median TPOT ms | vs baseline | spread tok/s |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in report["names"]:
        s = configs[name]
        label = "%s (baseline)" % name if name == report["baseline"] else name
        lines.append("| %s | %s | %d / %d | %s | %s - %s | %s | %s | %s | %s |" % (
            label, env[name], s["ok"], s["runs"], fmt(s["decode_tok_s"]), fmt(s["decode_tok_s_min"]),
            fmt(s["decode_tok_s_max"]), fmt(s["change_decode_pct"], 1, True) + ("%" if s["change_decode_pct"] is not None else ""),
            fmt(s["median_tpot_ms"]), fmt(s["change_tpot_pct"], 1, True) + ("%" if s["change_tpot_pct"] is not None else ""),
            fmt(s["spread_tok_s"])))
    return lines


def winner_line(report: t.Dict[str, t.Any], configs: t.Dict[str, t.Dict[str, t.Any]], win: t.Dict[str, t.Any]) -> str:
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


def markdown(report: t.Dict[str, t.Any], chart: t.Optional[str], chart_note: str) -> str:
    plan = report["plan"]
    configs_by_name = {str(c["name"]): c for c in plan["configs"]}
    env = {n: env_text(configs_by_name[n]) for n in report["names"]}
    bench = plan.get("benchmark") or {}
    out = [
        "# vLLM benchmark matrix",
        "",
        "%d host(s) x %d configuration(s) x %d round(s), each round running every configuration in turn "
        "(forced restart, then one measurement); started %s." % (
            len(report["hosts"]), len(report["names"]), plan["repeats"], plan.get("started", "?")),
        "Each measurement: %s endpoint, %s input words, %s output tokens, %s requests at concurrency %s, "
        "%s warmup requests left out." % (
            bench.get("endpoint", "?"), bench.get("input_len", "?"), bench.get("output_len", "?"),
            bench.get("num_requests", "?"), bench.get("concurrency", "?"), bench.get("warmup_requests", "?")),
        "decode tok/s = 1000 / median TPOT, one stream's decode rate; TPOT = (E2EL - TTFT) / (output tokens - 1), "
        "as vllm bench serve. Spread = max - min of decode tok/s over the rounds on one host (the largest host's "
        "across the fleet).",
        "",
        "## Fleet",
        "",
    ]
    out += table(report, report["fleet"], env)
    out += ["", winner_line(report, report["fleet"], report["winner"])]
    if report["winner"]["config"] is not None and sets_nccl_proto(configs_by_name[report["winner"]["config"]]):
        out += ["", "> **Note on NCCL_PROTO:** " + NCCL_NOTE]
    for host in report["hosts"]:
        host_report = report["per_host"][host]
        out += ["", "## %s" % host, ""]
        out += table(report, host_report["configs"], env)
        line = winner_line(report, host_report["configs"], host_report["winner"])
        win = host_report["winner"]["config"]
        if win is not None and sets_nccl_proto(configs_by_name[win]):
            line += " (sets NCCL_PROTO: see the note above)" if report["winner"]["config"] is not None and sets_nccl_proto(
                configs_by_name[report["winner"]["config"]]) else " Note on NCCL_PROTO: " + NCCL_NOTE
        out += ["", line]
        if host_report["missing"]:
            out += ["", "Not measured in every round on this host: %s." % ", ".join(host_report["missing"])]
    out += ["", "## Failures", ""]
    if report["failures"]:
        out += ["| host | configuration | round | stage | task | error |", "|---|---|---:|---|---|---|"]
        for f in report["failures"]:
            error = " ".join(str(f.get("error") or "").split()).replace("|", "/")
            if len(error) > 300:
                error = error[:297] + "..."
            out.append("| %s | %s | %s | %s | %s | %s |" % (
                f["host"], f["config"], f["round"], f.get("stage") or "?", f.get("task") or "?", error))
        out += ["", "A failed measurement is left out of every median; its configuration cannot win. "
                    "Each one's full record (with the server's log tail) is its raw file."]
    else:
        out.append("None.")
    out += ["", "## Files", "",
            "- `results.csv`: one row per host x configuration x round (%d)" % report["cells"],
            "- `raw/`: each measurement's full record (every repeat's figures, the server it measured)",
            "- `report.json`: the figures of this summary"]
    out.append("- `%s`: median decode tok/s per configuration and host" % chart if chart else "- chart: %s" % chart_note)
    out += ["", "## Left running", "",
            "Configuration to leave running: **%s** (%s)." % (report["leave"]["config"], report["leave"]["reason"])]
    return "\n".join(out) + "\n"


def chart(run_dir: Path, report: t.Dict[str, t.Any]) -> t.Tuple[t.Optional[str], str]:
    """chart.png, or (None, why) when matplotlib is not importable or nothing was measured."""
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
        matplotlib.use("Agg")
        from matplotlib import pyplot  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        return None, "skipped: matplotlib is not importable on the controller (%s); pip install matplotlib" % exc
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
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(str(run_dir / "chart.png"), dpi=100)
    pyplot.close(figure)
    return "chart.png", ""


def write_json(path: Path, data: t.Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(str(tmp), str(path))


def report_command(run_dir: Path) -> int:
    plan = json.loads((run_dir / "plan.json").read_text())
    cells = load_cells(run_dir)
    write_csv(run_dir, cells)
    report = analyse(plan, cells)
    chart_file, chart_note = chart(run_dir, report)
    report["chart"] = chart_file
    report["chart_note"] = chart_note
    (run_dir / "summary.md").write_text(markdown(report, chart_file, chart_note))
    write_json(run_dir / "report.json", report)
    print("%s: %d measurement(s), winner %s, leave %s" % (run_dir, len(cells), report["winner"]["config"],
                                                          report["leave"]["config"]))
    return 0


def left_running_command(run_dir: Path) -> int:
    left = json.loads((run_dir / "left_running.json").read_text())
    report = json.loads((run_dir / "report.json").read_text())
    report["left_running"] = left
    lines = []
    for entry in left:
        if entry.get("status") == "ok":
            lines.append("- %s: runs **%s** (server PID %s, %s)" % (entry["host"], entry["config"], entry.get("pid"),
                                                                    entry.get("action")))
        else:
            lines.append("- %s: FAILED to leave %s running at \"%s\": %s" % (
                entry["host"], entry["config"], entry.get("task"), " ".join(str(entry.get("msg")).split())))
    for host in report["hosts"]:
        if host not in [e.get("host") for e in left]:
            lines.append("- %s: not reached (unreachable, or failed before the end)" % host)
    with open(run_dir / "summary.md", "a") as handle:
        handle.write("\n" + "\n".join(lines) + "\n")
    write_json(run_dir / "report.json", report)
    return 0


def main(argv: t.Sequence[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("report", "left-running"):
        sys.stderr.write("usage: benchmark_report.py report|left-running RUN_DIR\n")
        return 2
    run_dir = Path(argv[1])
    return report_command(run_dir) if argv[0] == "report" else left_running_command(run_dir)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
