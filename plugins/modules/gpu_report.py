#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_report
short_description: Write the fleet's GPU report (one HTML page, CSV, JSON and Markdown) from every host's reading
version_added: 0.2.0
description:
  - "Run on the controller (C(delegate_to: localhost), C(run_once: true)) with the registered results of
    M(gpuops.fleet.gpu_report_facts) (or M(gpuops.fleet.gpu_facts)) of every host of the play, unreachable and failed ones included."
  - Writes into O(dest) C(index.html) (one self-contained page - no fetch, no external script, style or font - readable at
    64 hosts x 8 GPUs; the fleet in numbers, then the problems, then one block per host with each GPU's memory bar, utilisation,
    temperature, power, health flags and holders, and the server the role manages), C(gpus.csv) (one row per GPU),
    C(holders.csv) (one row per holder), C(report.json) (the same data) and C(summary.md) (the numbers and the problems).
  - Beside a holder in a container, the page shows the container (C(ansible_facts.gpus[].processes[].container) of
    M(gpuops.fleet.gpu_facts)) - its runtime, its name (else the first 12 digits of its id), its image, and a Kubernetes pod's UID;
    C(holders.csv) has them in its C(container_*) columns. The page's filters (all hosts, hosts with problems, hosts with free
    GPUs, GPUs held by containers) work without scripts.
  - A host that did not answer, whose reading failed, or whose facts hold null or malformed values is shown as such.
  - Every value from a host is HTML-escaped in the page; command lines have their secret arguments masked.
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: In check mode nothing is written; the result still has the numbers and the problems.
  diff_mode:
    support: none
    description: No diff.
options:
  dest:
    description: The folder to write into (created when missing; the files in it are replaced).
    type: path
    required: true
  hosts:
    description: The host names, in the order of O(results).
    type: list
    elements: str
    required: true
  results:
    description:
      - The registered result of each host of O(hosts), as the task left it (unreachable, failed, skipped), or V(null) when the
        host has none.
    type: list
    elements: raw
    required: true
  idle_threshold_mib:
    description:
      - A GPU with no holder is free when it uses at most this many MiB; above it, its memory counts as held by no process.
      - The collection's one name for the idle threshold (the playbooks' C(gpuops_fleet_idle_threshold_mib)). The alias
        O(threshold_mib) is deprecated and will be removed in 0.3.0.
    aliases:
      - threshold_mib
    type: raw
    default: 1024
    version_added: 0.3.0
  title:
    description: The page's title.
    type: str
    default: GPU fleet report
seealso:
  - module: gpuops.fleet.gpu_report_facts
  - plugin: gpuops.fleet.free_gpus
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Read every host
  gpuops.fleet.gpu_report_facts:
  register: reading
  ignore_errors: true
  ignore_unreachable: true

- name: Write the report on the controller
  gpuops.fleet.gpu_report:
    dest: /srv/reports/gpus
    hosts: "{{ ansible_play_hosts_all }}"
    results: "{{ ansible_play_hosts_all | map('extract', hostvars) | map(attribute='reading', default=none) | list }}"
  delegate_to: localhost
  run_once: true
  check_mode: false
"""

RETURN = r"""
dest:
  description: The report's folder.
  returned: always
  type: str
index:
  description: Path of C(index.html).
  returned: always
  type: str
files:
  description: Paths of every file of the report.
  returned: always
  type: list
  elements: str
summary:
  description: The fleet in numbers.
  returned: always
  type: dict
  sample: {"hosts": 5, "hosts_answered": 4, "hosts_unreachable": 1, "hosts_failed": 0, "gpus": 32, "gpus_free": 13,
           "gpus_held": 17, "gpus_unhealthy": 2, "gpus_lost": 1, "memory_used_mib": 1024000, "memory_total_mib": 3132384,
           "holders": 20, "orphans": 7, "problems": 11}
problems:
  description: What needs an operator, most urgent first - unreachable or failed hosts, lost and unhealthy GPUs, orphans, memory
    held by no process, managed servers that are down.
  returned: always
  type: list
  elements: dict
  contains:
    host:
      description: The host.
      type: str
      returned: always
    kind:
      description: V(unreachable), V(failed), V(lost), V(unhealthy), V(orphan), V(unaccounted) or V(server).
      type: str
      returned: always
    gpu:
      description: The GPU index, or V(null).
      type: int
      returned: always
    pid:
      description: The holder's PID for an orphan, else V(null).
      type: int
      returned: always
    text:
      description: The problem in words.
      type: str
      returned: always
summary_md:
  description: The content of C(summary.md).
  returned: always
  type: str
page_bytes:
  description: Size of C(index.html) in bytes.
  returned: always
  type: int
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import failure, finish
from ansible_collections.gpuops.fleet.plugins.module_utils._report.write import DEFAULTS, ReportError, run_report

ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "dest": {"type": "path", "required": True},
    "hosts": {"type": "list", "elements": "str", "required": True},
    "results": {"type": "list", "elements": "raw", "required": True},
    "idle_threshold_mib": {"type": "raw", "default": DEFAULTS["idle_threshold_mib"], "aliases": ["threshold_mib"],
                           "deprecated_aliases": [{"name": "threshold_mib", "version": "0.3.0", "collection_name": "gpuops.fleet"}]},
    "title": {"type": "str", "default": DEFAULTS["title"]},
}


def run(module: AnsibleModule) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """The options checked, then the report written (run_report checks before it writes)."""
    try:
        return run_report(module.params, module.check_mode), [], False
    except ReportError as exc:
        return failure(str(exc))


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result, warnings, failed = run(module)
    finish(module, result, warnings, failed)


if __name__ == "__main__":
    main()
