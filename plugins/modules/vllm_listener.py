#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_listener
short_description: The process that listens on a vLLM server's port, how it was started, and whether it may be taken over
version_added: 0.2.0
description:
  - Finds the process listening on TCP O(port) through the kernel's socket table (not through a record a run wrote), so a
    server started by hand, in tmux, by C(nohup) or by another tool's unit is found the same way as one this collection
    launched.
  - Says whether it looks like vLLM (O(match)), and how it was started, from its cgroup and its ancestors - in this order
    a container (its cgroup names C(docker-ID.scope), C(/docker/ID), C(libpod-ID), or a Kubernetes pod's container
    C(cri-containerd-ID.scope), C(crio-ID.scope) or C(/kubepods/QOS/podUID/ID)), or the runtime's process that holds a
    container's published port (podman's C(conmon), C(docker-proxy)); a
    systemd service (its cgroup is C(NAME.service); O(unit) is this role's own); nohup'd (its parent is gone, or PID 1 or
    an init system adopted it); by hand in tmux or screen (one of its ancestors is their server); by hand in a shell; or
    by another live process.
  - RV(listener.takeover) is true when a vLLM server may be stopped and replaced by the role (its parent shell, tmux or
    screen is never touched; a docker or podman container is stopped through its runtime); RV(listener.refusal) says why
    not otherwise (a process that is not vLLM, another tool's unit unless O(stop_units), a Kubernetes pod's container, a
    container whose runtime does not answer), naming it and the way out.
  - Reads only; changes nothing. The command line is shown with secrets masked.
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: The same reading as a normal run.
  diff_mode:
    support: none
    description: Nothing to show as a diff.
options:
  port:
    description: The TCP port the server listens on (any address).
    type: int
    required: true
  match:
    description:
      - Regular expressions (Python C(re.search)) of a vLLM server, tried on the process name and on its command line
        (words joined by spaces).
    type: list
    elements: str
    default: ['^VLLM::', 'vllm\.entrypoints\.', '(^|/)vllm\s+serve(\s|$)']
  unit:
    description: The systemd unit of this collection's own server, whose listener is not taken over but managed as usual.
    type: str
  stop_units:
    description: Another tool's systemd unit that runs the listener is no reason to refuse (the role stops and disables it).
    type: bool
    default: false
seealso:
  - module: gpuops.fleet.vllm_process
  - module: gpuops.fleet.gpu_reclaim
requirements:
  - psutil on the managed host.
notes:
  - A socket of a process the remote user may not read is not seen; run as the server's user or as root (become).
"""

EXAMPLES = r"""
- name: Read what listens on the server's port
  gpuops.fleet.vllm_listener:
    port: 8000
  register: listener

- name: Say whose it is
  ansible.builtin.debug:
    msg: "{{ listener.msg }}"
"""

RETURN = r"""
listener:
  description: The listening process, null when nothing listens on O(port).
  returned: always
  type: dict
  contains:
    pid:
      description: Its PID.
      type: int
    create_time:
      description: Its start time (seconds since the epoch, as psutil reads it).
      type: float
    name:
      description: Its process name.
      type: str
    cmdline:
      description: Its command line, secrets masked.
      type: list
      elements: str
    command:
      description: The same, as one line.
      type: str
    vllm:
      description: Whether it matches O(match).
      type: bool
    tree:
      description: The PIDs of its descendants (API server's engine core and workers).
      type: list
      elements: int
    how:
      description: How it was started.
      type: str
      choices: [tmux, screen, shell, nohup, process, systemd, container, own_unit]
    started:
      description: The same in words, naming the tmux or screen server, the shell, the unit or the container.
      type: str
    unit:
      description: The systemd service of its cgroup (C(systemd), C(own_unit)), else null.
      type: str
    container:
      description:
        - The container the server runs in (C(how=container)), else null. It is found by the listener's cgroup (the host's
          network), or, for a published port (C(-p)), by the runtime's process that holds it (podman's conmon names its
          container; docker is asked which container publishes the port). Then RV(listener.pid) and the keys beside it are
          the container's server (its main process, or the first process of its tree that matches O(match)).
      type: dict
      contains:
        runtime:
          description: C(docker), C(podman) or C(kubernetes).
          type: str
        id:
          description: Its full id.
          type: str
        name:
          description: Its name, as its runtime's C(inspect) says; null when the runtime did not answer.
          type: str
        image:
          description: Its image, the same way.
          type: str
        restart_policy:
          description: Its restart policy, the same way.
          type: str
        starts_again:
          description: When its runtime would start it again by itself once stopped (a daemon restart, a reboot), in words; else null.
          type: str
        error:
          description: Why its runtime could not be asked about it (then it is refused); else null.
          type: str
        port_held_by:
          description: The runtime's process that holds its published port (C(pid), C(name)); null when the server itself listens.
          type: dict
        pod_uid:
          description: With C(runtime=kubernetes), its pod's UID.
          type: str
    by:
      description: The PID of the shell, tmux or screen server or process that started it; null when its parent is gone.
      type: int
    takeover:
      description: Whether the role may stop and replace it (a vLLM server nothing would start again).
      type: bool
    refusal:
      description: Why it may not be stopped, naming it and the way out; null when it may.
      type: str
msg:
  description: What listens, in words.
  returned: always
  type: str
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError, between, failure, finish
from ansible_collections.gpuops.fleet.plugins.module_utils._host.listener import ListenerError
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.takeover import DEFAULT_MATCH, read_listener

ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "port": {"type": "int", "required": True},
    "match": {"type": "list", "elements": "str", "default": DEFAULT_MATCH},
    "unit": {"type": "str"},
    "stop_units": {"type": "bool", "default": False},
}


def run(module: AnsibleModule) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """The port checked, then the listener read (``match`` is checked as it compiles)."""
    params = module.params
    try:
        between("port", params["port"], 1, 65535, "")
    except SpecError as exc:
        return failure(str(exc))
    _deps.require(module, _deps.PSUTIL)
    try:
        info = read_listener(_deps.PSUTIL.module, params["port"], params["match"], params["unit"], params["stop_units"])
    except SpecError as exc:
        return failure(str(exc))
    except ListenerError as exc:
        return failure(str(exc), listener=None)
    if info is None:
        return {"changed": False, "listener": None, "msg": "nothing listens on port %d" % params["port"]}, [], False
    return {"changed": False, "listener": info, "msg": "port %d: PID %d (%s), started %s" % (
        params["port"], info["pid"], info["command"][:200], info["started"])}, [], False


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result, warnings, failed = run(module)
    finish(module, result, warnings, failed)


if __name__ == "__main__":
    main()
