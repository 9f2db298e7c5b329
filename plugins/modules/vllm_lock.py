#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_lock
short_description: One lock per server on a host, so two runs cannot restart the same server at once
version_added: 0.2.0
description:
  - V(locked) creates the lock file exclusively, recording the run that holds it. If another run holds it, the task fails at once,
    naming the holder (user, controller, ansible-playbook PID, play), since when (UTC time and age), and the two ways out
    (C(-e vllm_server_lock_stale_after=<seconds>) for the role, or C(rm) of the lock file on the host); it does not wait.
  - The same O(token) may lock again (re-entrant), so the role's entry points can each take the lock within one run.
  - 'The holder is a playbook run, whose liveness the host cannot see. So the lock records the run''s controller (host name,
    machine id, boot id, PID namespace) and its C(ansible-playbook) process (PID and start time), and this module''s action
    plugin fills them in and judges them on the controller: when the holder came from this very controller and its
    C(ansible-playbook) PID no longer runs there (or now belongs to a process with another start time), the run was killed or
    interrupted, and the lock is taken over at once, with a warning naming that run. Only that holder''s lock is replaced
    (O(takeover) names its token), under C(flock) on the lock''s directory, so of two runs that both find it abandoned, one
    takes it and the other is refused.'
  - 'A holder from another controller (or from this one before a reboot, or from another container with the same host name)
    cannot be checked from here: its lock is taken over only when older than O(stale_after) seconds, with a warning. A live
    holder is never taken over before then: a concurrent run is refused.'
  - 'Why the controller and not the host judges: the run''s processes live on the controller, and a check from the host (for
    example of the connection''s processes) would not see a run whose controller is still alive but between two tasks.'
  - 'A task that was under way on the host when C(ansible-playbook) died goes on to its end in its task worker (workers lead
    their own sessions, so a SIGKILL of the process group misses them): the takeover waits up to 120 s for the dead run''s
    workers on the controller to end, else refuses, naming their PIDs. Over SSH, a module already running on the host may
    still finish after its worker has gone.'
  - V(unlocked) removes the lock only when O(token) holds it.
  - Taking and dropping the lock is bookkeeping, not a change to the server, so the task never reports a change.
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Runs in check mode too, so a check run also notices a concurrent run; the lock file is still written and removed.
  diff_mode:
    support: none
    description: Nothing to show as a diff.
  action:
    support: full
    description:
      - The action plugin fills in O(controller) and, for a holder from this controller that is gone, sets O(takeover).
      - With O(status), it takes the lock through M(gpuops.fleet.vllm_process)'s O(gpuops.fleet.vllm_process#module:lock)
        (the same options, checks and result), whose payload the role's restart builds for its stop and launch anyway.
