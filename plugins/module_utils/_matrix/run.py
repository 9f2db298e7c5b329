# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_matrix): the report of playbooks/benchmark_matrix.yml, written on the controller from the run folder's
# files. It stands alone: it imports only the flat files of module_utils, no other package, never a module or a plugin.

"""vllm_benchmark_report's run: check the options, read the run folder, write the report's files (each atomically,
and only when its content changes).

Two steps, as the playbook runs them: V(report) after the measurements (results.csv, summary.md, report.json,
report.html, chart.png), V(left_running) after each server was left running a configuration (left_running.json, and
the summary, report.json and report.html again with it). Writing either again from the same files gives the same files.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import os
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._matrix import analysis
from ansible_collections.gpuops.fleet.plugins.module_utils._matrix import page
from ansible_collections.gpuops.fleet.plugins.module_utils._matrix import render
from ansible_collections.gpuops.fleet.plugins.module_utils._io import write_if_changed

STEPS = ("report", "left_running")  # the first is the default
LEFT_KEYS = ("host", "config", "status")


class MatrixError(ValueError):
    """A run folder or an option that cannot be used; the message names it and its value."""


def _read_json(path: str, what: str) -> t.Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise MatrixError("path: cannot read %s %s: %s" % (what, path, exc)) from exc


def _json_bytes(data: t.Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _check_plan(plan: t.Any, path: str) -> None:
    if not isinstance(plan, dict) or not all(key in plan for key in ("hosts", "configs", "baseline", "repeats")):
        raise MatrixError("path: %s is not a benchmark matrix plan (hosts, configs, baseline, repeats)" % path)
    names = [str(c.get("name")) for c in plan["configs"] if isinstance(c, dict)]
    if plan["baseline"] not in names:
        raise MatrixError("path: the plan's baseline %s is none of its configurations %s" % (json.dumps(plan["baseline"]), names))


def _check_left(left: t.Any, where: str) -> t.List[t.Dict[str, t.Any]]:
    if not isinstance(left, list) or not all(isinstance(e, dict) and all(k in e for k in LEFT_KEYS) for e in left):
        raise MatrixError("left_running: %s must be a list of {host, config, status, ...}, got %s" % (where, json.dumps(left)[:200]))
    return left


def report_step(run_dir: str, check_mode: bool) -> t.Dict[str, t.Any]:
    """results.csv, chart.png, summary.md, report.json and report.html from plan.json and raw/*.json."""
    plan_file = os.path.join(run_dir, "plan.json")
    plan = _read_json(plan_file, "the plan")
    _check_plan(plan, plan_file)
    cells = analysis.load_cells(run_dir)
    report = analysis.analyse(plan, cells)
    png, note = render.chart_png(report)
    report["chart"] = "chart.png" if png is not None else None
    report["chart_note"] = note
    files = {"results.csv": render.results_csv(cells).encode("utf-8")}
    if png is not None:
        files["chart.png"] = png
    summary = render.markdown(report)
    files["summary.md"] = summary.encode("utf-8")
    files["report.json"] = _json_bytes(report)
    files[page.PAGE] = page.render_page(report).encode("utf-8")
    changed = [name for name, content in files.items()
               if write_if_changed(os.path.join(run_dir, name), content, check_mode, prefix=".report.")]
    return {"report": report, "summary_md": summary, "files": sorted(files), "changed_files": changed}


def left_running_step(run_dir: str, left: t.Optional[t.List[t.Dict[str, t.Any]]], check_mode: bool) -> t.Dict[str, t.Any]:
    """left_running.json (from ``left``, else the folder's own), and the summary, report.json and report.html with it."""
    left_file = os.path.join(run_dir, "left_running.json")
    if left is None:
        left = _check_left(_read_json(left_file, "what runs now"), left_file)
    else:
        left = _check_left(left, "the option")
    report = _read_json(os.path.join(run_dir, "report.json"), "the report (run step=report first)")
    report["left_running"] = left
    summary = render.markdown(report) + "\n" + "\n".join(render.left_running_lines(report, left)) + "\n"
    files = {"left_running.json": _json_bytes(left), "summary.md": summary.encode("utf-8"), "report.json": _json_bytes(report),
             page.PAGE: page.render_page(report).encode("utf-8")}
    changed = [name for name, content in files.items()
               if write_if_changed(os.path.join(run_dir, name), content, check_mode, prefix=".report.")]
    return {"report": report, "summary_md": summary, "files": sorted(files), "changed_files": changed}


def run_report(params: t.Mapping[str, t.Any], check_mode: bool) -> t.Dict[str, t.Any]:
    """The module's result. Raises MatrixError for a bad option or run folder (before anything is written)."""
    run_dir = params["path"]
    if not os.path.isdir(run_dir):
        raise MatrixError("path: %s is not a folder (the run folder of benchmark_matrix.yml)" % json.dumps(run_dir))
    if params["step"] == "report":
        if params.get("left_running") is not None:
            raise MatrixError("left_running: only with step=left_running (step=%s)" % params["step"])
        out = report_step(run_dir, check_mode)
    else:
        out = left_running_step(run_dir, params.get("left_running"), check_mode)
    report = out["report"]
    return {
        "changed": bool(out["changed_files"]),
        "path": run_dir,
        "files": [os.path.join(run_dir, name) for name in out["files"]],
        "changed_files": [os.path.join(run_dir, name) for name in out["changed_files"]],
        "measurements": report["cells"],
        "winner": report["winner"],
        "leave": report["leave"],
        "failures": report["failures"],
        "page": os.path.join(run_dir, page.PAGE),
        "chart": report.get("chart"),
        "chart_note": report.get("chart_note", ""),
        "summary_md": out["summary_md"],
    }
