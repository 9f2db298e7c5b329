# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_reclaim's ``owner`` and ``orphans_only``: is a GPU holder the server's, an orphan, or another job's?

The rule (the module's DOCUMENTATION says the same):

1. The owner's: the holder is the owner (its start time checked when ``owner.create_time`` is given) or descends
   from it; or it is a member of the owner's session, the owner being the leader of that session (the role starts its
   server in a session of its own). A PID stays allocated while a process still names it as its session, so a live
   member of that session cannot have inherited the number from an unrelated process; when the owner is gone, only
   members started after the recorded start time count.
2. Otherwise the holder's launcher chain is climbed as for the launcher rule (launcher-shaped ancestors, up to an
   ordinary, excluded, protected or cluster-daemon process). Its top (the holder itself when its parent is not
   launcher-shaped) hangs from a parent. The holder is an orphan when that parent is PID 1, is gone, matches
   ``subreapers`` (init systems and service managers that adopt orphans), or when the top was adopted: it is in a
   session that is not its parent's and does not lead it. A process keeps the session it was forked in until it
   starts one of its own, so a parent in another session did not start it (unless the parent left that session
   afterwards, which a parent that leads no session cannot have done).
3. A headless rank of a server across hosts (``--headless``, joined to a head by ``--master-addr`` or
   ``--data-parallel-address``) whose head is gone keeps its workers and their GPUs and retries for ever: when the top
   of the chain or the process it hangs from is such a rank, and neither it nor any of its descendants holds a TCP
   connection to its head's address any more (``joined``), the holder is an orphan. While it is connected, or when that
   cannot be read, the rule goes on.
4. Anything else hangs from a live process that is neither the owner nor an adopter (``python3 batch_infer.py``, a
   shell, a wrapper script, a cluster daemon, a live server's launcher or headless rank): someone else's job, never
   ended under ``orphans_only``.

Package rule (_reclaim): what gpu_reclaim decides and does. It imports the flat files of module_utils, _host, _gpu
and its own files: never _bench, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import masked_argv
from ansible_collections.gpuops.fleet.plugins.module_utils._vllm_flags import head_address
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import ReclaimSpec, matches_any
from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import START_TIME_TOLERANCE_S

OWNER = "owner"
ORPHAN = "orphan"
FOREIGN = "foreign"

GetSid = t.Callable[[int], t.Optional[int]]
# whether any of the PIDs holds a TCP connection to the address; None when it cannot be told (_host/peers.connected_to)
Joined = t.Callable[[t.Sequence[int], str], t.Optional[bool]]


def getsid(pid: int) -> t.Optional[int]:
    """The session of ``pid``; None when it is gone or cannot be read."""
    try:
        return os.getsid(pid)
    except OSError:
        return None


class Verdict(t.NamedTuple):
    """Whose a holder is. ``top``: the top of its launcher chain (the holder itself when it has none);
    ``parent``: the process that chain hangs from (None when gone); ``why``: in words."""

    kind: str
    top: int
    parent: t.Optional[int]
    why: str


def label(info: t.Optional[t.Mapping[str, t.Any]], limit: int = 100) -> str:
    """A process as an operator knows it: its command line (or its name), cut at ``limit`` characters."""
    if not info:
        return "?"
    text = " ".join(masked_argv(info.get("cmdline") or [])) or info.get("name") or "?"
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Ownership:
    """Verdicts on one process table (``table.info``: pid -> name, cmdline, create_time, ppid, status)."""

    def __init__(self, table: t.Any, spec: ReclaimSpec, sid_of: GetSid = getsid, joined: t.Optional[Joined] = None) -> None:
        self.table = table
        self.spec = spec
        self.sid_of = sid_of
        self.joined = joined
        self.owner_running = False
        self.owner_leads_session = False
        owner = spec.owner
        if owner is not None:
            info = table.info.get(owner.pid)
            same = bool(info) and (owner.create_time is None or abs((info.get("create_time") or 0.0) - owner.create_time) <= START_TIME_TOLERANCE_S)
            self.owner_running = same and info.get("status") != "zombie"
            # a zombie owner (exited, not yet reaped) still holds its PID, so its session is still its own
            self.owner_leads_session = same and self.sid_of(owner.pid) == owner.pid

    def _owners(self, pid: int, ancestors: t.Sequence[int]) -> t.Optional[str]:
        """Why ``pid`` is the owner's, or None."""
        owner = self.spec.owner
        if owner is None:
            return None
        if self.owner_running and (pid == owner.pid or owner.pid in ancestors):
            return "the owner, PID %d, or one of its descendants" % owner.pid
        if self.sid_of(pid) != owner.pid:
            return None
        if self.owner_leads_session:
            return "a member of the session of the owner, PID %d" % owner.pid
        created = (self.table.info.get(pid) or {}).get("create_time")
        gone = owner.pid not in self.table.info
        if gone and owner.create_time is not None and created is not None and created >= owner.create_time - START_TIME_TOLERANCE_S:
            return "a member of the session of the owner, PID %d, which is gone" % owner.pid
        return None

    def judge(self, pid: int, chain: t.Sequence[int], stop: t.Optional[int]) -> Verdict:
        """The verdict on holder ``pid``; ``chain``: its launcher-shaped ancestors, nearest first (see
        _reclaim/plan.py climb); ``stop``: the process that ended the climb (None when the chain's top has no parent
        in the table)."""
        ancestors = self.table.ancestors(pid)
        top = chain[-1] if chain else pid
        why = self._owners(pid, ancestors)
        if why is not None:
            return Verdict(OWNER, top, stop, why)
        if stop is None or stop in (0, 1):
            return Verdict(ORPHAN, top, stop, "its launcher chain hangs from %s" % ("PID 1 (init)" if stop == 1 else "no live process"))
        info = self.table.info[stop]
        if matches_any(self.spec.subreapers, info["name"], info["cmdline"]):
            return Verdict(ORPHAN, top, stop, "its launcher chain hangs from PID %d (%s), which adopts orphans (subreapers)" % (stop, label(info)))
        top_sid, parent_sid = self.sid_of(top), self.sid_of(stop)
        if None not in (top_sid, parent_sid) and top_sid not in (parent_sid, top) and parent_sid != stop:
            return Verdict(ORPHAN, top, stop, "PID %d was adopted by PID %d (%s): it is in session %d, which is not its parent's" % (
                top, stop, label(info), top_sid))
        for rank in (top, stop):
            lost = self._lost_head(rank)
            if lost:
                return Verdict(ORPHAN, top, stop, lost)
        return Verdict(FOREIGN, top, stop, "belongs to live PID %d (%s), not to this server nor an orphan: someone else's job" % (
            stop, label(info)))

    def _lost_head(self, pid: int) -> t.Optional[str]:
        """Why ``pid`` is a headless rank whose head is gone (rule 3), or None."""
        info = self.table.info.get(pid) or {}
        cmdline = [str(word) for word in info.get("cmdline") or []]
        head = head_address(cmdline)
        if self.joined is None or "--headless" not in cmdline or not head:
            return None
        tree = [pid] + [found[0] for found in self.table.descendants(pid)]
        if self.joined(tree, head) is not False:
            return None
        return ("PID %d (%s) is a headless rank of a server across hosts whose head, %s, is gone (no connection to it): its"
                " workers hold their GPUs for nothing" % (pid, label(info), head))
