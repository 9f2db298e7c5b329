#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_process
short_description: Read, stop and launch an inference server in its launch mode (a detached process, a systemd unit or a container)
version_added: 0.2.0
description:
  - One module for every launch mode of the role C(gpuops.fleet.vllm_server) (O(mode)); what differs by mode is done by
    the mode's backend, and each state returns the same keys in every mode.
  - In the V(process) mode, starts a server (for example C(vllm serve MODEL ...)) as a detached process in a session and
    process group of its own, its environment as given, its output appended to a log file, and writes a record (a JSON
    state file) holding its PID, its start time and a hash of its configuration. Later runs trust the record only when
    the PID still names the process started at the recorded time, so a reused PID is never taken for the server, and
    never signalled. No shell is involved; O(argv) is executed as given, so no value can be turned into shell code.
  - In the V(systemd) mode, runs the server as the unit O(unit) (C(Restart=on-failure)), whose text the caller renders
    (O(systemd.content)); its environment, secrets included, is in the environment file O(systemd.env_file) (mode
    C(0600)), and a configuration record at O(state_file) holds the unit, the configuration hash, the masked argv and the
    environment's names. A unit that crash-loops is reported as such (RV(crash_loop)).
  - In the V(container) mode, runs the server in the container O(container.name) of podman or docker (O(container.runtime),
    by default podman, else docker), started with C(run -d), labelled with the configuration hash and the role's
    marker, its environment, secrets included, in the environment file O(container.env_file) (mode C(0600), passed with
    C(--env-file)), its GPUs as CDI devices (podman) or C(--gpus) (docker). C(inspect) reads it (whether it runs, its main
    process as the host numbers it in RV(pid), its configuration-hash label, restart policy, restart count and last exit code
    in RV(container)). A stop drains it, then C(stop -t) O(stop_timeout) and C(rm). A record at O(state_file) names the
    runtime and the container.
  - Secrets are never written out or returned. The value of an environment variable whose name has a word KEY, APIKEY,
    TOKEN, SECRET(S), PASSWORD, PASSWD or CREDENTIAL(S) (any case, such as C(HF_TOKEN) or C(VLLM_API_KEY)) or is listed
    in O(secret_env), and the value of an argument such as C(--api-key K), C(--api-key=K) or C(--hf-token K), are shown as
    C(********) in the task's result, in the record and in the launch line of the log. The record and the log are created
    mode C(0600).
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Writes, starts and stops nothing; the task reports the change a real run would make.
  diff_mode:
    support: none
    description: Nothing to show as a diff.
