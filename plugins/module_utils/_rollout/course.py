# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_rollout): see decision.py.

"""The course of a rollout, decided on the controller: whether a host can be rolled out at all (it must be able to roll
back, and a rollout changes a configuration, it does not move a server), whether a batch halts the rollout and the
words that say why, what each host runs at the end, and the rollout's outcome.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

Failure = t.Mapping[str, t.Any]


def cannot_roll_out(host: str, server: t.Mapping[str, t.Any], good: t.Optional[t.Mapping[str, t.Any]]) -> str:
    """Why ``host`` cannot be rolled out, '' when it can (``server``: name, port, tensor_parallel_size and state of the new
    configuration, and workers, its workers on this host (a server across hosts runs a share of them on each); ``good``:
    the summary of its last known-good configuration, None when none is kept)."""
    workers = int(server.get("workers") or server.get("tensor_parallel_size") or 0)
    if not good:
        why = ("no last known-good configuration is kept for %s, so a rollback would have nothing to launch; restart it once with"
               " restart_vllm.yml (a launch that passes ready and the check keeps one)" % server.get("name"))
    elif str(good.get("port")) != str(server.get("port")):
        why = ("vllm_server_port=%s but the server listens on %s: a rollout changes a configuration, it does not move a server"
               " (use restart_vllm.yml)" % (server.get("port"), good.get("port")))
    elif len(good.get("gpus") or []) != workers:
        share = "" if workers == int(server.get("tensor_parallel_size") or 0) else " (%d worker(s) on this host)" % workers
        why = ("vllm_server_tensor_parallel_size=%s%s but the server runs on %d GPU(s): a rollout keeps the size (use restart_vllm.yml)"
               % (server.get("tensor_parallel_size"), share, len(good.get("gpus") or [])))
    elif server.get("state") == "stopped":
        why = "vllm_server_state=stopped: a rollout starts servers"
    else:
        return ""
    return "rollout_vllm: nothing was touched: %s: %s" % (host, why)


def batch_label(batch: int, hosts: t.Sequence[str]) -> str:
    return "batch %d%s" % (batch, " (the canary: %s)" % ", ".join(hosts) if batch == 1 else "")


def failures_text(failures: t.Sequence[Failure]) -> str:
    return "; ".join("%s: %s: %s" % (entry.get("host"), entry.get("task"), entry.get("msg")) for entry in failures)


def batch_course(batch: int, hosts: t.Sequence[str], gated: bool, verdict: t.Optional[t.Mapping[str, t.Any]],
                 failures: t.Sequence[Failure], so_far: str) -> t.Tuple[bool, str]:
    """(halt, the rollout's reason so far) after a batch: a gated batch halts on its gate's verdict, another one when a
    host failed; a halt rolls the batch back and says which hosts were not touched."""
    label = batch_label(batch, hosts)
    halt = bool((verdict or {}).get("halt")) if gated else bool(failures)
    why = (verdict or {}).get("reason", "") if gated else failures_text(failures)
    if halt:
        return True, ("%s failed its gate: %s. Rolled back: %s; the hosts of later batches were not touched."
                      % (label, why, ", ".join(hosts)))
    if gated:
        return False, "%s%s%s passed: %s" % (so_far, "; " if so_far else "", label, why)
    return False, so_far


def runs(running: t.Any, running_hash: t.Optional[str], running_is_good: bool, new_hash: str) -> str:
    """What a server runs: V(down), the V(new) configuration, its last known-V(good) one, or an V(other) one."""
    if running is False:
        return "down"
    if running_hash == new_hash:
        return "new"
    return "good" if running_is_good else "other"


def outcome(check_mode: bool, halted: bool, reason: str, new_hosts: t.Sequence[str], all_hosts: t.Sequence[str]) -> t.Dict[str, str]:
    """The rollout's status and the words of its end; a halted rollout that left some hosts new is a MIXED fleet."""
    if check_mode:
        return {"status": "check mode", "reason": "nothing was changed; the plan above says what would be measured, restarted and in what order"}
    if halted:
        mixed = 0 < len(new_hosts) < len(all_hosts)
        tail = " The fleet is MIXED: %s run the new configuration, the others do not." % ", ".join(new_hosts) if mixed else ""
        return {"status": "halted", "reason": reason + tail}
    return {"status": "passed", "reason": "every batch rolled out" + ("; " + reason if reason else "")}
