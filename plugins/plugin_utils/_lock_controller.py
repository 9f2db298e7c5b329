# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The lock's controller side, for the vllm_lock action plugin: who runs (this controller and its ansible-playbook
process), whether the run that holds a lock certainly ended, and the task workers a killed run left behind.

It runs on the controller only and is never shipped to a host; the lock file itself is module_utils/_server/lock.py.
/proc is read through module_utils/_host/procfs.py.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import hashlib
import os
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host import procfs

MACHINE_ID = "/etc/machine-id"


def _first_line(path: str) -> t.Optional[str]:
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return handle.readline().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def current_user() -> str:
    """The login name of this process, also without USER/LOGNAME in the environment."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        if os.environ.get(name):
            return os.environ[name]
    uid = os.getuid() if hasattr(os, "getuid") else None
    try:
        import pwd  # pylint: disable=import-outside-toplevel  # not on every platform

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError, TypeError):
        return "uid %s" % uid if uid is not None else "unknown"


def argv_sha(pid: int, proc: str = procfs.PROC) -> t.Optional[str]:
    """A short hash of a process's command line (what tells its forked task workers); None when unreadable."""
    data = procfs.cmdline_bytes(pid, proc)
    return hashlib.sha256(data).hexdigest()[:16] if data is not None else None


def leftover_workers(there: t.Mapping[str, t.Any], mine: int, proc: str = procfs.PROC) -> t.List[int]:
    """The task workers of the run ``there`` (a dead ansible-playbook) that still run on this controller.

    A worker is forked from ansible-playbook (so it has its command line), calls setsid() (so it leads its own session),
    and outlives a SIGKILL of ansible-playbook's process group: the task it was running goes on to its end. Known by
    those three and a start after that ansible-playbook's; ``mine`` (this run's ansible-playbook) and its workers are not.
    """
    start = str(there.get("pid_start") or "")
    if not there.get("argv_sha") or not start.startswith("ticks:") or not os.path.isdir(proc):
        return []
    found = []
    for pid in procfs.pids(proc):
        if pid in (mine, there.get("pid")):
            continue
        seen = procfs.stat(pid, proc)
        if seen is None or seen.state in procfs.ENDED or seen.ppid == mine or seen.session != pid:
            continue
        if seen.start_ticks >= int(start[len("ticks:"):]) and argv_sha(pid, proc) == there["argv_sha"]:
            found.append(pid)
    return sorted(found)


def controller_identity(pid: int, host: str, proc: str = procfs.PROC) -> t.Dict[str, t.Any]:
    """What tells this controller and its ansible-playbook process ``pid`` apart from any other."""
    try:
        start = procfs.process_start(pid, proc)
    except ProcessLookupError:
        start = None
    return {
        "host": host,
        "user": current_user(),
        "pid": pid,
        "pid_start": start,
        "argv_sha": argv_sha(pid, proc),
        "boot_id": procfs.boot_id(proc),
        "machine_id": _first_line(MACHINE_ID),
        "pid_namespace": procfs.pid_namespace(proc),
    }


def holder_verdict(holder: t.Mapping[str, t.Any], here: t.Mapping[str, t.Any],
                   probe: t.Callable[[int], t.Optional[str]] = procfs.process_start) -> t.Tuple[bool, str]:
    """(gone, why): whether the run that holds the lock certainly ended, judged on the controller ``here``.

    Only a holder from this very controller (same host name, machine, boot and PID namespace, where both
    sides know them) can be checked: it is gone when its ansible-playbook PID no longer exists, or when
    that PID now has another start time (reused). Anything else is not gone.
    """
    there = holder.get("controller")
    if not isinstance(there, dict) or not there.get("host"):
        return False, "the lock does not name the controller of its run"
    if there["host"] != here.get("host"):
        return False, "it came from controller %s, whose processes cannot be checked from %s" % (there["host"], here.get("host"))
    for key, what in (("machine_id", "machine id"), ("boot_id", "boot"), ("pid_namespace", "PID namespace")):
        if there.get(key) and here.get(key) and there[key] != here[key]:
            return False, ("it came from a controller named %s with another %s (another machine or container, or this one before"
                           " a reboot), whose processes cannot be checked from here" % (there["host"], what))
    pid = there.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False, "the lock does not name the ansible-playbook PID of its run"
    try:
        start = probe(pid)
    except ProcessLookupError:
        return True, "its ansible-playbook PID %d no longer runs on %s" % (pid, there["host"])
    if start is not None and there.get("pid_start") and start != there["pid_start"]:
        return True, "its ansible-playbook PID %d on %s is now another process (started %s, not %s)" % (
            pid, there["host"], start, there["pid_start"])
    return False, "its ansible-playbook PID %d still runs on %s" % (pid, there["host"])
