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
  - V(locked) creates the lock file exclusively, recording O(owner) and O(token). If another run holds it, the task fails at once,
    naming the holder and since when; it does not wait.
  - The same O(token) may lock again (re-entrant), so the role's entry points can each take the lock within one run.
  - The holder is a playbook run, possibly on another controller, so its liveness cannot be checked from the host. A lock
    older than O(stale_after) seconds is taken over with a warning (a run that was killed leaves its lock behind).
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
    description: Identifies the run that holds the lock (random, one per run).
    type: str
    required: true
  owner:
    description: Who holds it, for the message another run sees (user, controller, playbook).
    type: str
    default: unknown
  stale_after:
    description: Seconds after which a lock is taken for abandoned.
    type: float
    default: 7200
"""

EXAMPLES = r"""
- name: Lock the server for this run
  gpuops.fleet.vllm_lock:
    path: /var/lib/gpuops-fleet/vllm/vllm-8000.lock
    token: "{{ run_token }}"
    owner: "alice on ctl-01, restart_vllm.yml"
"""

RETURN = r"""
acquired:
  description: Whether this task created the lock.
  returned: always
  type: bool
released:
  description: Whether this task removed the lock.
  returned: always
  type: bool
holder:
  description: The lock's record (owner, token, since).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._server_lock import LockHeld, acquire, release


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["locked", "unlocked"], "default": "locked"},
            "token": {"type": "str", "required": True, "no_log": False},
            "owner": {"type": "str", "default": "unknown"},
            "stale_after": {"type": "float", "default": 7200},
        },
        supports_check_mode=True,
    )
    params = module.params
    if not params["token"].strip():
        module.fail_json(msg="token: must not be empty")
    if params["stale_after"] <= 0:
        module.fail_json(msg="stale_after: expected a positive number of seconds, got %r" % params["stale_after"])
    try:
        if params["state"] == "locked":
            outcome = acquire(params["path"], params["owner"], params["token"], params["stale_after"])
        else:
            outcome = release(params["path"], params["token"])
    except LockHeld as exc:
        module.fail_json(msg=str(exc), changed=False, acquired=False, released=False)
    except OSError as exc:
        module.fail_json(msg="path: cannot use the lock file %s: %s" % (params["path"], exc), changed=False)
    if outcome.warning:
        module.warn(outcome.warning)
    module.exit_json(changed=False, acquired=outcome.acquired, released=outcome.released, holder=outcome.holder)


if __name__ == "__main__":
    main()
