#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_ready
short_description: Wait until a just-launched vLLM server is ready, check it, keep it as last known-good, release its lock
version_added: 0.2.0
description:
  - The end of a launch, in one module run on the host - four jobs, each after the one before succeeded - (1) wait until
    the server is ready and generates, (2) with O(check), check that it is the server that was launched (its own workers
    hold its GPUs, with its environment), (3) with O(mark_good), keep its configuration as the last known-good one, (4) with
    O(release_lock), release the run's lock. A failure at any of them leaves the later ones undone (the lock kept, for the
    undo). They share one module start-up because a restart's budget on the host is three module runs.
  - Polls C(GET /health) of the server every O(interval) seconds until it answers HTTP 200, then, with O(model), until
    C(/v1/models) lists that model.
  - Watches the server while it waits (the process O(pid) started at O(create_time), the systemd O(unit), or the container's main
    process with O(mode=container)); when it dies the task fails at once, not at the timeout, with the last lines of its log
    (O(log_file), the unit's journal, or the container's output).
  - Fails after O(timeout) seconds counted from O(since), with the log's last lines and the last answer of C(/health).
  - Once C(/health) and C(/v1/models) answer, sends one short completion (a few tokens, C(POST /v1/completions)) and fails unless
    it comes back with tokens within O(generate_timeout) seconds. vLLM's API server answers C(/health) and C(/v1/models) while its
    engine core is dead or hung, so only a request that generates proves the server serves.
  - The action plugin of the same name calls this module in steps of at most O(poll_for) seconds and prints, between steps,
    what it waits for and for how long, so a start-up that takes minutes is not one silent task.
  - Every request goes straight to O(url) from the managed host, not through a proxy set in its environment, and an
    C(https) URL's certificate is checked against the host's CA store.
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Waits for nothing in check mode and says so (a server a check run did not start cannot become ready).
  diff_mode:
    support: none
    description: Nothing to show as a diff.
  action:
    support: full
    description:
      - The action plugin repeats the module and reports progress on the controller.
      - Given O(state_file), it runs this module's task through M(gpuops.fleet.vllm_process)'s O(gpuops.fleet.vllm_process#module:ready)
        (the same options, checks and result), whose payload the role's restart has built already.
options:
  url:
    description: Base URL of the server, for example V(http://127.0.0.1:8000).
    type: str
    required: true
  model:
    description: When set, also wait until C(/v1/models) lists this model id.
    type: str
  api_key:
    description:
      - Sent as C(Authorization Bearer) with the C(/v1/models) request, for a server started with C(--api-key) or C(VLLM_API_KEY)
        (which answers C(/v1/*) with HTTP 401 without it; C(/health) needs no key). Never shown or returned.
      - When the server answers C(/health) but refuses C(/v1/models) with HTTP 401, the task fails at once, naming this option.
      - Sent with the generation check's completion too.
    type: str
  generate_timeout:
    description:
      - Seconds the generation check waits for its completion (a few tokens, C(POST /v1/completions) with O(model), not streamed,
        once the server answers C(/health) and lists O(model)).
      - The task fails, naming the generation check and the server's answer (trimmed, the API key masked), when the completion is not
        answered in time, or with an HTTP error such as 500 (the answer of a vLLM whose engine core died, C(EngineDeadError)), an
        error body, or no generated token; nothing after the ready step runs then (no O(check), no O(mark_good), the lock is kept).
      - V(0) skips the generation check (a server that cannot generate, such as an embedding model).
    type: float
    default: 60
  pid:
    description: PID of the server process to watch (the process-mode server, or a systemd unit's main PID).
    type: int
  create_time:
    description: Start time of O(pid) (seconds since the epoch, as psutil reads it), so a reused PID is not taken for the server.
    type: float
  unit:
    description:
      - A systemd unit to watch instead of a PID; the task fails as soon as it is no longer active or activating, or as soon as
        its server died and systemd waits to restart it (C(Restart=on-failure)), naming the crash loop (restarts, last exit).
    type: str
  log_file:
    description: The server's log file, whose last lines are shown on failure.
    type: path
  log_lines:
    description: How many log lines to show on failure.
    type: int
    default: 30
  timeout:
    description: Seconds, counted from O(since), before the task fails. Real TP=8 start-ups take minutes.
    type: float
    default: 900
  since:
    description: When the wait started (seconds since the epoch on the managed host); default the start of this task.
    type: float
  poll_for:
    description: At most this many seconds in this call; V(0) waits until ready or O(timeout).
    type: float
    default: 0
  waited:
    description:
      - The wait that the launch made in its own module run (RV(gpuops.fleet.vllm_process#module:waited), asked for with
        O(gpuops.fleet.vllm_process#module:wait)). The action plugin returns it as this task's result when that wait
        ended (ready, or failed), without running anything on the host; otherwise it waits on from that wait's
        RV(since). The module itself ignores it.
    type: dict
  interval:
    description: Seconds between two polls of C(/health).
    type: float
    default: 0.1
  check:
    description:
      - Once the server is ready, run the launch check of M(gpuops.fleet.vllm_server_check) on O(pid), or with O(unit) on the
        unit's main PID read once it is ready (with O(mode=container), the container's main process), in the same process
        (a fresh NVML session of its own, joined with the server's process tree) and return it as RV(check). The task does
        not fail on the check; the role's own task judges RV(check) and names what did not hold.
      - The ready step and its check in one task save the host a module start-up in a restart.
    type: dict
    suboptions:
      gpus:
        description:
          - Indices of the GPUs the server was given (as in C(CUDA_VISIBLE_DEVICES)).
        type: list
        elements: int
        required: true
      tensor_parallel_size:
        description: How many GPU-holding workers the server must have.
        type: int
        required: true
      env:
        description: Environment variables the server process must have, with these values (secret values never shown).
        type: dict
        default: {}
      secret_env:
        description: More names of O(check.env) whose values are secrets, beyond those recognised by their name.
        type: list
        elements: str
        default: []
  mark_good:
    description:
      - When O(check) held, keep this configuration as the server's last known-good one, as M(gpuops.fleet.vllm_last_good)
        with O(gpuops.fleet.vllm_last_good#module:state=marked) does (C(NAME.last-good) beside the record, mode 0600), and
        return RV(marked_good).
    type: dict
    suboptions:
      state_file:
        description: The server's record; the last known-good configuration is kept beside it.
        type: path
        required: true
      config:
        description: The configuration to keep (argv, env, gpus, config_hash, model, served_name, mode, tensor_parallel_size, port, name).
        type: dict
        required: true
  mode:
    description:
      - The launch mode of the server to watch, instead of O(pid) or O(unit) alone (V(auto) is systemd when C(/run/systemd/system)
        exists, else process). V(process) watches the process of the record at O(state_file) (its PID and start time);
        V(systemd) watches O(unit) (its main PID for O(check)); V(container) watches the main process (as the host numbers
        it) of the container that the record at O(state_file) names, read through its runtime (C(inspect)).
      - The last known-good configuration of O(mark_good) is kept with this mode.
    type: str
    choices: [auto, process, systemd, container]
  state_file:
    description: With O(mode=process) and no O(pid), or O(mode=container), the record (JSON) of the server, as M(gpuops.fleet.vllm_process) writes it.
    type: path
  release_lock:
    description:
      - When the server is ready and O(check) (if given) held, release this run's lock of the server (as
        M(gpuops.fleet.vllm_lock) with O(gpuops.fleet.vllm_lock#module:state=unlocked)) and return RV(released). On any
        failure the lock is left held, for the caller to undo the launch under it and release it.
    type: dict
    suboptions:
      path:
        description: The lock file.
        type: path
        required: true
      token:
        description: The run's token; only a lock it holds is released.
        type: str
        required: true
  startup:
    description:
      - With O(state_file), the timeout follows the last start-ups of this configuration on this host, kept beside the record
        (C(NAME.startups), by configuration hash, the last five of each), and this start-up is kept there once ready.
      - The task then fails after O(startup.factor) times the slowest of those start-ups, at least O(startup.floor) seconds and at
        most O(timeout) (the ceiling, and the timeout while none is known), so a start-up that hangs is reported at twice its
        usual time; the message names the last start-up phase the server's log reached.
    type: dict
    suboptions:
      config_hash:
        description: The configuration's hash (the role's C(vllm_server_plan.config_hash)).
        type: str
        required: true
      factor:
        description: The multiple of the slowest known start-up; V(0) keeps O(timeout).
        type: float
        default: 2
      floor:
        description: The least timeout, in seconds.
        type: float
        default: 60
      remember:
        description: Keep this start-up in the history once ready (V(false) for a server that was not just launched).
        type: bool
        default: true
      launched:
        description:
          - When this run launched the server (seconds since the epoch, before the launch). The start-up is kept only when the
            server judged ready started at or after it; without it nothing is kept (a server that already ran, such as the
            role's standalone C(ready) entry point finds, is no start-up). M(gpuops.fleet.vllm_process)'s wait passes it.
        type: float
requirements:
  - psutil on the managed host, to watch O(pid).
  - nvidia-ml-py and the NVIDIA driver's C(libnvidia-ml.so.1), with O(check).
seealso:
  - module: gpuops.fleet.vllm_process
"""

EXAMPLES = r"""
- name: Wait for an embedding server (it cannot generate, so no generation check)
  gpuops.fleet.vllm_ready:
    url: http://127.0.0.1:8001
    model: BAAI/bge-m3
    generate_timeout: 0

- name: Wait for the server launched by vllm_process, failing early if it dies
  gpuops.fleet.vllm_ready:
    url: http://127.0.0.1:8000
    model: meta-llama/Llama-3.1-70B-Instruct
    pid: "{{ launched.pid }}"
    create_time: "{{ launched.create_time }}"
    log_file: "{{ launched.log_file }}"
    timeout: 1200
"""

RETURN = r"""
ready:
  description: Whether the server answered /health with 200 (and listed O(model)).
  returned: always
  type: bool
status:
  description: The last answer of /health, such as V(HTTP 503) or V(connection refused).
  returned: always
  type: str
elapsed_s:
  description: Seconds since O(since).
  returned: always
  type: float
since:
  description: The start of the wait (seconds since the epoch on the managed host); pass it to the next call.
  returned: always
  type: float
timeout_s:
  description: The timeout this wait runs under, in seconds from O(since) (O(timeout), or less from O(startup)).
  returned: when the server was polled
  type: float
startup:
  description:
    - The start-up by phase, read from this start-up's lines of the server's log as vLLM prints them (the log file from the
      launch on, the unit's journal since O(since), the container's output).
    - C(total_s) (seconds from O(since) until ready, or until the failure), C(phases) (in order, only those the log printed, each
      with C(name) V(weights), V(compile), V(graphs), V(engine_init) or V(api), C(seconds), C(gib) and, for V(compile),
      C(cache) V(hit) when vLLM loaded its compiled graphs from its cache or V(miss) when it compiled; null where the log
      does not say), C(last_phase) (the last phase the log reached, null when none) and C(line) (all of it in one line).
    - A log in a format that names no phase gives the total only.
  returned: when the server became ready, died while starting or timed out
  type: dict
  sample:
    total_s: 37.4
    phases:
      - {name: weights, seconds: 8.0, gib: 0.23, cache: null}
      - {name: compile, seconds: 2.0, gib: null, cache: hit}
    last_phase: compile
    line: "start-up 37 s: weights 8.0 s (0.23 GiB), compile: cache hit, 2.0 s"
alive:
  description: Whether the watched server still ran at the last poll (null when nothing is watched).
  returned: always
  type: bool
generation:
  description:
    - The generation check's completion once the server was ready, with C(ok), C(tokens) (generated, as the server counted them),
      C(elapsed_s), C(status) (its HTTP status, null when none came), and on failure C(problem) and C(answer) (the server's answer,
      trimmed, the API key masked).
  returned: when the server answered /health and listed O(model), and O(generate_timeout) is above 0
  type: dict
log_tail:
  description: The last lines of the server's log, on failure.
  returned: failure
  type: list
  elements: str
check:
  description:
    - With O(check), once ready, the launch check with the keys that M(gpuops.fleet.vllm_server_check) returns (C(ok), C(checks),
      C(workers)) and its C(msg).
  returned: when ready and O(check) is given
  type: dict
marked_good:
  description: With O(mark_good), whether the configuration was kept as the last known-good one (V(false) when the check failed).
  returned: when ready and O(mark_good) is given
  type: bool
released:
  description: With O(release_lock), whether this task released the lock.
  returned: when ready and O(release_lock) is given
  type: bool
released_token:
  description: With O(release_lock), the token of the lock this task released.
  returned: when this task released the lock
  type: str
pid:
  description:
    - The PID of the server judged ready (O(pid), or the main PID of O(unit) once ready); null when neither is given or the
      unit has no main process.
  returned: when ready
  type: int
create_time:
  description: That process's start time (seconds since the epoch, as psutil reads it); null when unknown.
  returned: when ready
  type: float
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import finish
from ansible_collections.gpuops.fleet.plugins.module_utils._server import ready

# the options, checked on the host by _server/ready.py (vllm_process's ready takes the same)
ARGUMENT_SPEC = ready.ARGUMENT_SPEC


def run(module: AnsibleModule) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """Only the secrets hidden, the options checked, then /health polled until the server is ready, dies, or time runs out."""
    return ready.run(module, module.params)


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=ready.MUTUALLY_EXCLUSIVE,
        required_by=ready.REQUIRED_BY,
        supports_check_mode=True,
    )
    result, warnings, failed = run(module)
    finish(module, result, warnings, failed)


if __name__ == "__main__":
    main()
