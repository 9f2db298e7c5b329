# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One lock per server on a host: a file created with O_EXCL, naming its holder.

The holder is a playbook run (on a controller, possibly another machine), not a process of
this host, so liveness cannot be checked here: a lock older than ``stale_after`` seconds is
taken over with a warning; a younger one makes the second run fail at once, naming the holder.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import os
import time
import typing as t


class LockHeld(Exception):
    """Another run holds the lock."""


class LockResult(t.NamedTuple):
    acquired: bool
    released: bool
    holder: t.Optional[t.Dict[str, t.Any]]  # the record found (ours or a previous one)
    warning: t.Optional[str]


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
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(dict(record), handle, sort_keys=True)
        handle.write("\n")
    return True


def describe(holder: t.Mapping[str, t.Any], now: float) -> str:
    since = holder.get("since")
    age = " for %d s" % (now - since) if isinstance(since, (int, float)) and since > 0 else ""
    return "%s (run %s)%s" % (holder.get("owner") or "unknown", holder.get("token") or "?", age)


def acquire(path: str, owner: str, token: str, stale_after: float, now: t.Optional[float] = None) -> LockResult:
    """Take the lock for ``token``; re-entrant for the same token. Raises LockHeld naming the holder."""
    now = time.time() if now is None else now
    record = {"owner": owner, "token": token, "since": now, "host_pid": os.getpid()}
    if _create(path, record):
        return LockResult(True, False, record, None)
    holder = _read(path)
    if holder is None:  # released between our two looks
        if _create(path, record):
            return LockResult(True, False, record, None)
        holder = _read(path) or {}
    if holder.get("token") == token:
        return LockResult(False, False, holder, None)
    since = holder.get("since")
    age = now - since if isinstance(since, (int, float)) else float("inf")
    if age > stale_after:
        os.unlink(path)
        if _create(path, record):
            warning = "took over a stale lock %s held by %s (older than %g s)" % (path, describe(holder, now), stale_after)
            return LockResult(True, False, record, warning)
        holder = _read(path) or {}
    raise LockHeld("the server is locked by another run: %s holds %s. Wait for that run to finish; if it died, remove the file"
                   " or let it go stale (older than %g s)." % (describe(holder, now), path, stale_after))


def release(path: str, token: str) -> LockResult:
    """Drop the lock if ``token`` holds it; someone else's lock is left alone (with a warning)."""
    holder = _read(path)
    if holder is None:
        return LockResult(False, False, None, None)
    if holder.get("token") != token:
        return LockResult(False, False, holder, "not releasing %s: it is held by %s, not by this run" % (path, describe(holder, time.time())))
    os.unlink(path)
    return LockResult(False, True, holder, None)