options:
  state:
    description:
      - V(running) starts the server unless the recorded one (the unit, the container) runs with the same
        O(config_hash) (then nothing changes). A server that runs with another configuration makes the task fail (stop it
        first).
      - V(stopped) ends the server (process mode, the recorded one, with SIGTERM, then SIGKILL for its whole tree after
        O(stop_timeout), and removes the record; systemd mode, C(systemctl stop) of the unit, and C(systemctl disable)
        with O(systemd.disable); container mode, C(stop -t) O(stop_timeout), then C(rm), and removes the record). With
        O(takeover), the server taken over is stopped first.
      - V(status) only reads what runs (see O(listener) and O(decide)).
    type: str
    choices: [running, stopped, status]
    default: status
  mode:
    description:
      - The launch mode. V(auto) is V(systemd) when systemd runs the host (C(/run/systemd/system) is a directory), else
        V(process); RV(mode) returns the mode used. V(container) is never chosen by V(auto).
    type: str
    choices: [auto, process, systemd, container]
    default: process
  unit:
    description:
      - The server's systemd unit (for example V(gpuops-vllm-8000.service)). Required in the systemd mode.
    type: str
  state_file:
    description:
      - Path of the record (process mode), of the unit's configuration record (systemd mode) or of the container's record
        (container mode, naming the runtime, the container id and name). Each server needs its own.
    type: path
    required: true
  argv:
    description:
      - The command, one word per element. Required with O(state=running).
      - Secret arguments (see the description) are masked wherever the command is shown or recorded; the other words are shown.
      - In the systemd mode the unit's C(ExecStart=) (in O(systemd.content)) runs it; O(argv) is what the record shows.
    type: list
    elements: str
  env:
    description:
      - Environment variables for the server, added to the environment this task runs with (process mode), or written to
        the unit's environment file (systemd mode; each name must then be an environment variable's name), or to the
        container's (container mode; no value may hold a newline).
      - The values of secret names (see the description and O(secret_env)) are never shown; the other values are.
    type: dict
    default: {}
  secret_env:
    description:
      - More names of O(env) whose values are secrets, beyond those recognised by their name.
    type: list
    elements: str
    default: []
  log_file:
    description:
      - File that receives the server's stdout and stderr (appended). Required with O(state=running) in the process mode;
        a unit logs to the journal.
    type: path
  chdir:
    description: Working directory of the server (process mode; a unit's is in its text).
    type: path
  config_hash:
    description:
      - An opaque string that identifies the configuration (the role passes a hash of command, model, sizes, GPUs, arguments
        and environment). Stored in the record; with O(state=running) or O(state=status), compared with the recorded one.
    type: str
  metadata:
    description:
      - Extra facts to keep in the record (for example the port and GPUs), returned by later runs (process mode). Its
        C(name) names the server in the unit's environment file (systemd mode).
    type: dict
    default: {}
  stop_timeout:
    description:
      - Seconds to wait after SIGTERM before the server's remaining tree gets SIGKILL (process mode, and a server taken
        over; the container mode's C(stop -t)); a unit's own C(TimeoutStopSec=) bounds its stop.
    type: float
    default: 30
  health_url:
    description:
      - With O(state=status), also ask this URL (the server's C(/health)) and return RV(healthy), so one task tells whether
        the server runs, with which configuration, and whether it answers. Process mode, when the recorded server runs;
        systemd mode, always (a unit between two restarts answers nothing).
    type: str
  generate:
    description:
      - With O(state=status), when the server runs, has O(config_hash) and answers O(health_url) (when given) with
        HTTP 200, also send it the generation check of M(gpuops.fleet.vllm_ready) (one short completion, C(POST /v1/completions))
        and return RV(generates) and RV(generation). vLLM's API server answers C(/health) while its engine core is dead, so a
        reading that decides whether a running server is left alone needs a completion too.
      - The reading and the check in one task save the host a module start-up.
    type: dict
    suboptions:
      url:
        description: Base URL of the server, for example V(http://127.0.0.1:8000).
        type: str
        required: true
      model:
        description: The model to ask (the server's served model name).
        type: str
      api_key:
        description: Sent as C(Authorization Bearer) with the completion; never shown or returned.
        type: str
      timeout:
        description: Seconds the completion may take; V(0) skips the check.
        type: float
        default: 60
  adapters:
    description:
      - With O(decide), a server that needs no other change (it runs this configuration, answers /health and generates), started
        with C(--enable-lora) and C(VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), also has its LoRA adapters read (C(GET /v1/models), where
        an entry with a C(parent) is an adapter, its C(root) the path) and compared with O(adapters.wanted); the reading
        returns C(adapters) (served, wanted, load, unload, change) and, when only they differ, a reason that says so.
      - M(gpuops.fleet.vllm_lock) with such a reading applies the difference under the lock, without a restart. See docs/adapters.md.
    type: dict
    suboptions:
      url:
        description: Base URL of the server, for example V(http://127.0.0.1:8000).
        type: str
        required: true
      api_key:
        description: Sent as C(Authorization Bearer) with every request; never shown or returned.
        type: str
      wanted:
        description: The adapters the server must serve, each a name and the path vLLM loads it from.
        type: list
        elements: dict
        default: []
        suboptions:
          name:
            description: The adapter's name (the C(model) of a completion that uses it).
            type: str
            required: true
          path:
            description: Where the server loads it from.
            type: str
            required: true
      timeout:
        description: Seconds each request may take (a load, an unload, the completion that proves a loaded adapter).
        type: float
        default: 60
      result:
        description:
          - The fact C(vllm_server_result) that a change sets (with C(action=adapters)), as M(gpuops.fleet.vllm_process)'s
            O(gpuops.fleet.vllm_process#module:unchanged_result) for a server left alone.
        type: dict
        default: {}
      lock:
        description:
          - The server's lock. A reading (M(gpuops.fleet.vllm_process) with O(gpuops.fleet.vllm_process#module:state=status)) that
            finds only the adapters different takes it when it is free (never taking over another run's), reads again under it,
            changes them and releases it, in the same module run; with the lock held, it changes nothing and its C(reason) says
            that the adapters differ. Not used by M(gpuops.fleet.vllm_lock), which holds its own lock.
        type: dict
        suboptions:
          path:
            description: The lock file.
            type: path
            required: true
          play:
            description: The play's name, kept in the lock's record for a run that finds it held.
            type: str
  listener:
    description:
      - With O(state=status), also read the process that listens on the server's port, as M(gpuops.fleet.vllm_listener)
        does, and return it as RV(listener), and as RV(takeover) when it is not the managed server (not the role's own
        unit, not the PID of the server that runs).
      - 'When that process may not be taken over (its C(refusal)), the task fails with
        C(vllm_server: nothing was stopped:) and the refusal.'
    type: dict
    suboptions:
      port:
        description: The server's port.
        type: int
        required: true
      match:
        description: What a vLLM server looks like, as M(gpuops.fleet.vllm_listener)'s O(gpuops.fleet.vllm_listener#module:match).
        type: list
        elements: str
        default: ['^VLLM::', 'vllm\.entrypoints\.', '(^|/)vllm\s+serve(\s|$)']
      unit:
        description: This collection's own systemd unit of the server (default O(unit) in the systemd mode, none in the process mode).
        type: str
      stop_units:
        description: Another tool's unit is no reason to refuse the listener (see M(gpuops.fleet.vllm_listener)).
        type: bool
        default: false
      across:
        description:
          - This host's node of a server across hosts (the role's C(vllm_server_nodes_group)). A rank of a server across as many
            hosts as the group is then taken over, not refused; a rank of a server across another number of hosts is refused.
          - With C(head) (a headless node, which serves no API), the server to take over is not the listener on
            the port but the vLLM-shaped process with C(--headless) joined to that head and port (C(--master-addr) and
            C(--master-port), or the data-parallel address and RPC port);
            none when there is none or more than one.
        type: dict
        suboptions:
          group:
            description: The server group's name.
            type: str
            required: true
          size:
            description: Its number of hosts.
            type: int
            required: true
          head:
            description: On a headless node, the head's address.
            type: str
          port:
            description: On a headless node, the port its ranks join the head on (C(--master-port) or C(--data-parallel-rpc-port)).
            type: int
  decide:
    description:
      - With O(state=status), also decide from the reading whether the server must change, and return RV(reason).
    type: dict
    suboptions:
      state:
        description: The state the caller wants the server in (the role's C(vllm_server_state)).
        type: str
        choices: [started, restarted, stopped]
        default: started
      force:
        description: A restart is forced (the role's C(vllm_server_force_restart)).
        type: bool
        default: false
  drain_url:
    description:
      - With O(state=stopped), the server's base URL (for example V(http://127.0.0.1:8000)); before the stop, wait up to
        O(drain_timeout) seconds until its C(/metrics) shows no request running or waiting, as M(gpuops.fleet.vllm_drain) does,
        and return RV(drained). Only when the server runs; in check mode the metrics are read once.
      - The same for the server taken over (O(takeover)), returned in RV(takeover_stopped).
      - The drain and the stop in one task save the host a module start-up in a restart.
    type: str
  drain_timeout:
    description: Seconds the drain before the stop waits at most (see O(drain_url)); the requests still in flight then are cut.
    type: float
    default: 60
  stop_after:
    description:
      - With O(state=stopped), the URL of the C(/health) of another server to wait for first, as a headless node of a
        server across hosts waits for its head. The stop begins once nothing answers there (any HTTP status counts as an
        answer), or after O(drain_timeout) + O(stop_timeout) + 30 seconds, and RV(head_stopped) says which.
      - Not waited for in check mode.
    type: str
  reclaim:
    description:
      - With O(state=stopped), once the stop succeeded, reclaim the server's GPUs in the same module run, as
        M(gpuops.fleet.gpu_reclaim) does with these options (the same names, values and defaults; in check mode, what it
        would do), and return its result as RV(reclaim). The stop and the reclaim that must follow it are one module
        start-up on the host instead of two (the role's reclaim step then judges this result).
      - A reclaim that fails (an option it refuses, a missing library, no driver, a GPU it cannot free) does not fail this
        task; C(failed) in RV(reclaim) says so.
    type: dict
  takeover:
    description:
      - With O(state=stopped), first stop this server - one taken over, found listening on the server's port
        (M(gpuops.fleet.vllm_listener), RV(takeover)) but never launched by this module - then the managed server as
        O(state=stopped) does. Another tool's unit that runs it (O(takeover.how=systemd)) is stopped and disabled first;
        then it is drained with O(drain_url) and its whole tree is stopped (SIGTERM, then SIGKILL after O(stop_timeout));
        its parent (a shell, tmux, screen) is not signalled.
      - A server in a docker or podman container (O(takeover.container)) is drained, then its container is stopped through
        its runtime (C(RUNTIME stop -t STOP_TIMEOUT ID)); it is never signalled, removed, or changed (its restart policy
        stays; RV(gpuops.fleet.vllm_listener#module:listener.container.starts_again) says when the runtime starts it again).
      - A process that no longer runs with this start time is not stopped; a container that no longer runs is not either.
    type: dict
    suboptions:
      pid:
        description: Its PID.
        type: int
        required: true
      create_time:
        description: Its start time (seconds since the epoch, as psutil reads it); another process with the PID is never signalled.
        type: float
        required: true
      how:
        description: How it was started, as M(gpuops.fleet.vllm_listener) says (RV(gpuops.fleet.vllm_listener#module:listener.how)).
        type: str
      unit:
        description: The other tool's unit that runs it, stopped and disabled when O(takeover.how=systemd).
        type: str
      container:
        description: The container it runs in (RV(gpuops.fleet.vllm_listener#module:listener.container)), stopped through its runtime.
        type: dict
        suboptions:
          runtime:
            description: Its runtime.
            type: str
            choices: [podman, docker]
            required: true
          id:
            description: Its full id (64 hexadecimal digits).
            type: str
            required: true
          name:
            description: Its name, for the messages.
            type: str
  unchanged_result:
    description:
      - With O(state=status) and O(decide), when nothing must change (RV(reason) empty), the fact C(vllm_server_result) is set
        to this dict with C(action=unchanged), C(reason) (what the reading found) and C(pid), which makes the result of the
        P(gpuops.fleet.vllm_server#role) role for a server it leaves alone.
    type: dict
  lock:
    description:
      - Instead of O(state), take the server's lock with M(gpuops.fleet.vllm_lock)'s options (this dict, checked as that
        module checks them, C(path), C(token), C(status), C(preflight) and the others) and return that module's result
        (RV(gpuops.fleet.vllm_lock#module:acquired), RV(gpuops.fleet.vllm_lock#module:status),
        RV(gpuops.fleet.vllm_lock#module:preflight) and the others) and not this module's keys; the other options are
        not used (O(state_file) is still required).
      - M(gpuops.fleet.vllm_lock)'s action plugin runs its lock with a reading (C(status)) through this option, so that
        one restart's lock, stop and launch run one module (its payload built once on the controller for the three).
    type: dict
  ready:
    description:
      - Instead of O(state), wait until the server is ready, with M(gpuops.fleet.vllm_ready)'s options (this dict, checked
        as that module checks them, C(url), C(api_key), C(check), C(mark_good), C(release_lock) and the others; its
        secrets hidden as that module hides them) and return that module's result
        (RV(gpuops.fleet.vllm_ready#module:ready), RV(gpuops.fleet.vllm_ready#module:check) and the others) and not this
        module's keys; the other options are not used (O(state_file) is still required).
      - M(gpuops.fleet.vllm_ready)'s action plugin runs its wait through this option when it is given a C(state_file),
        so that the ready step of a restart runs the module the lock, the stop and the launch ran.
    type: dict
  wait:
    description:
      - With O(state=running), once the launch succeeded (not in check mode), wait for the new server in the same module
        run, with M(gpuops.fleet.vllm_ready)'s options (this dict, checked and its secrets hidden as O(ready) does), for at
        most C(poll_for) seconds (default V(10), the steps in which that module's action plugin waits), and return that
        module's result as RV(waited). A server ready within that time costs the host one module start-up for the launch
        and the wait instead of two (the role's ready step then shows and judges this result, and waits on when the server
        was not ready yet).
      - A wait that fails (the server died, an option it refuses) does not fail this task; C(failed) in RV(waited) says so.
    type: dict
  wait_environment:
    description:
      - With O(wait), the environment the wait runs with (the role passes C(gpuops_fleet_environment)), set in this
        module's process only once the server was launched, so that the server does not inherit it. An C(LD_LIBRARY_PATH)
        in it is where the launch check's NVML library is loaded from (the loader reads that variable only when a
        process starts).
    type: dict
    default: {}
  caches:
    description:
      - With O(state=running), the places of the server's caches (the model download directory, vLLM's, Triton's and
        FlashInfer's caches), made ready before the launch; the role passes the places it chose (see the role's
        C(vllm_server_cache_dir)). Check mode makes nothing.
    type: dict
    suboptions:
      paths:
        description:
          - Directories created when missing (mode 0755, with their missing parents). In the container mode each is also
            mounted into the container at its own path (C(-v PATH:PATH)), so that the environment's places are the host's.
        type: list
        elements: path
        default: []
      mounts:
        description:
          - More places, kept from the server this launch replaces (perhaps another user's), never created nor given to
            O(caches.owner); in the container mode mounted at their own paths.
        type: list
        elements: path
        default: []
      owner:
        description:
          - The user (a name or a uid) that the directories this task creates belong to, with its primary group (a systemd
            unit's C(User=), a container's C(--user)); empty keeps this module's user.
        type: str
        default: ''
  systemd:
    description:
      - The systemd mode's launch (O(state=running)) and stop (O(state=stopped)).
    type: dict
    suboptions:
      content:
        description:
          - The unit's text, rendered (it holds no secret; a secret argument is a C(${VAR}) reference set by the environment
            file). Written to C(/etc/systemd/system/UNIT), mode C(0644), only when it differs, with C(systemctl daemon-reload)
            then. Required to launch.
        type: str
      env_file:
        description:
          - The unit's C(EnvironmentFile=), created mode C(0600) before anything is written to it, then written with
            O(env) and O(systemd.exec_env) as C(KEY="value") lines (C(\), C("), C($) and C(`) escaped). Required to launch.
        type: path
      exec_env:
        description: The variables the unit's C(${VAR}) references name (the secret arguments), written after O(env).
        type: dict
        default: {}
      enabled:
        description:
          - Launch the unit enabled (it starts at boot) or disabled.
          - With O(state=status) and O(decide), a unit that runs this configuration and needs no change (RV(reason) empty), or
            whose LoRA adapters alone differed and were just changed in the same run (C(adapted=true)), is enabled or disabled as
            this says, without a restart (C(changed=true) then).
        type: bool
        default: true
      disable:
        description: With O(state=stopped), also disable the unit (a stop meant to last).
        type: bool
        default: false
  container:
    description:
      - The container mode's container. O(container.name) is required in that mode; O(container.image) and
        O(container.env_file) to launch.
    type: dict
    suboptions:
      name:
        description: The container's name.
        type: str
        required: true
      runtime:
        description: The runtime; by default the record's, else podman, else docker, whichever is installed.
        type: str
        choices: [podman, docker]
      image:
        description: The image to run.
        type: str
      gpus:
        description: The host's GPU indices the container gets.
        type: list
        elements: int
        default: []
      cdi_kind:
        description: The CDI kind of the GPUs for podman (C(--device KIND=N) for each GPU); docker gets C(--gpus "device=N,M").
        type: str
        default: nvidia.com/gpu
      network:
        description:
          - V(host) runs the container in the host's network (C(--network host)), so that the server's port is the host's
            and the process on the port is the server itself; another network's name publishes the port as itself
            (C(-p PORT:PORT)), with the runtime's process holding it on the host.
        type: str
        default: host
      port:
        description: The server's port, published as itself on a network other than V(host).
        type: int
      volumes:
        description: Volumes (C(-v) each), for example the model cache, V(/var/cache/vllm:/root/.cache/huggingface).
        type: list
        elements: str
        default: []
      run_options:
        description: More options of C(run), one word each, before the image.
        type: list
        elements: str
        default: []
      restart:
        description: The container's restart policy (C(--restart)).
        type: str
        default: unless-stopped
      env_file:
        description:
          - The container's environment file, created mode C(0600) before anything is written to it, then written with O(env)
            as C(KEY=value) lines, passed with C(--env-file). Required to launch.
        type: path
requirements:
  - psutil on the managed host.
  - systemd (C(systemctl)) in the systemd mode.
  - podman or docker in the container mode.
seealso:
  - module: gpuops.fleet.vllm_ready
  - module: gpuops.fleet.vllm_listener
  - module: gpuops.fleet.gpu_reclaim
"""

EXAMPLES = r"""
- name: Launch vLLM on GPUs 0-3 as a detached process
  gpuops.fleet.vllm_process:
    state: running
    state_file: /var/lib/gpuops-fleet/vllm/vllm-8000.json
    log_file: /var/log/gpuops-fleet/vllm-8000.log
    argv: [vllm, serve, meta-llama/Llama-3.1-70B-Instruct, --tensor-parallel-size, "4", --port, "8000"]
    env:
      CUDA_VISIBLE_DEVICES: "0,1,2,3"
      NCCL_PROTO: LL
  register: launched

- name: Read what runs, what listens on the port, and whether it must change
  gpuops.fleet.vllm_process:
    state: status
    mode: auto
    unit: gpuops-vllm-8000.service
    state_file: /var/lib/gpuops-fleet/vllm/vllm-8000.json
    config_hash: "{{ config_hash }}"
    health_url: http://127.0.0.1:8000/health
    listener:
      port: 8000
    decide:
      state: started
  register: reading

- name: Stop it (by recorded PID and start time), and first the server taken over, if any
  gpuops.fleet.vllm_process:
    state: stopped
    state_file: /var/lib/gpuops-fleet/vllm/vllm-8000.json
    drain_url: http://127.0.0.1:8000
    takeover: "{{ reading.takeover if reading.takeover else omit }}"
"""

RETURN = r"""
ansible_facts:
  description: With O(unchanged_result), when nothing must change, C(vllm_server_result).
  returned: when O(unchanged_result) is given and RV(reason) is empty
  type: dict
mode:
  description: The launch mode used (O(mode), with V(auto) resolved).
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: str
  sample: process
running:
  description: Whether the server runs at the end of the task (in check mode, whether it would).
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: bool
pid:
  description: PID of the server (the unit's main PID in the systemd mode, the container's main process as the host numbers it in the
    container mode; null when none runs).
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: int
  sample: 41234
create_time:
  description: Start time of the server process (seconds since the epoch, as psutil reads it); null when none runs.
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: float
config_hash:
  description: The configuration hash of the record (null without a record).
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: str
config_matches:
  description: Whether O(config_hash) equals the recorded one (null when either is missing).
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: bool
caches:
  description: With O(caches), its C(paths) and C(mounts), and the directories this task created (C(made)).
  returned: with O(state=running) and O(caches), outside check mode
  type: dict
  sample: {"paths": ["/var/cache/gpuops-fleet/vllm-8000/vllm"], "mounts": [], "made": ["/var/cache/gpuops-fleet/vllm-8000/vllm"]}
launched:
  description: Whether this task started the server.
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: bool
log_file:
  description: The server's log file (from the record when there is one; null in the systemd mode, whose log is the journal).
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: str
healthy:
  description: With O(health_url), whether the server answered it with HTTP 200 (null when not asked, or not running in the process mode).
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: bool
health:
  description: With O(health_url), its answer, such as V(HTTP 200), V(HTTP 503) or V(connection refused) (null when not asked).
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: str
crash_loop:
  description:
    - 'In the systemd mode, when the unit does not answer O(health_url) and systemd restarted it after its server failed (or
      is about to), the crash loop in words (V(crash loop: 3 restarts, last exit status 1 (Result=exit-code\); systemd gave
      up)); else the empty string.'
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: str
generates:
  description:
    - With O(generate), whether the running server answered the short completion with tokens in time (null when not asked,
      that is without O(generate), with its timeout V(0), or for a server that does not run, has another configuration or fails
      O(health_url)).
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: bool
generation:
  description:
    - With O(generate), the completion as M(gpuops.fleet.vllm_ready) returns it (C(ok), C(tokens), C(elapsed_s), C(status), and
      on failure C(problem) and C(answer), trimmed, the API key masked); null when not asked.
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: dict
record:
  description:
    - The record as found at the start of the task (the unit's configuration record in the systemd mode; null when there was
      none). Its C(argv) has secret arguments masked and its C(env_keys) lists the names of the environment, never a value.
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: dict
env_keys:
  description: The names of O(env) (every value stays on the host).
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: list
  elements: str
  sample: [CUDA_VISIBLE_DEVICES, HF_TOKEN, NCCL_PROTO]
secret_env_keys:
  description: The names of O(env) whose values are treated as secrets.
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: list
  elements: str
  sample: [HF_TOKEN]
listener:
  description: With O(listener), the process that listens on the port as M(gpuops.fleet.vllm_listener) returns it (null when none).
  returned: when O(listener) is given and O(state=status)
  type: dict
takeover:
  description:
    - With O(listener), that process when it is not the managed server (its C(how) is not C(own_unit) and its PID is not the
      running server's), the server to take over, to pass to O(takeover) of the stop. Null otherwise.
  returned: when O(listener) is given and O(state=status)
  type: dict
adapters:
  description:
    - With O(adapters), for a server that needs no other change, its LoRA adapters - C(served) (name to path; null when
      C(/v1/models) could not be read, then C(problem) says why), C(wanted), C(load) (a list of name and path), C(unload) (names),
      C(change) (whether they differ).
  returned: with O(state=status), O(decide) and O(adapters), when nothing else must change
  type: dict
reason:
  description:
    - With O(decide), why the server must change, the empty string when it is left alone. In this order V(a stop was asked
      for), V(no managed server ran) (with the crash loop in brackets), V(a restart was forced), V(its configuration changed),
      V(it does not answer /health (...)), V(the running server does not generate) and the failure.
  returned: when O(decide) is given and O(state=status)
  type: str
stopped:
  description:
    - With O(state=stopped), each process that ended, the server taken over's first (see RV(takeover_stopped)), then the
      managed server's tree (in the systemd mode, the unit's main process and its descendants that ended with the unit).
  returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
  type: list
  elements: dict
  contains:
    pid:
      description: PID.
      type: int
      returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
    name:
      description: Name (process title where one is set, such as C(VLLM::Worker_TP0)).
      type: str
      returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
    signal:
      description:
        - The signal this task sent it before it exited, or V(null) when it exited after its server was signalled (and in
          the systemd mode, where systemd signals the unit's processes).
      type: str
      returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
    seconds:
      description: Seconds from the stop's first signal to its exit.
      type: float
      returned: always, except with O(lock) or O(ready) (then the result of M(gpuops.fleet.vllm_lock) or M(gpuops.fleet.vllm_ready))
drained:
  description:
    - With O(state=stopped) and O(drain_url), when the managed server ran, the drain before the stop, with the keys that
      M(gpuops.fleet.vllm_drain) returns (C(answered), C(running_at_start), C(cut), C(drained), C(waited_s), C(msg)).
  returned: when drained
  type: dict
head_stopped:
  description: With O(state=stopped) and O(stop_after), outside check mode, the wait for the head before the stop.
  returned: when O(stop_after) is given
  type: dict
  contains:
    url:
      description: The URL waited on (O(stop_after)).
      type: str
    gone:
      description: Whether nothing answered there any more; false when the wait ran out and the stop went ahead anyway.
      type: bool
    waited_s:
      description: Seconds waited.
      type: float
reclaim:
  description:
    - With O(state=stopped) and O(reclaim), once the stop succeeded, M(gpuops.fleet.gpu_reclaim)'s result (its keys, as
      that module returns them), with C(failed) and C(warnings) (a list of strings).
  returned: when O(reclaim) is given, O(state=stopped) and the stop succeeded
  type: dict
waited:
  description:
    - With O(state=running) and O(wait), once the launch succeeded, M(gpuops.fleet.vllm_ready)'s result (its keys, as that
      module returns them, RV(gpuops.fleet.vllm_ready#module:ready), RV(gpuops.fleet.vllm_ready#module:since),
      RV(gpuops.fleet.vllm_ready#module:check) and the others), with C(failed) and C(warnings) (a list of strings).
    - And C(launched_at), the time before this launch (null when the server already ran), which M(gpuops.fleet.vllm_ready)'s
      action plugin passes on as its O(gpuops.fleet.vllm_ready#module:startup.launched) when it waits on.
  returned: when O(wait) is given, O(state=running), the launch succeeded and not in check mode
  type: dict
takeover_stopped:
  description: With O(state=stopped) and O(takeover), the stop of the server taken over.
  returned: when O(takeover) is given and O(state=stopped)
  type: dict
  contains:
    stopped:
      description: Each process of its tree that ended, as in RV(stopped).
      type: list
      elements: dict
    drained:
      description: Its drain (as RV(drained)), when it ran and O(drain_url) was given, else an empty dict.
      type: dict
    unit_disabled:
      description: Whether the other tool's unit that ran it was stopped or disabled (O(takeover.how=systemd)).
      type: bool
    container:
      description:
        - With O(takeover.container), the container as C(inspect) read it before its stop (the keys of RV(container)); null
          otherwise, or when its runtime no longer knows it.
      type: dict
container:
  description:
    - In the container mode, the container as C(inspect) reads it (C(runtime), C(id), C(name), C(image), C(running), C(status),
      C(pid), C(config_hash), C(marker), C(restart_policy), C(restart_count), C(exit_code), C(conmon_pid)); null when there is
      none.
  returned: when O(mode) is container
  type: dict
container_id:
  description: In the container mode, the container's id (null when there is none).
  returned: when O(mode) is container
  type: str
run_argv:
  description: In the container mode with O(state=running), the runtime's command that launched the container (secrets masked).
  returned: when O(mode) is container and a container was launched
  type: list
  elements: str
unit_changed:
  description: In the systemd mode with O(state=running), whether the unit file was written (and systemd reloaded).
  returned: when O(mode) is systemd and O(state=running)
  type: bool
"""

import functools
import json
import time
import typing as t

from ansible.module_utils.basic import AnsibleModule

# first: every module_util below is compiled once on the host, not twice (see _compile_once)
from ansible_collections.gpuops.fleet.plugins.module_utils import _compile_once  # noqa: F401 pylint: disable=unused-import
from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError, between, finish, http_url
from ansible_collections.gpuops.fleet.plugins.module_utils._host.listener import DEFAULT_MATCH, ListenerError
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import (
    hide_only_secrets, masked_argv, secret_argv_values, secret_env_names,
)
from ansible_collections.gpuops.fleet.plugins.module_utils._server.generation import GENERATE_OPTIONS
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.mode import DEFAULT_CDI_KIND, HOST_NETWORK, MODES, RUNTIMES, backend, resolve_mode
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import caches as cache_dirs
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.caches import OPTION_SPEC as CACHES_SPEC
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.process import LaunchSpec, ServerError, Target
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.takeover import stop_takeover
from ansible_collections.gpuops.fleet.plugins.module_utils._server.adapters import ADAPTER_OPTIONS, change, change_locked
from ansible_collections.gpuops.fleet.plugins.module_utils._server.record import RecordError
from ansible_collections.gpuops.fleet.plugins.module_utils._server.status import (
    DECIDE_OPTIONS, check_options, listener_options, read_server,
)


ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "state": {"type": "str", "choices": ["running", "stopped", "status"], "default": "status"},
    "mode": {"type": "str", "choices": list(MODES), "default": "process"},
    "unit": {"type": "str"},
    "state_file": {"type": "path", "required": True},
    "argv": {"type": "list", "elements": "str", "no_log": True},
    "env": {"type": "dict", "default": {}, "no_log": True},
    "secret_env": {"type": "list", "elements": "str", "default": [], "no_log": False},
    "log_file": {"type": "path"},
    "chdir": {"type": "path"},
    "config_hash": {"type": "str"},
    "metadata": {"type": "dict", "default": {}},
    "stop_timeout": {"type": "float", "default": 30},
    "health_url": {"type": "str"},
    "generate": {"type": "dict", "options": GENERATE_OPTIONS},
    "listener": {"type": "dict", "options": listener_options(DEFAULT_MATCH)},
    "decide": {"type": "dict", "options": DECIDE_OPTIONS},
    "adapters": {"type": "dict", "options": ADAPTER_OPTIONS},
    "drain_url": {"type": "str"},
    "drain_timeout": {"type": "float", "default": 60},
    "stop_after": {"type": "str"},
    "reclaim": {"type": "dict"},
    "takeover": {"type": "dict", "options": {
        "pid": {"type": "int", "required": True},
        "create_time": {"type": "float", "required": True},
        "how": {"type": "str"},
        "unit": {"type": "str"},
        "container": {"type": "dict", "options": {
            "runtime": {"type": "str", "choices": list(RUNTIMES), "required": True},
            "id": {"type": "str", "required": True},
            "name": {"type": "str"},
        }},
    }},
    "unchanged_result": {"type": "dict"},
    "lock": {"type": "dict"},
    "ready": {"type": "dict"},
    "wait": {"type": "dict"},
    "wait_environment": {"type": "dict", "default": {}},
    "caches": CACHES_SPEC,
    "systemd": {"type": "dict", "options": {
        "content": {"type": "str"},
        "env_file": {"type": "path"},
        "exec_env": {"type": "dict", "default": {}, "no_log": True},
        "enabled": {"type": "bool", "default": True},
        "disable": {"type": "bool", "default": False},
    }},
    "container": {"type": "dict", "options": {
        "name": {"type": "str", "required": True},
        "runtime": {"type": "str", "choices": list(RUNTIMES)},
        "image": {"type": "str"},
        "gpus": {"type": "list", "elements": "int", "default": []},
        "cdi_kind": {"type": "str", "default": DEFAULT_CDI_KIND},
        "network": {"type": "str", "default": HOST_NETWORK},
        "port": {"type": "int"},
        "volumes": {"type": "list", "elements": "str", "default": []},
        "run_options": {"type": "list", "elements": "str", "default": []},
        "restart": {"type": "str", "default": "unless-stopped"},
        "env_file": {"type": "path"},
    }},
}


def check_params(params: t.Mapping[str, t.Any], mode: str) -> None:
    """Raises SpecError naming the option and the value when one cannot be used."""
    argv = params["argv"] or []
    if params["state"] == "running" and not argv:
        raise SpecError("argv: the command must have at least one word, got %r" % (list(argv),))
    if params["state"] == "running" and mode == "process" and not params["log_file"]:
        raise SpecError("log_file: the process mode needs a log file to launch, got none")
    if params["state"] == "running" and mode == "systemd":
        for key in ("content", "env_file"):
            if not (params["systemd"] or {}).get(key):
                raise SpecError("systemd.%s: the systemd mode needs it to launch, got none" % key)
    if params["state"] == "running" and mode == "container":
        for key in ("image", "env_file"):
            if not (params["container"] or {}).get(key):
                raise SpecError("container.%s: the container mode needs it to launch, got none" % key)
    if mode == "container" and params["container"]:
        # the container backend, imported by a run in its mode only (see mode.backend)
        # pylint: disable-next=import-outside-toplevel
        from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.container import check_spec, spec_of
        try:
            check_spec(spec_of(params["container"]))
        except ServerError as exc:
            raise SpecError(str(exc)) from None
    between("stop_timeout", params["stop_timeout"], 0, 3600, "seconds")
    between("drain_timeout", params["drain_timeout"], 0, 86400, "seconds")
    if params["drain_url"] is not None:
        http_url("drain_url", params["drain_url"])
    if params["stop_after"] is not None:
        http_url("stop_after", params["stop_after"])
    if params["takeover"] is not None:
        between("takeover.pid", params["takeover"]["pid"], 2, 2 ** 22, "")
        box = params["takeover"]["container"]
        # only a takeover of a container compiles the container helpers (see _status)
        from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import is_full_id  # pylint: disable=import-outside-toplevel
        if box is not None and not is_full_id(box["id"]):
            raise SpecError("takeover.container.id: expected a container's full id (64 hexadecimal digits), got %s" % json.dumps(box["id"]))
    check_options(dict(params, mode=mode))


def _hide_only_secrets(module: AnsibleModule, params: t.Mapping[str, t.Any]) -> t.List[str]:
    """Keep hidden only the secrets among the no_log options' values; return the secret names of ``env``."""
    argv = params["argv"] or []
    env = params["env"]
    names = secret_env_names(env, params["secret_env"])
    exec_env = (params["systemd"] or {}).get("exec_env") or {}
    hide_only_secrets(module, list(argv) + [value for name, value in env.items() if name not in names],
                      secret_argv_values(argv) + [env[name] for name in names] + list(exec_env.values()))
    return names


def _target(params: t.Mapping[str, t.Any]) -> Target:
    return Target(params["state_file"], params["unit"], params["config_hash"], params["container"])


def _status(module: AnsibleModule, psutil: t.Any, mode: str, params: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """state=status: what runs, and with listener and decide, what listens on the port and what must change."""
    # imported by the state that uses it: each module run compiles what it imports from source (no bytecode cache in
    # the module's zip), and a launch or a stop never reads the listener
    from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.takeover import read_listener  # pylint: disable=import-outside-toplevel
    options = {key: params[key] for key in ("state_file", "unit", "config_hash", "health_url", "generate", "listener", "decide", "container",
                                            "adapters")}
    options["mode"] = mode
    result = dict(read_server(module, psutil, options, read_listener), changed=False)
    if (result.get("adapters") or {}).get("change"):
        result = _adapters(module, psutil, options, read_listener, result)
    wanted = (params["systemd"] or {}).get("enabled")
    if (mode == "systemd" and wanted is not None and params["systemd"] is not None and result["running"]
            and (result.get("reason") == "" or result.get("adapted"))):
        # a unit that runs this configuration (its LoRA adapters changed at most, just now) gets the enabled state asked
        # for, without a restart
        systemd_backend = backend(mode)
        if systemd_backend.set_enabled(module, params["unit"], systemd_backend.show(module, params["unit"]), wanted):
            said = "unit %s %s" % (params["unit"], "enabled" if wanted else "disabled")
            result.update(changed=True, msg="%s; %s" % (result["msg"], said) if result.get("msg") else said)
    if params["unchanged_result"] is not None and result.get("reason") == "":
        generation = result.get("generation")
        said = "already runs with this configuration and answers /health"
        if generation:
            said += ", and generates (%s tokens in %s s)" % (generation.get("tokens"), generation.get("elapsed_s"))
        result["ansible_facts"] = {"vllm_server_result": dict(params["unchanged_result"], action="unchanged", reason=said,
                                                              pid=result["pid"])}
    return result


def _adapters(module: AnsibleModule, psutil: t.Any, options: t.Dict[str, t.Any], read_listener: t.Any,
              result: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    """Only the LoRA adapters differ: previewed in check mode; otherwise changed under the server's lock, taken here when
    free (read again under it), without a restart (adapted true). With the lock held by another run, the reading as it
    is: the role's lock task then waits its turn and changes them. Raises ServerError when a change failed (undone)."""
    if module.check_mode:
        return dict(result, **change(options["adapters"], result, True)[0])
    done = change_locked(options["adapters"], functools.partial(read_server, module, psutil, options, read_listener))
    if done is None:
        return result
    reading, fields, failed = done
    result = dict(reading, **dict({"changed": False}, **fields))
    if failed:
        raise ServerError(fields["msg"], result)
    return result


def _stop(module: AnsibleModule, psutil: t.Any, mode: str, params: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """state=stopped: the server taken over first (with takeover), then the managed server; with stop_after, once the
    head of the server across hosts stopped."""
    head = None
    if params["stop_after"] is not None and not module.check_mode:
        from ansible_collections.gpuops.fleet.plugins.module_utils._server.head_gone import wait_gone  # pylint: disable=import-outside-toplevel
        head = wait_gone(params["stop_after"], params["drain_timeout"] + params["stop_timeout"] + 30)
    taken = None
    if params["takeover"] is not None:
        taken = stop_takeover(module, psutil, params["takeover"], params["drain_url"], params["drain_timeout"], params["stop_timeout"])
    try:
        result = backend(mode).stop(module, psutil, _target(params), params["drain_url"], params["drain_timeout"],
                                    params["stop_timeout"], bool((params["systemd"] or {}).get("disable")))
    except ServerError as exc:
        if taken is not None:
            exc.result = dict(exc.result, takeover_stopped=_taken(taken))
        raise
    if taken is not None:
        result["takeover_stopped"] = _taken(taken)
        result["stopped"] = taken["stopped"] + result["stopped"]
        result["changed"] = result["changed"] or taken["changed"]
        result["msg"] = "taken over: %s; %s" % (taken["msg"], result.get("msg") or "the managed server did not run")
    if head is not None:
        result["head_stopped"] = head
    if params["reclaim"] is not None:
        # only a stop that reclaims compiles the reclaim's code (see _status)
        from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.run import reclaim_in_module  # pylint: disable=import-outside-toplevel
        reclaimed, warnings, failed = reclaim_in_module(module, params["reclaim"], module.check_mode, beside=True)
        result["reclaim"] = dict(reclaimed, failed=failed, warnings=warnings)
    return result


def _taken(taken: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    return {"stopped": taken["stopped"], "drained": taken.get("drained") or {}, "unit_disabled": taken["unit_disabled"],
            "container": taken.get("container")}


def _launch(module: AnsibleModule, psutil: t.Any, mode: str, params: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """state=running: launch the server unless it runs with this configuration."""
    argv = [str(word) for word in params["argv"] or []]
    if module.check_mode:
        # the stop before the launch was only previewed: whatever runs now stays, so say what would be launched
        where = " in container %s" % params["container"]["name"] if mode == "container" and params["container"] else ""
        return {"changed": True, "running": True, "msg": "would launch %s%s" % (" ".join(masked_argv(argv)), where)}
    caches = params.get("caches") or {}
    paths = list(caches.get("paths") or [])
    made = cache_dirs.prepare(paths, caches.get("owner") or "")
    mounted = paths + list(caches.get("mounts") or [])
    if mounted and mode == "container" and params["container"]:
        # each place at its own path in the container: the server's environment names the host's
        box = dict(params["container"], volumes=list(params["container"]["volumes"] or []) + cache_dirs.volumes(mounted))
        params = dict(params, container=box)
    spec = LaunchSpec(argv=argv, env=dict(params["env"]), shown_argv=masked_argv(argv), log_file=params["log_file"],
                      chdir=params["chdir"], metadata=params["metadata"], systemd=params["systemd"])
    result = backend(mode).launch(module, psutil, _target(params), spec)
    if mounted:
        result["caches"] = {"paths": [str(path) for path in paths], "mounts": list(caches.get("mounts") or []), "made": made}
    return result


STATES = {"status": _status, "stopped": _stop, "running": _launch}
# seconds that a launch's wait polls the new server: vllm_ready's action plugin waits in steps as long (PROGRESS_EVERY_S)
WAIT_FOR_S = 10.0


def _lock(module: AnsibleModule, given: t.Mapping[str, t.Any]) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """lock: vllm_lock's task instead, with its options (checked as vllm_lock checks them) and its result."""
    # only the lock's run compiles the lock's and the preflight's code (see _status)
    # pylint: disable=import-outside-toplevel
    from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.preflight import preflight_reading
    from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.takeover import read_listener
    from ansible_collections.gpuops.fleet.plugins.module_utils._server import locking
    # pylint: enable=import-outside-toplevel
    try:
        params = locking.validated(given, "lock.")
    except SpecError as exc:
        return {"changed": False, "msg": str(exc)}, [], True
    return locking.run(module, params, read_listener, preflight_reading)


def _ready(module: AnsibleModule, given: t.Mapping[str, t.Any], option: str = "ready") -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """ready: vllm_ready's task instead, with its options (checked as vllm_ready checks them) and its result."""
    # only the ready step's run compiles the wait's, the check's and the mark's code (see _status)
    from ansible_collections.gpuops.fleet.plugins.module_utils._server import ready  # pylint: disable=import-outside-toplevel
    # hidden as vllm_ready's own options would be, even in the failure of a bad option; run() narrows it to the secrets
    module.no_log_values.update(str(leaf) for leaf in ready.no_log_leaves(given))
    try:
        params = ready.validated(given, option + ".")
    except SpecError as exc:
        return {"changed": False, "msg": str(exc)}, [], True
    return ready.run(module, params)


def _wait(module: AnsibleModule, given: t.Mapping[str, t.Any], environment: t.Mapping[str, t.Any],
          launched: t.Optional[float]) -> t.Dict[str, t.Any]:
    """wait: vllm_ready's result for the server just launched, polled for at most WAIT_FOR_S unless poll_for says, in
    ``environment`` (set now: the server started without it). ``launched`` (the time before this launch, None when
    nothing was launched) goes to its startup option and back in the result, for the ready step that waits on."""
    if isinstance(given.get("startup"), dict):
        given = dict(given, startup=dict(given["startup"], launched=launched))
    from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import use_environment  # pylint: disable=import-outside-toplevel
    use_environment(environment)
    hidden = set(module.no_log_values)  # the launch's secrets: the wait narrows what is hidden to its own
    waited, warnings, failed = _ready(module, dict({"poll_for": WAIT_FOR_S}, **given), "wait")
    module.no_log_values.update(hidden)
    return dict(waited, failed=failed, warnings=warnings, launched_at=launched)


def run(module: AnsibleModule) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """Only the secrets hidden, the options checked, then the state's function run (with lock, vllm_lock's task; with
    ready, vllm_ready's)."""
    params = module.params
    if params["lock"] is not None:
        return _lock(module, params["lock"])
    if params["ready"] is not None:
        return _ready(module, params["ready"])
    secret_names = _hide_only_secrets(module, params)
    result: t.Dict[str, t.Any] = {"changed": False, "env_keys": sorted(params["env"]), "secret_env_keys": secret_names}
    try:
        mode = resolve_mode(params["mode"])
        result["mode"] = mode
        check_params(params, mode)
    except SpecError as exc:
        return dict(result, msg=str(exc)), [], True
    _deps.require(module, _deps.PSUTIL)
    failed = False
    began = time.time()
    try:
        result.update(STATES[params["state"]](module, _deps.PSUTIL.module, mode, params))
    except ServerError as exc:
        result.update(exc.result, msg=str(exc))
        failed = True
    except (RecordError, ListenerError, SpecError) as exc:
        result["msg"] = str(exc)
        failed = True
    if params["wait"] is not None and params["state"] == "running" and not failed and not module.check_mode:
        result["waited"] = _wait(module, params["wait"], params["wait_environment"], began if result.get("launched") else None)
    result.setdefault("launched", False)
    result.setdefault("stopped", [])
    result.setdefault("log_file", (result.get("record") or {}).get("log_file") or params["log_file"])
    return result, [], failed


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result, warnings, failed = run(module)
    finish(module, result, warnings, failed)


if __name__ == "__main__":
    main()
