#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_benchmark_report
short_description: Write the report of a benchmark matrix (CSV, Markdown, JSON, chart) from its run folder
version_added: 0.2.0
description:
  - "The report of C(playbooks/benchmark_matrix.yml): run on the controller (C(delegate_to: localhost), C(run_once: true))
    on the run folder, which holds C(plan.json) (hosts, configurations, baseline, rounds, the load of each measurement) and
    C(raw/*.json), one file per host x configuration x round, failed ones included."
  - "O(step=report) writes C(results.csv) (one row per measurement), C(summary.md) (per host and for the fleet: each
    configuration's median decode tok/s with its min and max, the change against the baseline, median TPOT, the run-to-run
    spread; the winner and whether its margin is larger than the spread; the failures), C(report.json) (the same figures),
    C(report.html) (below) and C(chart.png) (when matplotlib is importable by the controller's Python; the summary says why
    not otherwise)."
  - C(report.html) is one self-contained page (no script, nothing fetched - no CDN, font or external image - and every value
    escaped; readable with scripts off and in print) - the winner; decode tok/s per configuration and host with the min - max
    over the rounds as an inline SVG chart, and every figure of the summary in tables (per configuration for the fleet, and
    per host); TTFT and ITL percentiles (p50, p90, p99) per configuration as charts, with TPOT's, in a table; the failures and
    what each server was left running.
  - "Sections that appear only when the measurements carry them (in their summary or their benchmark result): C(workload)
    (its kind, file, the first 12 digits of its sha256, and the prompt and output lengths' min, p50, p90 and max); C(per_turn)
    (TTFT per turn of a session workload, chart and table, with the cached tokens); C(schedule_slip_ms) (how late the client
    sent a replayed trace's requests, with a warning when the p99 is more than 10 ms - the client, not the server, was late);
    C(prefix_cache) (the server's prefix cache queries, hits and hit rate)."
  - "C(report.json) has, per configuration (per host and for the fleet), beside the figures of the summary: C(latency)
    (C(ttft_ms), C(itl_ms), C(tpot_ms), each C(p50), C(p90), C(p99): the median over the repeats), and C(per_turn),
    C(schedule_slip_ms) (the largest over the measurements) and C(prefix_cache) (summed), V(null) when no measurement has them;
    and C(workloads), each distinct workload the measurements name."
  - O(step=left_running) adds what each server was left running (O(left_running), kept in C(left_running.json)) to C(summary.md),
    C(report.json) and C(report.html); a host missing from it is named as not reached.
  - Figures follow C(vllm bench serve) - TPOT of a request is (E2EL - TTFT) / (output tokens - 1), decode tok/s is
    1000 / median TPOT, one stream's decode rate. A failed measurement is left out of every median, and a configuration with a
    failed measurement cannot win. The configuration to leave running is the fleet's winner (the plan's C(leave=best)), the
    baseline when none ran without a failure, or the baseline (C(leave=baseline)).
  - A file is written (atomically) only when its content changes, so a second run on the same folder changes nothing.
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: In check mode nothing is written; the result still has the winner, the configuration to leave and the summary.
  diff_mode:
    support: none
    description: No diff.
options:
  path:
    description: The run folder of the benchmark matrix (C(plan.json) and C(raw/) in it).
    type: path
    required: true
  step:
    description:
      - V(report) - the report of the measurements.
      - V(left_running) - add what each server runs now to the report written by V(report).
    type: str
    choices: [report, left_running]
    default: report
  left_running:
    description:
      - With O(step=left_running), one entry per host that was left running a configuration, or failed to be, with at least
        C(host), C(config) and C(status) (V(ok) or V(failed)); an V(ok) entry has C(pid) and C(action), a failed one C(task) and
        C(msg). Written to C(left_running.json).
      - Omitted, C(left_running.json) of the run folder is read.
    type: list
    elements: dict
seealso:
  - module: gpuops.fleet.vllm_benchmark
  - name: The matrix playbook
    description: C(playbooks/benchmark_matrix.yml) runs every configuration on every host, round after round, then this module.
    link: https://github.com/gpuops/fleet/blob/main/playbooks/benchmark_matrix.yml
"""

EXAMPLES = r"""
- name: Write the CSV, the Markdown summary, report.json, report.html and the chart
  gpuops.fleet.vllm_benchmark_report:
    path: /srv/benchmarks/20260101T000000Z
  register: matrix_report
  delegate_to: localhost
  run_once: true

- name: Show the winner
  ansible.builtin.debug:
    msg: "{{ matrix_report.winner.config }} (significant: {{ matrix_report.winner.significant }})"

- name: Add what each server runs now
  gpuops.fleet.vllm_benchmark_report:
    path: /srv/benchmarks/20260101T000000Z
    step: left_running
    left_running:
      - {host: gpu-node-01, config: LL, status: ok, pid: 4242, action: restarted}
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
path:
  description: The run folder.
  returned: always
  type: str
files:
  description: Paths of the files this step writes (whether or not their content changed).
  returned: always
  type: list
  elements: str
changed_files:
  description: Paths of the files whose content changed (in check mode, would change).
  returned: always
  type: list
  elements: str
measurements:
  description: Raw measurements read from C(raw/), failed ones included.
  returned: always
  type: int
winner:
  description: The fleet's winner, by median decode tok/s among the configurations measured without a failure.
  returned: always
  type: dict
  sample: {"config": "LL", "runner_up": "baseline", "margin_tok_s": 10.3, "spread_tok_s": 0.4, "significant": true}
  contains:
    config:
      description: The winning configuration, V(null) when none was measured without a failure.
      type: str
      returned: always
    runner_up:
      description: The second best, V(null) when only one configuration could win.
      type: str
      returned: always
    margin_tok_s:
      description: Median decode tok/s of the winner minus the runner-up's.
      type: float
      returned: always
    spread_tok_s:
      description: The larger run-to-run spread (max - min over the rounds on one host) of the two; V(null) with one round.
      type: float
      returned: always
    significant:
      description: Whether the margin is larger than the spread.
      type: bool
      returned: always
leave:
  description: The configuration each server is to be left running, and why.
  returned: always
  type: dict
  sample: {"mode": "best", "config": "LL", "reason": "the fleet's winner"}
failures:
  description: Each failed measurement (C(host), C(config), C(round), C(stage), C(task), C(error), C(log_tail), C(raw_file)).
  returned: always
  type: list
  elements: dict
page:
  description: Path of C(report.html), the report as one self-contained page.
  returned: always
  type: str
chart:
  description: C(chart.png), or V(null) when it was skipped.
  returned: always
  type: str
chart_note:
  description: Why the chart was skipped (matplotlib not importable, nothing measured); empty when it was drawn.
  returned: always
  type: str
summary_md:
  description: The content of C(summary.md).
  returned: always
  type: str
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import failure, finish
from ansible_collections.gpuops.fleet.plugins.module_utils._matrix.run import STEPS, MatrixError, run_report

ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "path": {"type": "path", "required": True},
    "step": {"type": "str", "default": STEPS[0], "choices": list(STEPS)},
    "left_running": {"type": "list", "elements": "dict"},
}


def run(module: AnsibleModule) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """The options and the run folder checked, then the report written (run_report checks before it writes)."""
    try:
        return run_report(module.params, module.check_mode), [], False
    except MatrixError as exc:
        return failure(str(exc))


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result, warnings, failed = run(module)
    finish(module, result, warnings, failed)


if __name__ == "__main__":
    main()
