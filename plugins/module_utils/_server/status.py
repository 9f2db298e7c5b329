# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One reading of what runs, in every launch mode: the managed server (by its backend), the process on its port and
whether it is taken over, and what must change. Shared by vllm_process (state=status) and vllm_lock's status.

The listener is read by a function the module hands in (``read_listener``: _reclaim.takeover.read_listener), so that
this package keeps to its import rule.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError, between, http_url
from ansible_collections.gpuops.fleet.plugins.module_utils._server import adapters
from ansible_collections.gpuops.fleet.plugins.module_utils._server.decision import STATES, reason
from ansible_collections.gpuops.fleet.plugins.module_utils._server.generation import GENERATE_OPTIONS, GENERATE_TIMEOUT_MAX_S
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.mode import MODES, RUNTIMES, backend, resolve_mode
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.process import ServerError, Target

# the listener's `how` of the role's own unit (_host.listener.OWN_UNIT)
OWN_UNIT = "own_unit"

ReadListener = t.Callable[..., t.Optional[t.Dict[str, t.Any]]]


def listener_options(default_match: t.Sequence[str]) -> t.Dict[str, t.Dict[str, t.Any]]:
    """The suboptions of ``listener`` (``default_match``: what a vLLM server looks like, _reclaim.takeover.DEFAULT_MATCH)."""
    return {
        "port": {"type": "int", "required": True},
        "match": {"type": "list", "elements": "str", "default": list(default_match)},
        "unit": {"type": "str"},
        "stop_units": {"type": "bool", "default": False},
        # this host's node of a server across hosts: its group's name and size, and on a headless node its head's address
        # (the server to take over is then the headless rank joined to that head; see _reclaim.takeover.describe)
        "across": {"type": "dict", "options": {
            "group": {"type": "str", "required": True},
            "size": {"type": "int", "required": True},
            "head": {"type": "str"},
            "port": {"type": "int"},
        }},
    }


# the container mode's reading: which container, of which runtime (none: the record's, else podman, then docker)
CONTAINER_READ_OPTIONS: t.Dict[str, t.Dict[str, t.Any]] = {
    "name": {"type": "str", "required": True},
    "runtime": {"type": "str", "choices": list(RUNTIMES)},
}

DECIDE_OPTIONS: t.Dict[str, t.Dict[str, t.Any]] = {
    "state": {"type": "str", "choices": list(STATES), "default": "started"},
    "force": {"type": "bool", "default": False},
}


def status_options(default_match: t.Sequence[str]) -> t.Dict[str, t.Dict[str, t.Any]]:
    """The suboptions of vllm_lock's ``status``: the same names as vllm_process's own options for state=status."""
    return {
        "mode": {"type": "str", "choices": list(MODES), "default": "process"},
        "unit": {"type": "str"},
        "state_file": {"type": "path", "required": True},
        "config_hash": {"type": "str"},
        "health_url": {"type": "str"},
        "generate": {"type": "dict", "options": GENERATE_OPTIONS},
        "listener": {"type": "dict", "options": listener_options(default_match)},
        "decide": {"type": "dict", "options": DECIDE_OPTIONS},
        "container": {"type": "dict", "options": CONTAINER_READ_OPTIONS},
        "adapters": {"type": "dict", "options": adapters.ADAPTER_OPTIONS},
    }


def check_options(options: t.Mapping[str, t.Any], prefix: str = "") -> None:
    """Raises SpecError naming the option (after ``prefix``, such as 'status.') and the value when one cannot be used."""
    generate = options.get("generate")
    if generate:
        http_url(prefix + "generate.url", generate["url"])
        between(prefix + "generate.timeout", generate["timeout"], 0, GENERATE_TIMEOUT_MAX_S, "seconds")
    wanted = options.get("adapters")
    if wanted:
        http_url(prefix + "adapters.url", wanted["url"])
        between(prefix + "adapters.timeout", wanted["timeout"], 0.1, GENERATE_TIMEOUT_MAX_S, "seconds")
    listener = options.get("listener")
    if listener:
        between(prefix + "listener.port", listener["port"], 1, 65535, "")
    mode = resolve_mode(options.get("mode") or "process")
    if mode == "systemd" and not options.get("unit"):
        raise SpecError("%sunit: the systemd mode needs the unit's name, got none" % prefix)
    if mode == "container" and not (options.get("container") or {}).get("name"):
        raise SpecError("%scontainer.name: the container mode needs the container's name, got none" % prefix)


def taken_over(listener: t.Optional[t.Mapping[str, t.Any]], reading: t.Mapping[str, t.Any]) -> t.Optional[t.Dict[str, t.Any]]:
    """The listener when it is not the managed server (not its own unit, not the PID of the server that runs, not in
    its container nor the runtime's process that holds the container's published port), else None."""
    if listener is None or listener.get("how") == OWN_UNIT:
        return None
    if reading.get("running") and str(listener.get("pid")) == str(reading.get("pid")):
        return None
    if reading.get("mode") == "container":
        # the container backend, imported by a reading in its mode only (see mode.backend)
        from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.container import own_port_holder  # pylint: disable=import-outside-toplevel
        if own_port_holder(listener, reading):
            return None
    return dict(listener)


class TakeoverRefused(ServerError):
    """The process on the port may not be stopped; nothing was."""


def read_server(module: t.Any, psutil: t.Any, options: t.Mapping[str, t.Any],
                read_listener: t.Optional[ReadListener] = None) -> t.Dict[str, t.Any]:
    """What runs now, by ``options`` (status_options): the backend's reading (mode, running, pid, create_time,
    config_hash, config_matches, healthy, health, generates, generation, crash_loop, record); with ``listener``, also
    ``listener`` and ``takeover`` (the listener when it is not the managed server, else None); with ``decide``, also
    ``reason`` (decision.reason; '' when nothing must change); with ``decide`` and ``adapters``, a server that needs no
    other change also has its LoRA adapters read (``adapters``: adapters.read) and ``reason`` says when only they differ.

    Raises RecordError for an unreadable record, ServerError when systemctl fails, ListenerError and SpecError as
    ``read_listener`` does, and TakeoverRefused (with the reading in its result) when the process to take over may not
    be stopped: its message is 'vllm_server: nothing was stopped: REFUSAL'."""
    mode = resolve_mode(options.get("mode") or "process")
    target = Target(options["state_file"], options.get("unit"), options.get("config_hash"), options.get("container"))
    reading = backend(mode).status(module, psutil, target, options.get("health_url"), options.get("generate"))
    listens = options.get("listener")
    if listens:
        if read_listener is None:
            raise ServerError("listener: this module cannot read the listener")
        own_unit = listens.get("unit") or (options.get("unit") if mode == "systemd" else None)
        match = listens.get("match")
        across = {"across": listens["across"]} if listens.get("across") else {}
        reading["listener"] = (read_listener(psutil, listens["port"], match, own_unit, bool(listens.get("stop_units")), **across)
                               if match is not None
                               else read_listener(psutil, listens["port"], unit=own_unit, stop_units=bool(listens.get("stop_units")), **across))
        reading["takeover"] = taken_over(reading["listener"], reading)
    decide = options.get("decide")
    if decide:
        reading["reason"] = reason(decide.get("state") or "started", bool(decide.get("force")), reading)
        if options.get("adapters") and reading["reason"] == "":
            reading["adapters"] = adapters.read(options["adapters"])
            reading["reason"] = adapters.reason(reading["adapters"])
    takeover = reading.get("takeover")
    if takeover is not None and takeover.get("refusal"):
        raise TakeoverRefused("vllm_server: nothing was stopped: %s" % takeover["refusal"], reading)
    return reading
