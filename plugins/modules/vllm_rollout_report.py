#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_rollout_report
short_description: Judge a rollout's benchmark gate and write its report (Markdown, JSON, chart)
version_added: 0.2.0
description:
  - The controller side of playbooks/rollout_vllm.yml, run on the controller (with C(delegate_to) V(localhost)).
  - V(settings) checks the gate's settings together and fails, naming the variable and its value, when one cannot be used.
  - V(judge) compares, for each host of a gated batch, the canary's measurement (C(canary/HOST.json) in O(path)) with its
    baseline (C(baseline/HOST.json)), and writes the verdicts to C(batches/NN.json). Per metric, each side's figure is the
    median over its repeats and its spread is max - min over them; a metric regresses when the canary is worse by more
    than the threshold (percent of the baseline) AND by more than the larger side's spread. Gated are decode tok/s per stream
    and median TTFT (whose rise must also exceed C(ttft_floor_ms)); thresholds in O(settings); p99 TTFT is reported only. A host in O(failures) (it did not
    come up, or a side could not be measured) fails the batch too. RV(halt) says whether the rollout must stop.
  - V(final) writes C(report.json), C(summary.md), C(summary.txt) (the one-screen summary), C(report.html) and C(chart.png) (skipped
    with a note without matplotlib) from the batches' verdicts, O(fleet) (what each host runs at the end), O(rollbacks) and O(outcome),
    and returns RV(screen), the one-screen summary.
  - C(report.html) is one self-contained page (no script, nothing fetched, every value escaped; readable with scripts off and in
    print) - the outcome and its reason; the hosts in order, the batches and which of them are gated; per gated batch, each
    host's baseline against canary for decode tok/s per stream and median TTFT as inline SVG charts with the min - max over the
    repeats, and every metric's figures and verdict in a table; the TTFT, ITL and TPOT percentiles (p50, p90, p99) of each side;
    the workload (kind, file, short hash, prompt and output lengths) when the measurements name one, and TTFT per turn, the
    client's schedule slip (with a warning when its p99 is large - the client, not the server, was late) and the server's prefix
    cache when they carry them; the rollbacks and what runs where.
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Writes nothing; reports the files that would change.
  diff_mode:
    support: none
    description: Nothing to show as a diff.
