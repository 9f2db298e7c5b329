# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Where the new server keeps its caches (the model download directory, vLLM's compiled graphs, Triton's and
FlashInfer's kernels), on the controller: decided once the host was read under the lock, before anything stops.

For each variable (module_utils/_host/caches.py names them and reads the host), the first that says:

1. the inventory: the variable set in vllm_server_env, vllm_server_host_env or vllm_server_env_overrides (and, for
   the weights, a ``--download-dir`` in vllm_server_args): the server's environment has it already, nothing is added;
2. the server the launch replaces (the one taken over on the port, else the role's own that runs): the same place,
   given to the new server explicitly, so that it finds the weights and compiled graphs where they are. HF_HUB_CACHE is
   kept only when that server had it (or a ``--download-dir``) and the inventory sets no HF_HOME;
3. the role's place: a directory per variable under vllm_server_cache_dir (default /var/cache/gpuops-fleet/NAME), on
   persistent storage, created by the launch and owned by the user the server runs as; it outlives the role's stop, a
   rollback and a takeover.

The role's places are not part of the configuration hash: where the caches live is not a reason to restart.

The run is refused, before anything stops, when the new server's user could not use the model's place (HF_HOME,
HF_HUB_CACHE) kept from the server it replaces (another user's home), or when that server's environment could not be
read (then where its weights are is not known); the refusal names both places and the variables that decide. A compiled
cache (vLLM's, Triton's, FlashInfer's) the new user could not use is made again in the role's place instead.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host.caches import CACHES
from ansible_collections.gpuops.fleet.plugins.module_utils._vllm_flags import download_dir
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.values import text, words

VARIABLE = "vllm_server_cache_dir"
BASE = "/var/cache/gpuops-fleet"
# the role's place of each variable, under the server's cache directory (HF_HUB_CACHE is HF_HOME's hub)
SUBDIRS = {"HF_HOME": "huggingface", "VLLM_CACHE_ROOT": "vllm", "TRITON_CACHE_DIR": "triton", "FLASHINFER_WORKSPACE_BASE": "flashinfer"}
WHAT = {"HF_HOME": "the model download directory", "HF_HUB_CACHE": "the model weights (the hub cache)",
        "VLLM_CACHE_ROOT": "vLLM's compiled graphs", "TRITON_CACHE_DIR": "Triton's kernels",
        "FLASHINFER_WORKSPACE_BASE": "FlashInfer's kernels"}
# the places of the model: refused rather than moved (a download of hundreds of GB); a compiled cache is made again
MODEL = ("HF_HOME", "HF_HUB_CACHE")
ENV_VARIABLES = "vllm_server_env (or vllm_server_host_env, vllm_server_env_overrides)"
INVENTORY = "the inventory"
ROLE = "in %s" % VARIABLE


def planned(variables: t.Mapping[str, t.Any], env: t.Mapping[str, t.Any], argv: t.Sequence[str]) -> t.Dict[str, t.Any]:
    """The plan's ``caches``: the role's cache directory (``dir``) and place of each variable (``default``), the
    variables the inventory sets (``explicit``: name -> value; HF_HUB_CACHE ``--download-dir D`` for a download
    directory on the command line), ``user`` (vllm_server_systemd_user: whom the systemd mode runs the server as) and
    ``container_user`` (the --user of vllm_server_container_run_options)."""
    root = text(variables.get(VARIABLE)).rstrip("/") or "%s/%s" % (BASE, text(variables.get("vllm_server_name")))
    explicit = {name: text(env.get(name)) for name in CACHES if text(env.get(name))}
    downloads = download_dir(argv)
    if downloads:
        explicit["HF_HUB_CACHE"] = "--download-dir %s" % downloads
    return {"dir": root, "default": {name: "%s/%s" % (root, sub) for name, sub in SUBDIRS.items()}, "explicit": explicit,
            "user": text(variables.get("vllm_server_systemd_user")),
            "container_user": container_user(words(variables.get("vllm_server_container_run_options")))}


def container_user(options: t.Sequence[str]) -> str:
    """The ``--user`` (``-u``) of the container's run options, '' when none (the image's user: root, as a rule)."""
    found = ""
    for index, word in enumerate(options):
        if word in ("--user", "-u") and index + 1 < len(options):
            found = options[index + 1]
        elif word.startswith("--user="):
            found = word[len("--user="):]
    return found


def _old_words(old: t.Mapping[str, t.Any], taken: bool) -> str:
    return "the server %s, PID %s (user %s)" % ("taken over" if taken else "that runs now", old.get("pid"), old.get("user"))


def _keeps(name: str, old: t.Mapping[str, t.Any], explicit: t.Mapping[str, str]) -> bool:
    """Whether the new server keeps the old one's place for ``name``."""
    if name in explicit:
        return False
    if name == "HF_HUB_CACHE":
        # kept only when the old server placed its weights apart from its HF_HOME, and the inventory moves no HF_HOME
        return bool((old.get("env") or {}).get("HF_HUB_CACHE") or (old.get("env") or {}).get("HUGGINGFACE_HUB_CACHE")
                    or old.get("download_dir")) and "HF_HOME" not in explicit
    return True


def _unknown(old: t.Mapping[str, t.Any], taken: bool, caches: t.Mapping[str, t.Any], port: t.Any) -> str:
    return ("vllm_server: nothing was stopped: the environment of %s, which listens on port %s, cannot be read by this user,"
            " so where it keeps its model weights (HF_HOME, HF_HUB_CACHE) and compiled graphs (VLLM_CACHE_ROOT) is not"
            " known, and the new server would use %s: run with become (-b) so that it can be read, or set HF_HOME in %s to"
            " where the new server keeps its models" % (_old_words(old, taken), port, caches["default"]["HF_HOME"], ENV_VARIABLES))


def _runs_as(status: t.Mapping[str, t.Any], caches: t.Mapping[str, t.Any]) -> str:
    """The variable that decides whom the new server runs as, in words."""
    if status.get("mode") == "systemd":
        return "vllm_server_systemd_user=%s" % (caches.get("user") or "''")
    if status.get("mode") == "container":
        return "--user in vllm_server_container_run_options%s" % (" (%s)" % caches["container_user"] if caches.get("container_user") else ": none, root")
    return "the user the role's modules run as: ansible_user, or ansible_become_user with become"


def _unusable(old: t.Mapping[str, t.Any], taken: bool, new: t.Mapping[str, t.Any], names: t.Sequence[str],
              caches: t.Mapping[str, t.Any], status: t.Mapping[str, t.Any]) -> str:
    places = "; ".join("%s=%s (%s)" % (name, old["locations"][name], WHAT[name]) for name in names)
    defaults = ", ".join("%s=%s" % (name, caches["default"].get(name, caches["default"]["HF_HOME"] + "/hub")) for name in names)
    return ("vllm_server: nothing was stopped: %s keeps its model where the new server's user %s (%s) cannot use it: %s."
            " The new server would look for the weights in %s and download them again. Set %s in %s to the place the new"
            " server should use, run the new server as %s, or give %s access to %s"
            % (_old_words(old, taken), new.get("user"), _runs_as(status, caches), places, defaults, " and ".join(names),
               ENV_VARIABLES, old.get("user"), new.get("user"), " and ".join(old["locations"][name] for name in names)))


def _owner(new: t.Mapping[str, t.Any], mode: str) -> str:
    """Whom the role's places are given to: the server's user, by uid (the module's own user makes them otherwise)."""
    if mode == "process" or new.get("uid") in (None, 0):
        return ""
    return str(new["uid"])


def choose(plan: t.Mapping[str, t.Any], reading: t.Optional[t.Mapping[str, t.Any]]) -> t.Dict[str, t.Any]:
    """Where the new server keeps each cache: ``env`` (what the launch adds to the server's environment: the places the
    inventory does not set), ``places`` (each variable -> {path, from}), ``paths`` (the role's places of ``env``, which
    the launch makes when missing and, in the container mode, mounts), ``mounts`` (the places kept from the server it
    replaces: mounted in the container mode, never made nor given to another user), ``owner`` (the uid the directories
    it makes belong to; '' for the module's user), ``shown`` (one line) and ``refusal`` ('' when the run may go on).
    ``reading``: the host's (_reclaim.preflight.cache_reading; None when it was not read)."""
    caches = plan["caches"]
    explicit = dict(caches.get("explicit") or {})
    reading = reading or {}
    status = {"mode": reading.get("mode") or plan.get("mode")}
    old = reading.get("old") if not reading.get("in_container") else None
    new = reading.get("new") or {}
    taken = bool(reading.get("taken"))
    # a container of the role's own: only the places its environment was given (host paths, mounted where they are)
    own_box = status["mode"] == "container" and not taken
    refusal = ""
    env: t.Dict[str, str] = {}
    places: t.Dict[str, t.Dict[str, str]] = {}
    for name, value in explicit.items():
        places[name] = {"path": value, "from": INVENTORY}
    if old and not old.get("read") and not set(MODEL) & set(explicit):
        refusal = _unknown(old, taken, caches, plan.get("port"))
    unusable = []
    for name in CACHES:
        if name in places:
            continue
        keep = bool(old and old.get("read") and _keeps(name, old, explicit))
        if keep and status["mode"] == "container" and (name not in MODEL or (own_box and name not in (old.get("env") or {}))):
            # a container mounts each place: only the model's is worth mounting from another server's (never its HOME)
            keep = False
        usable = keep and (old.get("usable") or {}).get(name, True)
        if keep and not usable and name in MODEL:
            unusable.append(name)
        if keep and (usable or name in MODEL):
            path = old["locations"][name]
            env[name] = path
            places[name] = {"path": path, "from": "kept from " + _old_words(old, taken)}
        elif name in caches["default"]:
            # a compiled cache the new user could not use is made again in the role's place (minutes, not a download)
            env[name] = caches["default"][name]
            places[name] = {"path": env[name], "from": ROLE if not keep else "%s (user %s may not use %s, where %s keeps it)" % (
                ROLE, new.get("user"), old["locations"][name], _old_words(old, taken))}
    if unusable and not refusal:
        refusal = _unusable(old, taken, new, unusable, caches, status)
    blocked = [path for path in env.values() if path in (reading.get("creatable") or {})]
    if blocked and not refusal:
        refusal = ("vllm_server: nothing was stopped: %s=%s: the role's places for the server's caches cannot be made by"
                   " the user the role's modules run as (%s): set %s to a directory it may create, or run with become (-b)"
                   % (VARIABLE, caches["dir"], ", ".join(blocked), VARIABLE))
    paths: t.List[str] = []
    mounts: t.List[str] = []
    for name, path in env.items():
        # the role's places are made (owned by the server's user); another server's are only mounted (container mode)
        listed = paths if places[name]["from"].startswith(ROLE) else mounts
        if path not in listed:
            listed.append(path)
    # one line: each source with the places it gives, in the order of CACHES
    sources: t.Dict[str, t.List[str]] = {}
    for name in CACHES:
        if name in places:
            sources.setdefault(places[name]["from"], []).append("%s=%s" % (name, places[name]["path"]))
    shown = "; ".join("%s: %s" % (source, ", ".join(said)) for source, said in sources.items())
    return {"env": env, "places": places, "paths": paths, "mounts": mounts, "owner": _owner(new, status["mode"]),
            "shown": shown, "refusal": refusal}
