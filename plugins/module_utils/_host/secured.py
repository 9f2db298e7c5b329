# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Whether a new configuration would open a server that is secured now, or drop one of its secrets.

The running server is the process that listens on the server's port, whoever started it: its command line and its
environment (/proc/PID/environ) say whether it requires an API key (vLLM's ``--api-key``, else ``VLLM_API_KEY``) and
which secret variables it has (_secrets.is_secret_name). The new configuration is known by names only (whether its
command line has ``--api-key``, the names of its environment with a value), so no secret value is ever passed here,
compared or returned: only names.

On a container's published port the process that listens is the runtime's (podman's conmon, docker-proxy), which has
neither the server's command line nor its environment: the caller hands in ``behind``, which names the process that
serves in that container (_reclaim.takeover.served_behind asks the runtime), and that process is read instead.

gpu_reclaim's option ``secured`` (the role's preflight) calls ``judge``; the rest are pure functions, apart from
``read_listener`` (psutil and /proc).

Package rule (_host): see listener.py.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host.listener import ListenerError, listening_pid, read_environ
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import (
    API_KEY_ENV, API_KEY_OPTION, argv_secrets, is_secret_name, masked_argv,
)

# gpu_reclaim's option ``secured`` (its suboptions): the new configuration, by names only
OPTION_SPEC: t.Dict[str, t.Any] = {
    "type": "dict",
    "options": {
        "port": {"type": "int", "required": True},
        "api_key_arg": {"type": "bool", "default": False},
        "env_names": {"type": "list", "elements": "str", "default": []},
        "inherit_env": {"type": "bool", "default": False},
        "secret_env": {"type": "list", "elements": "str", "default": [], "no_log": False},
    },
}


class Listener(t.NamedTuple):
    pid: int
    create_time: t.Optional[float]
    cmdline: t.List[str]
    env: t.Optional[t.Dict[str, str]]  # None: /proc/PID/environ could not be read (another user's process)
    # the runtime's process that holds the port for the container this server runs in: {pid, name}; None when the
    # server listens itself
    port_held_by: t.Optional[t.Dict[str, t.Any]] = None


# (port, name, command line) of the process that listens -> the PID of the process that serves behind it, when it holds
# a container's published port; None when it is no runtime's process. Raises ListenerError when it is one and the
# container's server cannot be found.
Behind = t.Callable[[int, str, t.List[str]], t.Optional[int]]


class Verdict(t.NamedTuple):
    running_key: t.Optional[str]  # how the running server requires a key: API_KEY_OPTION, API_KEY_ENV or None
    new_key: t.Optional[str]  # how the new configuration does
    opens: bool  # the running server requires a key and the new configuration none
    dropped: t.List[str]  # secret variables the running server has (with a value) and the new configuration lacks
    env_known: bool  # the running server's environment was read


def key_source(argv: t.Sequence[t.Any], env: t.Optional[t.Mapping[str, t.Any]]) -> t.Optional[str]:
    """How a server with this command line and environment requires an API key, as vLLM settles it: a value after
    ``--api-key`` (or ``--api-key=K``) wins, else a non-empty ``VLLM_API_KEY``; None when it requires none."""
    if any(secret.option == API_KEY_OPTION[2:] for secret in argv_secrets(argv)):
        return API_KEY_OPTION
    if env and str(env.get(API_KEY_ENV) or ""):
        return API_KEY_ENV
    return None


def new_key_source(api_key_arg: bool, env_names: t.Iterable[str]) -> t.Optional[str]:
    """key_source for a new configuration known by names: whether its argv has a key, the names of its environment
    that have a value."""
    if api_key_arg:
        return API_KEY_OPTION
    return API_KEY_ENV if API_KEY_ENV in set(env_names) else None


def compare(listener: t.Optional[Listener], api_key_arg: bool, env_names: t.Iterable[str],
            extra_secret: t.Iterable[str] = ()) -> Verdict:
    """The running server (None: nothing listens) against the new configuration.

    ``env_names``: every variable the new server will have with a value (the configuration's, and what it inherits).
    ``extra_secret``: more names that are secret (the role's vllm_server_secret_env)."""
    names = set(str(name) for name in env_names)
    new_key = new_key_source(api_key_arg, names)
    if listener is None:
        return Verdict(None, new_key, False, [], True)
    extra = [str(name) for name in extra_secret]
    running_key = key_source(listener.cmdline, listener.env)
    opens = running_key is not None and new_key is None
    dropped = sorted(
        name for name, value in (listener.env or {}).items()
        if value and is_secret_name(name, extra) and name not in names
        # a key the refusal names already
        and not (opens and name == API_KEY_ENV)
    )
    return Verdict(running_key, new_key, opens, dropped, listener.env is not None)


def describe_key(source: t.Optional[str]) -> str:
    if source == API_KEY_OPTION:
        return "%s on its command line" % API_KEY_OPTION
    if source == API_KEY_ENV:
        return "%s in its environment" % API_KEY_ENV
    return "no API key"


def dropped_warning(listener: Listener, name: str) -> str:
    """The warning for one secret variable that the new server would lack (its value is never part of it)."""
    return ("the server that listens now (PID %d) has the secret environment variable %s, which the new configuration "
            "lacks: the new server would run without it (its value is not shown)" % (listener.pid, name))


def _read(psutil: t.Any, pid: int) -> t.Optional[t.Tuple[str, t.List[str], float]]:
    """(name, command line, start time) of a live process; None when it is gone."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            return str(proc.name()), [str(word) for word in proc.cmdline()], proc.create_time()
    except psutil.Error:
        return None


def read_listener(psutil: t.Any, port: int, behind: t.Optional[Behind] = None) -> t.Optional[Listener]:
    """The server that listens on ``port``: its PID, start time, command line and environment; None when none does.

    With ``behind``, a runtime's process that holds a container's published port stands for the process that serves in
    the container, which is read instead. Raises _host.listener.ListenerError when unrelated processes listen on the
    port, or (from ``behind``) when the container's server cannot be found."""
    pid = listening_pid(psutil, port)
    if pid is None:
        return None
    seen = _read(psutil, pid)
    if seen is None:
        return None
    name, cmdline, create_time = seen
    served: t.Optional[int] = behind(port, name, cmdline) if behind is not None else None
    if served is None or served == pid:
        return Listener(pid, create_time, cmdline, read_environ(pid))
    inside = _read(psutil, served)
    if inside is None:
        raise ListenerError("port %d is held by %s (PID %s) for a container whose server (PID %s) ended while it was "
                            "read" % (port, name, pid, served))
    return Listener(served, inside[2], inside[1], read_environ(served), {"pid": pid, "name": name})


def judge(psutil: t.Any, options: t.Mapping[str, t.Any], environ: t.Optional[t.Mapping[str, str]] = None,
          behind: t.Optional[Behind] = None) -> t.Tuple[t.Dict[str, t.Any], t.List[str]]:
    """The result field ``secured`` for the options of OPTION_SPEC, and its warnings (names only, never a value).

    ``environ``: the environment a detached server would inherit (``inherit_env``); this process's by default.
    ``behind``: see read_listener."""
    port = int(options["port"])
    names = set(str(name) for name in options.get("env_names") or ())
    if options.get("inherit_env"):
        names.update(name for name, value in (os.environ if environ is None else environ).items() if value)
    result: t.Dict[str, t.Any] = {"port": port, "listener": None, "running_key": None, "new_key": None, "opens": False,
                                  "dropped_secret_env": [], "error": None}
    warnings: t.List[str] = []
    if not 1 <= port <= 65535:
        result["error"] = "secured.port: expected 1 to 65535, got %r" % (port,)
        return result, warnings
    try:
        listener = read_listener(psutil, port, behind)
    except ListenerError as exc:
        result["error"] = str(exc)
        return result, warnings
    verdict = compare(listener, bool(options.get("api_key_arg")), names, options.get("secret_env") or ())
    result.update(running_key=verdict.running_key, new_key=verdict.new_key, opens=verdict.opens, dropped_secret_env=verdict.dropped)
    if listener is not None:
        result["listener"] = {"pid": listener.pid, "create_time": listener.create_time, "cmdline": masked_argv(listener.cmdline),
                              "env_read": verdict.env_known, "port_held_by": listener.port_held_by}
        if not verdict.env_known:
            warnings.append("the environment of PID %d, which listens on port %d, cannot be read (run as its user or root): "
                            "whether it has VLLM_API_KEY or other secrets is not known" % (listener.pid, port))
        warnings.extend(dropped_warning(listener, name) for name in verdict.dropped)
    return result, warnings