options:
  path:
    description: The rollout's run folder on the controller.
    type: path
    required: true
  step:
    description: What to do, see the description.
    type: str
    choices: [settings, host, judge, final]
    default: judge
  settings:
    description:
      - The gate's settings, with the keys C(threshold_pct), C(ttft_threshold_pct) (percent, 0 to 100), C(ttft_floor_ms) (default 20,
        a rise of median TTFT by at most this many milliseconds is never a regression), C(serial) (a whole number
        above 0, a percentage above 0 such as C(25%), or a list of those) and C(repeats) (the benchmark's repeats, at least 2).
    type: dict
    default: {}
  server:
    description:
      - With O(step=host), the host's new configuration - C(name), C(port), C(tensor_parallel_size), C(state) (the role's
        variables of those names), C(workers) (the server's workers on this host, one GPU each; default the tensor-parallel
        size) - and C(host), the inventory name.
      - The step fails, naming the host, when the host cannot be rolled out - no last known-good configuration to roll back to,
        or a new port, a new size or a stop, which a rollout does not do.
    type: dict
    default: {}
  last_good:
    description:
      - With O(step=host), the summary of the host's last known-good configuration
        (RV(gpuops.fleet.vllm_last_good#module:summary)), null when none is kept.
    type: dict
  gated:
    description:
      - With O(step=judge), whether the batch is gated by its benchmark (the canary, or every batch with
        C(vllm_rollout_benchmark_every_batch)). A batch that is not halts only when a host failed; nothing is written for it.
    type: bool
    default: true
  so_far:
    description: With O(step=judge), the rollout's reason before this batch (RV(rollout_reason) of the batch before).
    type: str
    default: ''
  halted:
    description: With O(step=final) and no O(outcome), whether a batch halted the rollout.
    type: bool
    default: false
  reason:
    description: With O(step=final) and no O(outcome), the rollout's reason (RV(rollout_reason) of the last batch).
    type: str
    default: ''
  batch:
    description: With O(step=judge), the batch's number (1 is the canary).
    type: int
    default: 1
  hosts:
    description: With O(step=judge), the hosts of the batch.
    type: list
    elements: str
    default: []
  measured:
    description:
      - With O(step=judge), the hosts of the batch whose server is measured by the gate; default O(hosts). A host of a
        server across hosts that is not its head serves no API of its own (its head's figures are the server's), so it is
        judged only by whether it failed.
    type: list
    elements: str
  failures:
    description: With O(step=judge), each host of the batch that failed before it could be judged, as C({host, task, msg}).
    type: list
    elements: dict
    default: []
  plan:
    description: With O(step=final), the rollout's plan (hosts, serial, thresholds, configuration hash and shown configuration, load).
    type: dict
    default: {}
  fleet:
    description:
      - With O(step=final), what each host runs at the end, as C({host, runs, pid, note}) with C(runs) one of V(new), V(good),
        V(other), V(down), V(unknown).
      - An entry without C(runs) is judged from C(running), C(running_config_hash) and C(running_is_good) (as
        M(gpuops.fleet.vllm_last_good) returns them) against C(config_hash), the new configuration's.
    type: list
    elements: dict
    default: []
  rollbacks:
    description: With O(step=final), each rollback, as C({host, status, action, pid, config_hash, ready_s, checks, task, msg}).
    type: list
    elements: dict
    default: []
  outcome:
    description:
      - With O(step=final), C({status, reason}), the status one of V(passed), V(halted), V(check mode).
      - Without it, decided from O(halted) and O(reason) (a halted rollout that left some hosts on the new configuration
        says the fleet is mixed).
    type: dict
    default: {}
seealso:
  - module: gpuops.fleet.vllm_benchmark_report
  - module: gpuops.fleet.vllm_last_good
  - name: playbooks/rollout_vllm.yml
    description: The rollout that writes the measurements and calls this module.
    link: https://github.com/gpuops/fleet/blob/main/playbooks/rollout_vllm.yml
"""

EXAMPLES = r"""
- name: Judge the canary batch
  gpuops.fleet.vllm_rollout_report:
    path: /srv/rollouts/4f2a9c1b0d3e
    step: judge
    batch: 1
    hosts: [gpu-node-01]
    settings: {threshold_pct: 3, ttft_threshold_pct: 10, serial: 1, repeats: 3}
  register: verdict
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
halt:
  description: With O(step=judge), whether a host of the batch regressed or failed.
  returned: always
  type: bool
rollout_reason:
  description: With O(step=judge), the rollout's reason after this batch (why it halts, or each gated batch that passed).
  returned: always
  type: str
reason:
  description: With O(step=judge), the verdicts in words (each failing host's reason, or each host's figures when all passed).
  returned: always
  type: str
hosts:
  description: With O(step=judge), each host's verdict (V(pass), V(regression), V(failed)), reason and per-metric figures.
  returned: always
  type: list
  elements: dict
settings:
  description: The checked settings, as numbers.
  returned: always
  type: dict
files:
  description: The files this step writes; with O(step=final), C(report.html) among them.
  returned: always
  type: list
  elements: str
summary_md:
  description: With O(step=final), the content of summary.md.
  returned: always
  type: str
screen:
  description: With O(step=final), the one-screen summary, a line per element.
  returned: always
  type: list
  elements: str
"""

import json
import os
import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import failure, finish
from ansible_collections.gpuops.fleet.plugins.module_utils._rollout import page as rollout_page
from ansible_collections.gpuops.fleet.plugins.module_utils._rollout import report as rollout_report
from ansible_collections.gpuops.fleet.plugins.module_utils._rollout import course
from ansible_collections.gpuops.fleet.plugins.module_utils._rollout.decision import RolloutError, check_settings

ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "path": {"type": "path", "required": True},
    "step": {"type": "str", "choices": ["settings", "host", "judge", "final"], "default": "judge"},
    "server": {"type": "dict", "default": {}},
    "last_good": {"type": "dict"},
    "gated": {"type": "bool", "default": True},
    "so_far": {"type": "str", "default": ""},
    "halted": {"type": "bool", "default": False},
    "reason": {"type": "str", "default": ""},
    "settings": {"type": "dict", "default": {}},
    "batch": {"type": "int", "default": 1},
    "hosts": {"type": "list", "elements": "str", "default": []},
    "measured": {"type": "list", "elements": "str"},
    "failures": {"type": "list", "elements": "dict", "default": []},
    "plan": {"type": "dict", "default": {}},
    "fleet": {"type": "list", "elements": "dict", "default": []},
    "rollbacks": {"type": "list", "elements": "dict", "default": []},
    "outcome": {"type": "dict", "default": {}},
}


def run(module: AnsibleModule) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """The step's options checked, then the step run (build_report checks before it writes)."""
    try:
        return build_report(module.params, module.check_mode), [], False
    except RolloutError as exc:
        return failure(str(exc))


def build_report(params: t.Mapping[str, t.Any], check_mode: bool) -> t.Dict[str, t.Any]:
    path = params["path"]
    result: t.Dict[str, t.Any] = {"changed": False, "halt": False, "reason": "", "rollout_reason": "", "hosts": [], "files": [], "summary_md": "",
                                  "screen": []}
    if params["step"] == "settings":
        result["settings"] = check_settings(params["settings"])
        return result
    if params["step"] == "host":
        server = params.get("server") or {}
        refusal = course.cannot_roll_out(str(server.get("host") or "?"), server, params.get("last_good"))
        if refusal:
            raise RolloutError(refusal)
        return result
    if params["step"] == "judge":
        return dict(result, **_judge(path, params, check_mode))
    fleet = [dict(entry, runs=course.runs(entry.get("running"), entry.get("running_config_hash"), bool(entry.get("running_is_good")),
                                          str(entry.get("config_hash"))))
             if "runs" not in entry else dict(entry) for entry in params["fleet"]]
    outcome = params["outcome"] or course.outcome(check_mode, bool(params.get("halted")), params.get("reason") or "",
                                                  [entry["host"] for entry in fleet if entry["runs"] == "new"],
                                                  (params["plan"] or {}).get("hosts") or [entry["host"] for entry in fleet])
    report = rollout_report.build(path, params["plan"], fleet, params["rollbacks"], outcome)
    png, note = rollout_report.chart_png(report)
    report["chart"], report["chart_note"] = ("chart.png", "") if png else (None, note)
    summary = rollout_report.markdown(report)
    contents: t.Dict[str, t.Union[str, bytes]] = {"report.json": json.dumps(report, indent=2, sort_keys=True) + "\n", "summary.md": summary}
    if png:
        contents["chart.png"] = png
    contents[rollout_page.PAGE] = rollout_page.render_page(report)
    lines = rollout_report.screen(report)
    contents["summary.txt"] = "\n".join(lines) + "\n"
    for name, content in contents.items():
        target = os.path.join(path, name)
        result["changed"] = rollout_report.write(target, content, check_mode) or result["changed"]
        result["files"].append(target)
    result.update(summary_md=summary, screen=lines)
    return result


def _judge(path: str, params: t.Mapping[str, t.Any], check_mode: bool) -> t.Dict[str, t.Any]:
    """A gated batch judged by its gate (written to batches/NN.json); any batch's course: halt, and the rollout's reason."""
    settings = check_settings(params["settings"])
    if params["batch"] < 1:
        raise RolloutError("batch=%r must be 1 or more" % params["batch"])
    judged: t.Dict[str, t.Any] = {"settings": settings, "changed": False}
    verdict = None
    gated = params.get("gated", True)
    if gated:
        measured = params["hosts"] if params.get("measured") is None else params["measured"]
        verdict = rollout_report.judge(path, params["batch"], measured, params["failures"], settings, params["hosts"])
        target = os.path.join(path, "batches", "%02d.json" % params["batch"])
        judged.update(changed=rollout_report.write(target, json.dumps(verdict, indent=2, sort_keys=True) + "\n", check_mode),
                      reason=verdict["reason"], hosts=verdict["hosts"], files=[target])
    halt, reason = course.batch_course(params["batch"], params["hosts"], gated, verdict, params["failures"], params.get("so_far") or "")
    judged.update(halt=halt, rollout_reason=reason)
    return judged


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result, warnings, failed = run(module)
    finish(module, result, warnings, failed)


if __name__ == "__main__":
    main()
