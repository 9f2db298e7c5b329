# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Where a running vLLM server keeps its caches, read from /proc, and whether another user could use those places.

A server's caches are where its environment (or, unset, each tool's default under its HOME) puts them:

- ``HF_HOME``: the Hugging Face home, the model download directory (``$XDG_CACHE_HOME/huggingface``, else
  ``~/.cache/huggingface``); ``HF_HUB_CACHE``: its hub (the weights, ``$HF_HOME/hub``); a ``--download-dir D`` on
  vLLM's command line puts the weights in D instead, as a hub cache;
- ``VLLM_CACHE_ROOT``: vLLM's compiled graphs (``$XDG_CACHE_HOME/vllm``, else ``~/.cache/vllm``);
- ``TRITON_CACHE_DIR``: Triton's kernels (``$TRITON_HOME/.triton/cache``, TRITON_HOME defaulting to HOME);
- ``FLASHINFER_WORKSPACE_BASE``: FlashInfer's JIT cache lives in ``.cache/flashinfer`` under it (default HOME).

The role's takeover keeps these places (plugin_utils/_role/caches.py decides); this file only reads the host.

Package rule (_host): this package reads the local host (the process table, PID trust, device files). It imports
only the flat files of module_utils (_deps, _argspec, _secrets) and its own files: never _gpu, _reclaim, _bench,
_server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host.listener import read_environ
from ansible_collections.gpuops.fleet.plugins.module_utils._host.procfs import PROC, cmdline_bytes, split_cmdline
from ansible_collections.gpuops.fleet.plugins.module_utils._vllm_flags import download_dir

# the variables that place a server's caches, in the order they are shown
CACHES = ("HF_HOME", "HF_HUB_CACHE", "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE")
# what else of the environment places them
BASES = ("HOME", "XDG_CACHE_HOME", "TRITON_HOME", "HUGGINGFACE_HUB_CACHE")


def _expand(path: str, home: str) -> str:
    if path == "~" or path.startswith("~/"):
        return home + path[1:]
    return path


