# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One lock per server on a host: a file created with O_EXCL, naming its holder.

The holder is a playbook run: the lock records the controller it runs on (host name, machine,
boot, PID namespace) and its ansible-playbook process (PID and start time), besides the user,
the play and since when. The host cannot tell whether that process still runs; the controller
can, when it is the same controller (plugin_utils/_lock_controller.py, used by the action plugin): a
holder whose ansible-playbook process is gone is taken over by naming its token (``takeover``). A lock
older than ``stale_after`` seconds is taken over whoever holds it (the only way out for a holder
from another controller); a younger one makes the second run fail at once, naming the holder.

Every change of the lock file (create, take over, remove) happens while holding flock() on the
lock's directory, so two runs never both take over the same holder.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _http, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
import typing as t

try:
    import fcntl
except ImportError:  # not POSIX: the lock file's O_EXCL is then the only guard
    fcntl = None  # type: ignore[assignment]

# how long a module waits for another module's short hold of the directory guard
GUARD_WAIT_S = 10.0


class LockHeld(Exception):
    """Another run holds the lock; ``holder`` is its record."""

    def __init__(self, message: str, holder: t.Optional[t.Mapping[str, t.Any]] = None) -> None:
        super().__init__(message)
        self.holder = dict(holder or {})


class LockResult(t.NamedTuple):
    acquired: bool
    released: bool
    holder: t.Optional[t.Dict[str, t.Any]]  # the record found (ours or a previous one)
    warning: t.Optional[str]
    took_over: t.Optional[t.Dict[str, t.Any]] = None  # the record this run replaced, if any


# ---------------------------------------------------------------------------------------------
# the lock file


def _read(path: str) -> t.Optional[t.Dict[str, t.Any]]:
    try:
        with open(path, "r", encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"owner": "unreadable lock file", "token": None, "since": os.path.getmtime(path) if os.path.exists(path) else 0}
    return data if isinstance(data, dict) else {"owner": "unreadable lock file", "token": None, "since": 0}


def _create(path: str, record: t.Mapping[str, t.Any]) -> bool:
    """Create the lock file with its whole record at once (written aside, then hard-linked: link() fails if it exists),
    so no reader ever sees it empty; O_EXCL where the file system has no hard links."""
    aside = "%s.%d.%d.new" % (path, os.getpid(), time.monotonic_ns())
    with open(aside, "x", encoding="utf-8") as handle:
        json.dump(dict(record), handle, sort_keys=True)
        handle.write("\n")
    try:
        os.link(aside, path)
        return True
    except FileExistsError:
        return False
    except OSError:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(dict(record), handle, sort_keys=True)
            handle.write("\n")
        return True
    finally:
        os.unlink(aside)


@contextlib.contextmanager
def _guard(path: str, wait_s: float = GUARD_WAIT_S) -> t.Iterator[None]:
    """flock() on the lock's directory for one read-decide-write step; the kernel drops it if we die."""
    directory = os.path.dirname(path) or "."
    if fcntl is None or not os.path.isdir(directory):
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    break  # a file system without flock on directories: O_EXCL alone
                if time.monotonic() > deadline:
                    raise OSError(exc.errno, "another task keeps %s flock()ed for over %g s" % (directory, wait_s)) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)


def utc(stamp: t.Any) -> str:
    if not isinstance(stamp, (int, float)) or stamp <= 0:
        return "an unknown time"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))


def who(holder: t.Mapping[str, t.Any], with_run: bool = True) -> str:
    """The holder in words: user, controller, ansible-playbook PID, play (and run token)."""
    there = holder.get("controller")
    if isinstance(there, dict) and there.get("host"):
        text = "%s on controller %s (ansible-playbook PID %s)" % (there.get("user") or "someone", there["host"], there.get("pid", "?"))
        if holder.get("play"):
            text += " running '%s'" % holder["play"]
    else:
        text = str(holder.get("owner") or "unknown")
    return "%s (run %s)" % (text, holder.get("token") or "?") if with_run else text


def describe(holder: t.Mapping[str, t.Any], now: float) -> str:
    since = holder.get("since")
    age = " for %d s" % (now - since) if isinstance(since, (int, float)) and since > 0 else ""
    return "%s%s" % (who(holder), age)


def _refusal(path: str, holder: t.Mapping[str, t.Any], now: float, stale_after: float) -> str:
    since = holder.get("since")
    if isinstance(since, (int, float)) and since > 0:
        when = "since %s (for %d s)" % (utc(since), now - since)
    else:
        when = "since an unknown time"
    return ("the server is locked by another run: %s holds %s %s. Wait for that run to finish. If it is gone, rerun with"
            " `-e vllm_server_lock_stale_after=<seconds>` (fewer than its age; the module's stale_after, now %g s) to take"
            " it over, or remove the lock on the host: `rm %s`." % (who(holder), path, when, stale_after, path))


def acquire(path: str, owner: str, token: str, stale_after: float, now: t.Optional[float] = None,
            takeover: t.Optional[str] = None, details: t.Optional[t.Mapping[str, t.Any]] = None) -> LockResult:
    """Take the lock for ``token``; re-entrant for the same token. Raises LockHeld naming the holder.

    ``takeover``: the token of a holder known to be gone; its lock (and only its) is replaced.
    ``details``: more of the record (controller, play), shown to the runs that find the lock held.
    """
    now = time.time() if now is None else now
    record = dict(details or {})
    record.update({"owner": owner, "token": token, "since": now, "since_utc": utc(now), "host_pid": os.getpid()})
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with _guard(path):
        if _create(path, record):
            return LockResult(True, False, record, None)
        holder = _read(path)
        if holder is None:  # removed by a writer that does not take the guard
            if _create(path, record):
                return LockResult(True, False, record, None)
            holder = _read(path) or {}
        if holder.get("token") == token:
            return LockResult(False, False, holder, None)
        if takeover and holder.get("token") == takeover:
            os.unlink(path)
            if _create(path, record):
                return LockResult(True, False, record, None, holder)
            holder = _read(path) or {}
        since = holder.get("since")
        age = now - since if isinstance(since, (int, float)) else float("inf")
        if age > stale_after:
            os.unlink(path)
            if _create(path, record):
                warning = "took over a stale lock %s held by %s (older than %g s)" % (path, describe(holder, now), stale_after)
                return LockResult(True, False, record, warning, holder)
            holder = _read(path) or {}
    raise LockHeld(_refusal(path, holder, now, stale_after), holder)


def release(path: str, token: str) -> LockResult:
    """Drop the lock if ``token`` holds it; someone else's lock is left alone (with a warning)."""
    with _guard(path):
        holder = _read(path)
        if holder is None:
            return LockResult(False, False, None, None)
        if holder.get("token") != token:
            return LockResult(False, False, holder, "not releasing %s: it is held by %s, not by this run" % (path, describe(holder, time.time())))
        os.unlink(path)
    return LockResult(False, True, holder, None)