options:
  path:
    description: The lock file.
    type: path
    required: true
  state:
    description: V(locked) or V(unlocked).
    type: str
    choices: [locked, unlocked]
    default: locked
  token:
    description:
      - Identifies the run that holds the lock (random, one per run).
      - Required with O(state=unlocked). With O(state=locked) and no token, a random one is made for this run (by the action
        plugin, on the controller) and returned as RV(token), which releases the lock.
    type: str
  released_token:
    description:
      - With O(state=unlocked), the token that another task of the run already released (M(gpuops.fleet.vllm_ready)'s
        RV(gpuops.fleet.vllm_ready#module:released_token)). When it is O(token), there is nothing to release - the host is
        not asked (the action plugin answers on the controller) and RV(released) is V(false).
    type: str
  owner:
    description:
      - Who holds it, in words, for the message another run sees. Default from O(controller) and O(play).
    type: str
  play:
    description: The play of the run, for the message another run sees.
    type: str
  controller:
    description:
      - The controller and its C(ansible-playbook) process that run the play. The action plugin fills in the keys not given,
        from the controller itself (the parent of the task's worker process), so a task does not set this.
    type: dict
    suboptions:
      host:
        description: The controller's host name.
        type: str
      user:
        description: The user running C(ansible-playbook) there (also without C(USER) in its environment).
        type: str
      pid:
        description: The C(ansible-playbook) process's PID.
        type: int
      pid_start:
        description: That process's start time (C(ticks:N) from C(/proc/PID/stat), or C(epoch:T)), to tell a reused PID.
        type: str
      argv_sha:
        description: A hash of that process's command line, which its task workers (forks of it) share.
        type: str
      boot_id:
        description: The controller's boot id.
        type: str
      machine_id:
        description: The controller's C(/etc/machine-id).
        type: str
      pid_namespace:
        description: The PID namespace of C(ansible-playbook) on the controller (a container has its own).
        type: str
  takeover:
    description:
      - The token of a holder known to be gone (set by the action plugin). If, and only if, that token still holds the lock, it
        is replaced by this run's; otherwise this works like a plain V(locked).
    type: str
  stale_after:
    description: Seconds after which a lock is taken for abandoned, whoever holds it.
    type: float
    default: 7200
  status:
    description:
      - With O(state=locked), once the lock is held, also read what runs now under it, as M(gpuops.fleet.vllm_process) with
        O(gpuops.fleet.vllm_process#module:state=status) does (the same options, in every launch mode), and return it as
        RV(status). The lock and the reading that needs it are one task (one module start-up on the host instead of two).
      - When the reading fails (an unreadable record, a listener that may not be taken over, ...), the lock just taken is
        released again and the task fails.
    type: dict
    # listener, generate and decide: word for word as vllm_process's own options (tests/unit/plugins/modules/test_vllm_lock.py)
    suboptions:
      mode:
        description: The launch mode, as M(gpuops.fleet.vllm_process)'s O(gpuops.fleet.vllm_process#module:mode).
        type: str
        choices: [auto, process, systemd, container]
        default: process
      unit:
        description: The server's systemd unit (required in the systemd mode).
        type: str
      state_file:
        description: The server's record (the unit's configuration record in the systemd mode).
        type: path
        required: true
      config_hash:
        description: The configuration hash to compare with the recorded one.
        type: str
      health_url:
        description: The server's C(/health), as M(gpuops.fleet.vllm_process)'s O(gpuops.fleet.vllm_process#module:health_url).
        type: str
      listener:
        description:
          - Also read the process that listens on the server's port, as M(gpuops.fleet.vllm_listener) does, and return it as
            C(status.listener), and as C(status.takeover) when it is not the managed server (the lock, the reading and this one
            in one module start-up).
          - 'When that process may not be taken over, the task fails with C(vllm_server: nothing was stopped:) and the refusal
            (the lock is released).'
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
            description: This collection's own systemd unit of the server (default O(status.unit) in the systemd mode, none in the process mode).
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
      generate:
        description:
          - The generation check asked for when the server runs with O(status.config_hash) and answers
            O(status.health_url), as with M(gpuops.fleet.vllm_process)'s O(gpuops.fleet.vllm_process#module:generate).
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
      decide:
        description:
          - Also decide whether the server must change, and return C(status.reason), as M(gpuops.fleet.vllm_process)'s
            O(gpuops.fleet.vllm_process#module:decide).
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
      container:
        description: The server's container (required in the container mode), as M(gpuops.fleet.vllm_process)'s O(gpuops.fleet.vllm_process#module:container).
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
      adapters:
        description:
          - With O(status.decide), a server that needs no other change (it runs this configuration, answers /health and generates), started
            with C(--enable-lora) and C(VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), also has its LoRA adapters read (C(GET /v1/models), where
            an entry with a C(parent) is an adapter, its C(root) the path) and compared with O(status.adapters.wanted); the reading
            returns C(adapters) (served, wanted, load, unload, change) and, when only they differ, a reason that says so.
          - When only they differ, this task applies the difference (unload, then load, each load proven by a completion with
            the adapter's name), releases the lock and returns RV(adapted); in check mode it only says what it would do. See
            docs/adapters.md.
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
  preflight:
    description:
      - With O(status), once the reading under the lock succeeded, also make the vllm_server role's preflight reading in the
        same module run, M(gpuops.fleet.gpu_reclaim) in check mode with the options the role's reclaim is given (from this
        plan and that reading - the server's GPUs and reclaim settings, the running server as the owner of its workers, the
        stop's own containers, and O(gpuops.fleet.gpu_reclaim#module:secured) from the new configuration's names), and
        return its result as RV(preflight). The lock, the reading and the preflight's reading are one module start-up on
        the host instead of two; the role's preflight then judges this result on the controller.
      - The role's plan (C(vllm_server_plan)); the action plugin keeps only the keys the reading uses (C(state),
        C(gpu_words), C(reclaim), C(port), C(api_key_arg), C(env_names), C(secret_env)), so the plan's secrets never
        reach the host.
      - A reading that fails (a setting gpu_reclaim refuses, a missing library, no driver) does not fail this task;
        C(failed) in RV(preflight) says so.
      - "For a server across hosts (the plan's C(group) of two hosts or more), the action first reads what the role's reading
        registered on every host of the group (C(hostvars)): when every host runs this configuration it locks nothing and
        returns RV(unchanged); when a host of the group is not in the play's batch it fails, naming the host - nothing is
        locked or stopped anywhere. Otherwise every host goes on, whatever its own reading said."
    type: dict
requirements:
  - psutil on the managed host, with O(status).
  - nvidia-ml-py on the managed host, with O(preflight).
  - systemd (C(systemctl)), with O(status.mode=systemd).
  - podman or docker, with O(status.mode=container).
"""

EXAMPLES = r"""
- name: Lock the server for this run
  gpuops.fleet.vllm_lock:
    path: /var/lib/gpuops-fleet/vllm/vllm-8000.lock
    token: "{{ run_token }}"
    play: "{{ ansible_play_name }}"

- name: Release it
  gpuops.fleet.vllm_lock:
    path: /var/lib/gpuops-fleet/vllm/vllm-8000.lock
    token: "{{ run_token }}"
    state: unlocked
"""

RETURN = r"""
unchanged:
  description: With O(preflight) for a server across hosts, true when every host of its group runs this configuration (nothing was locked).
  returned: with O(preflight) for a server across hosts, when it is left alone
  type: bool
token:
  description: The run's token (O(token), or the one made for this run when none was given).
  returned: always
  type: str
acquired:
  description: Whether this task created the lock.
  returned: always
  type: bool
released:
  description: Whether this task removed the lock.
  returned: always
  type: bool
holder:
  description:
    - The lock's record (owner, token, since, since_utc, play, controller, host_pid). On a refusal, the other run's.
  returned: always
  type: dict
took_over:
  description: The record of the run whose lock this task replaced (gone, or older than O(stale_after)), else null.
  returned: when O(state=locked)
  type: dict
status:
  description:
    - With O(status), what runs now, read under the lock, with the keys of M(gpuops.fleet.vllm_process)'s status
      (C(mode), C(running), C(pid), C(create_time), C(config_hash), C(config_matches), C(healthy), C(health), C(crash_loop),
      C(generates), C(generation), C(record)); with O(status.listener), C(listener) as M(gpuops.fleet.vllm_listener)
      returns it and C(takeover); with O(status.decide), C(reason).
  returned: when O(status) is given and the lock was taken
  type: dict
adapted:
  description:
    - With O(status.adapters), true when only the server's LoRA adapters differed and this task changed them (in check mode, would
      change them) through the server's API, without a restart; it released the lock itself (RV(acquired) false). A load that fails
      is undone with the run's other steps and fails the task, naming the adapter and the server's answer.
  returned: when only the adapters differ
  type: bool
adapters:
  description:
    - With RV(adapted), what was done - C(loaded) and C(unloaded) (names), C(proofs) (name to the proving completion's C(tokens)
      and C(elapsed_s)), C(before) and C(after) (the names served), and on a failure C(undo_failed) (what could not be undone).
  returned: when RV(adapted) is true
  type: dict
preflight:
  description:
    - With O(preflight), M(gpuops.fleet.gpu_reclaim)'s check-mode result (its keys, as that module returns them, with
      C(secured) when the plan's state is not V(stopped)), with C(failed) and C(warnings) (a list of strings).
  returned: when O(preflight) and O(status) are given and the reading under the lock succeeded
  type: dict
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import finish
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.preflight import preflight_reading
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.takeover import read_listener
from ansible_collections.gpuops.fleet.plugins.module_utils._server import locking

# the options, checked on the host by _server/locking.py (vllm_process's lock takes the same)
ARGUMENT_SPEC = locking.ARGUMENT_SPEC


def run(module: AnsibleModule) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """The options checked, then the lock taken (with status, what runs read under it) or released."""
    return locking.run(module, module.params, read_listener, preflight_reading)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result, warnings, failed = run(module)
    finish(module, result, warnings, failed)


if __name__ == "__main__":
    main()