def locations(env: t.Mapping[str, str], home: str, downloads: t.Optional[str] = None) -> t.Dict[str, str]:
    """Where a server with this environment, HOME and ``--download-dir`` keeps each cache (CACHES), as each tool
    settles it when the variable is unset."""
    def given(name: str) -> str:
        return _expand(str(env.get(name) or ""), home)
    cache = given("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    hf_home = given("HF_HOME") or os.path.join(cache, "huggingface")
    hub = downloads or given("HF_HUB_CACHE") or given("HUGGINGFACE_HUB_CACHE") or os.path.join(hf_home, "hub")
    return {
        "HF_HOME": hf_home,
        "HF_HUB_CACHE": _expand(hub, home),
        "VLLM_CACHE_ROOT": given("VLLM_CACHE_ROOT") or os.path.join(cache, "vllm"),
        "TRITON_CACHE_DIR": given("TRITON_CACHE_DIR") or os.path.join(given("TRITON_HOME") or home, ".triton", "cache"),
        "FLASHINFER_WORKSPACE_BASE": given("FLASHINFER_WORKSPACE_BASE") or home,
    }


def _uid(pid: int, proc_root: str) -> t.Optional[int]:
    try:
        with open("%s/%d/status" % (proc_root, pid), "r", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def user_name(uid: t.Optional[int]) -> str:
    if uid is None:
        return "?"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "uid %d" % uid


def read_server(pid: int, proc_root: str = PROC) -> t.Dict[str, t.Any]:
    """The caches of the server ``pid``: ``pid``, ``uid``, ``user``, ``home``, ``env`` (the variables of CACHES and
    BASES it has with a value), ``download_dir`` (its command line's), ``read`` (whether its environment could be read:
    another user's process needs root) and ``locations`` (locations(); empty when ``read`` is false)."""
    uid = _uid(pid, proc_root)
    env = read_environ(pid, proc_root)
    raw = cmdline_bytes(pid, proc_root)
    argv = split_cmdline(raw.decode("utf-8", "replace")) if raw else []
    downloads = download_dir(argv)
    found: t.Dict[str, t.Any] = {"pid": pid, "uid": uid, "user": user_name(uid), "download_dir": downloads, "read": env is not None}
    if env is None:
        return dict(found, home=None, env={}, locations={})
    home = env.get("HOME") or ""
    if not home and uid is not None:
        try:
            home = pwd.getpwuid(uid).pw_dir
        except KeyError:
            home = "/"
    home = home or "/"
    found.update(home=home, env={name: env[name] for name in CACHES + BASES if env.get(name)},
                 locations=locations(env, home, downloads))
    return found


def _user(name: str) -> t.Dict[str, t.Any]:
    """{user, uid, gids} of a user name, a numeric uid, or ``uid:gid`` (a container's --user); uid None when unknown."""
    who, _sep, group = name.partition(":")
    try:
        entry = pwd.getpwnam(who) if not who.isdigit() else pwd.getpwuid(int(who))
    except KeyError:
        if who.isdigit():
            return {"user": "uid %s" % who, "uid": int(who), "gids": [int(group)] if group.isdigit() else []}
        return {"user": who, "uid": None, "gids": []}
    gids = set(os.getgrouplist(entry.pw_name, entry.pw_gid))
    if group.isdigit():
        gids = {int(group)}
    elif group:
        try:
            gids = {grp.getgrnam(group).gr_gid}
        except KeyError:
            gids = set()
    return {"user": entry.pw_name, "uid": entry.pw_uid, "gids": sorted(gids)}


def run_as(mode: str, user: str = "", container_user: str = "") -> t.Dict[str, t.Any]:
    """The user the new server runs as: the systemd unit's User= (``user``, root when empty), the container's --user
    (``container_user``, root when empty; the places are the host's, mounted), and this module's user in the process
    mode. ``{user, uid, gids}`` (uid None for a user this host does not know)."""
    if mode == "process":
        return _user(str(os.geteuid()))
    if mode == "container":
        return _user(container_user or "root")
    return _user(user or "root")


def _allowed(info: os.stat_result, uid: int, gids: t.Collection[int], want: int) -> bool:
    """Whether ``uid`` (in groups ``gids``) has every permission of ``want`` (a mask of the owner's bits) on a file."""
    if info.st_uid == uid:
        bits = info.st_mode >> 6
    elif info.st_gid in gids:
        bits = info.st_mode >> 3
    else:
        bits = info.st_mode
    return (bits & want) == want


def usable(path: str, uid: t.Optional[int], gids: t.Collection[int]) -> bool:
    """Whether the user ``uid`` may keep a cache at ``path``: write in it (or create it in the nearest directory that
    exists) and reach it (search permission on every directory above). Root may everywhere; an unknown user nowhere."""
    if uid is None:
        return False
    if uid == 0:
        return True
    probe = os.path.abspath(path)
    while True:
        try:
            info = os.stat(probe)
            break
        except FileNotFoundError:
            parent = os.path.dirname(probe)
            if parent == probe:
                return False
            probe = parent
        except OSError:
            return False
    if not stat.S_ISDIR(info.st_mode) or not _allowed(info, uid, gids, 0o7):
        return False
    above = os.path.dirname(probe)
    while True:
        try:
            if not _allowed(os.stat(above), uid, gids, 0o1):
                return False
        except OSError:
            return False
        if os.path.dirname(above) == above:
            return True
        above = os.path.dirname(above)


def reading(pid: t.Optional[int], mode: str, user: str, places: t.Iterable[str] = (), container_user: str = "",
            proc_root: str = PROC) -> t.Dict[str, t.Any]:
    """What the role's cache decision needs: ``new`` (run_as) and ``old`` (read_server of the server the launch
    replaces, None when there is none), with ``usable``: for each of its locations, whether the new user may use it;
    and ``creatable``: the role's ``places`` that this module's user (who makes them) may not make, each -> False."""
    new = run_as(mode, user, container_user)
    me = run_as("process")
    found: t.Dict[str, t.Any] = {"new": new, "old": None,
                                 "creatable": {str(path): False for path in places if not usable(str(path), me["uid"], me["gids"])}}
    if pid is None:
        return found
    old = read_server(pid, proc_root)
    old["usable"] = {name: usable(path, new["uid"], new["gids"]) for name, path in old["locations"].items()}
    found["old"] = old
    return found
