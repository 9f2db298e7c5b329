# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The places of the server's caches, made ready by its launch (vllm_process's ``caches``): each directory created
when missing, owned by the user the server runs as (a systemd unit's User=); in the container mode each is mounted
into the container at its own path, so that the environment's places are the host's.

Where they are is decided on the controller (plugin_utils/_role/caches.py); this file only makes them.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import pwd
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError

OPTION_SPEC: t.Dict[str, t.Any] = {
    "type": "dict",
    "options": {
        "paths": {"type": "list", "elements": "path", "default": []},
        "mounts": {"type": "list", "elements": "path", "default": []},
        "owner": {"type": "str", "default": ""},
    },
}


class CacheError(SpecError):
    """A cache directory cannot be made; the message names the option and the path."""


def _unique(paths: t.Iterable[str]) -> t.List[str]:
    found: t.List[str] = []
    for path in paths:
        path = os.path.normpath(str(path))
        if path not in found:
            found.append(path)
    return found


def volumes(paths: t.Iterable[str]) -> t.List[str]:
    """A container's ``-v`` values that mount each place at its own path."""
    return ["%s:%s" % (path, path) for path in _unique(paths)]


def prepare(paths: t.Iterable[str], owner: str = "") -> t.List[str]:
    """Create each missing directory of ``paths`` (0755, its missing parents too) and give the ones made to ``owner``
    (a user name or a uid, with its primary group; '' keeps this module's user); return the directories made. Raises
    CacheError naming the path."""
    ids: t.Optional[t.Tuple[int, int]] = None
    if owner:
        try:
            entry = pwd.getpwuid(int(owner)) if owner.isdigit() else pwd.getpwnam(owner)
            ids = (entry.pw_uid, entry.pw_gid)
        except KeyError:
            if not owner.isdigit():
                raise CacheError("caches.owner: no user %r on this host" % owner) from None
            ids = (int(owner), int(owner))
    made: t.List[str] = []
    for path in _unique(paths):
        if not os.path.isabs(path):
            raise CacheError("caches.paths: %r is not an absolute path" % path)
        missing = []
        probe = path
        while not os.path.exists(probe):
            missing.append(probe)
            probe = os.path.dirname(probe)
        try:
            os.makedirs(path, mode=0o755, exist_ok=True)
            for directory in reversed(missing):
                if ids is not None:
                    os.chown(directory, *ids)
                made.append(directory)
        except OSError as exc:
            raise CacheError("caches.paths: cannot make %s: %s" % (path, exc)) from None
        if not os.path.isdir(path):
            raise CacheError("caches.paths: %s is not a directory" % path)
    return made
