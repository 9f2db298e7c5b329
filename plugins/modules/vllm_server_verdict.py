#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_server_verdict
short_description: The verdicts of a run of the vllm_server role, judged on the controller
version_added: 0.2.0
description:
  - Judges one step of a run of the role C(gpuops.fleet.vllm_server) from its plan (M(gpuops.fleet.vllm_server_plan)) and
    the results its steps registered. Every verdict the role reaches is made here, in Python, where a unit test can
    reach it.
  - O(step=preflight) judges M(gpuops.fleet.gpu_reclaim)'s check-mode reading with the settings of the reclaim that will
    follow the stop (the one the lock's module run made, RV(gpuops.fleet.vllm_lock#module:preflight); else it runs that
    reading on the host), and fails - nothing is stopped - when the host cannot run the configuration (a GPU it lacks, a
    setting gpu_reclaim refuses, no driver), when the stop would leave a holder of the server's GPUs (a container the
    role does not manage among them), or when the server on the port requires an API key that the new configuration
    drops (unless C(vllm_server_allow_open)). It also returns what the stop and the reclaim are given (C(takeover_stop),
    C(reclaim_args)).
  - O(step=reclaim) returns the reclaim after the stop as M(gpuops.fleet.gpu_reclaim) returns it, its C(changed) too (the
    one the stop's module run made, RV(gpuops.fleet.vllm_process#module:reclaim); else it runs M(gpuops.fleet.gpu_reclaim)
    on the host with the preflight's C(reclaim_args)).
  - O(step=verify) judges the server's GPUs - each must have no holder and at most the threshold used - on the reclaim's
    last reading when it proved them free through a fresh NVML session, else on a fresh M(gpuops.fleet.gpu_facts)
    reading; it fails naming every busy GPU and holder (never in check mode, which stopped nothing).
  - O(step=result) returns what the run did (the role registers it as C(vllm_server_result)).
  - O(step=failure) returns what a launch that failed left (the role registers it as C(vllm_server_failure)), with what
    the undo does and, for a server taken over, how to start it again by hand.
  - For a server across hosts (the plan's C(group)), O(step=preflight) also judges every other host of the group on the
    reading its lock made (its plan and lock, read through C(hostvars)) and fails, naming each host and why, unless every
    host may stop - nothing stops anywhere.
  - O(step=group_ready) judges a server across hosts as a whole, from what every host of its group registered at its
    ready step and which of them are still in the play's batch (M(gpuops.fleet.vllm_lock)'s action judges their readings
    before any lock). It fails unless every other host's new rank is ready and held its check, and each host then
    undoes its own launch; when it passes, it keeps this host's configuration as its last known-good one (the plan's
    C(mark_good_whole), as M(gpuops.fleet.vllm_last_good) does with O(gpuops.fleet.vllm_last_good#module:state=marked)).
  - This module is an action plugin; it runs on the controller and sends to the host only the reading of its step.
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: The preflight and the verify only read the host; in check mode a busy GPU is shown, not failed.
  diff_mode:
    support: none
    description: Nothing to show as a diff.
options:
  step:
    description: The step to judge.
    type: str
    required: true
    choices: [preflight, reclaim, verify, result, failure, rollback, group_ready]
  plan:
    description: The run's plan, as M(gpuops.fleet.vllm_server_plan) returns it.
    type: dict
    required: true
  steps:
    description:
      - The steps' registered results, by name - C(status) (the reading acted on), C(preflight), C(stopped), C(reclaim),
        C(verify), C(launched), C(ready). A step that did not run is absent, empty or skipped.
      - Without it, the results the role registers are read (the reading acted on is the lock's, else the one before it).
    type: dict
  failed_task:
    description: With O(step=failure), the name of the task that failed.
    type: str
  failed_result:
    description: With O(step=failure), its result.
    type: dict
seealso:
  - module: gpuops.fleet.vllm_server_plan
"""

EXAMPLES = r"""
- name: Every GPU of the server is free (the role's verify step)
  gpuops.fleet.vllm_server_verdict:
    step: verify
    plan: "{{ vllm_server_plan }}"
"""

RETURN = r"""
refused:
  description: With O(step=preflight) or O(step=group_ready) when it fails for another host of the group, one line per host that refused or failed.
  returned: on such a failure
  type: list
  elements: str
msg:
  description: With O(step=preflight) or O(step=verify), the verdict in words.
  returned: with O(step=preflight) or O(step=verify)
  type: str
mode:
  description: With O(step=preflight), the launch mode the run's reading resolved (V(process), V(systemd) or V(container)), which the later steps are given.
  returned: with O(step=preflight)
  type: str
reclaim_args:
  description: With O(step=preflight), the options of the reclaim after the stop.
  returned: with O(step=preflight)
  type: dict
takeover_stop:
  description: With O(step=preflight), what the stop is given for the server taken over (null when none).
  returned: with O(step=preflight)
  type: dict
busy:
  description: With O(step=verify), each of the server's GPUs that is not free, as the reading judged shows it.
  returned: with O(step=verify)
  type: list
  elements: dict
left:
  description: With O(step=verify) and the state stopped, the server's GPUs that only a job left alone holds.
  returned: with O(step=verify)
  type: list
  elements: int
fresh:
  description: With O(step=verify), whether the reclaim's own last reading was judged (else a gpu_facts reading).
  returned: with O(step=verify)
  type: bool
action:
  description: With O(step=result), V(started), V(restarted) or V(stopped).
  returned: with O(step=result)
  type: str
undo:
  description: With O(step=failure), what the role does about the launch that failed.
  returned: with O(step=failure)
  type: str
"""
