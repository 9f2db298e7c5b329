# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The record of a server the role launched: a small JSON state file, and the process it names.

A record is trusted only together with the process's start time: a PID alone may name
another process by now (PID reuse), so every lookup compares psutil's create_time too.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import os
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import START_TIME_TOLERANCE_S
from ansible_collections.gpuops.fleet.plugins.module_utils._io import write_atomic


class RecordError(Exception):
    """The state file exists but cannot be read or is not a record of this collection."""


def _read_json(path: str, what: str) -> t.Any:
    """The JSON document at ``path``; None when there is none."""
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RecordError("cannot read the %s %s: %s" % (what, path, exc)) from None


def _write_json(path: str, data: t.Mapping[str, t.Any], mode: int, prefix: str) -> None:
    """Write ``data`` atomically (a reader sees the old file or the new one, never half of one), with ``mode``."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode=mode, prefix=prefix)


def read_record(path: str) -> t.Optional[t.Dict[str, t.Any]]:
    """The record at ``path``; None when there is none."""
    data = _read_json(path, "server record")
    if data is None:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int) or not isinstance(data.get("create_time"), (int, float)):
        raise RecordError("%s is not a server record (it needs an integer pid and a create_time); move it away" % path)
    return data


def read_unit_record(path: str) -> t.Optional[t.Dict[str, t.Any]]:
    """The configuration record of a server run by a systemd unit (unit, config_hash, argv, env_keys, env_file) at
    ``path``; None when there is none."""
    data = _read_json(path, "unit configuration record")
    if data is None:
        return None
    if not isinstance(data, dict):
        raise RecordError("%s is not a unit configuration record (a JSON object); move it away" % path)
    return data


def write_record(path: str, data: t.Mapping[str, t.Any]) -> None:
    """Write the record atomically, readable by its owner only (it may hold secrets of the server's configuration)."""
    _write_json(path, data, 0o600, ".record.")


def remove_record(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def same_process(psutil: t.Any, pid: int, create_time: float) -> t.Optional[t.Any]:
    """The psutil.Process for ``pid`` if it is still the process started at ``create_time`` and not a zombie."""
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > START_TIME_TOLERANCE_S:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.Error:
        return None
    return proc


def recorded_process(psutil: t.Any, record: t.Optional[t.Mapping[str, t.Any]]) -> t.Optional[t.Any]:
    if record is None:
        return None
    return same_process(psutil, int(record["pid"]), float(record["create_time"]))


# ---- the last known-good configuration ---------------------------------------------------------------------------
# A server whose launch passed the ready step and the launch check (its own workers hold its GPUs, its /proc environ
# is as configured) is "good"; the role keeps its whole configuration beside the record, in NAME.last-good (0600: it
# holds the environment's values, secrets included), so that a later launch can be undone by launching it again.
# It lives beside the record rather than in it because the stop removes the record (a record names a running
# process), and the last good configuration must outlive the server it describes. Each new record carries a summary
# of it (no values: its hash and since when), so the record alone says whether the running configuration is the good
# one.

GOOD_SUFFIX = ".last-good"
GOOD_KEYS = ("argv", "env", "gpus", "model", "served_name", "mode", "config_hash", "tensor_parallel_size", "port", "name", "container",
             "lora_adapters", "lora_managed")
GOOD_MODE = 0o600


def good_path(state_file: str) -> str:
    """Where the last known-good configuration of the server recorded at ``state_file`` is kept."""
    base = state_file[:-len(".json")] if state_file.endswith(".json") else state_file
    return base + GOOD_SUFFIX


def check_good(data: t.Any, where: str) -> t.Dict[str, t.Any]:
    """``data`` if it is a usable last known-good configuration, else RecordError naming what is wrong."""
    if not isinstance(data, dict):
        raise RecordError("%s is not a last known-good configuration (a JSON object)" % where)
    problems = []
    argv = data.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(word, str) for word in argv):
        problems.append("argv must be a non-empty list of strings")
    env = data.get("env")
    if not isinstance(env, dict) or not all(isinstance(key, str) and isinstance(value, str) for key, value in env.items()):
        problems.append("env must map names to strings")
    gpus = data.get("gpus")
    if not isinstance(gpus, list) or not gpus or not all(isinstance(gpu, int) and gpu >= 0 for gpu in gpus):
        problems.append("gpus must be a non-empty list of GPU indices")
    if not isinstance(data.get("config_hash"), str) or not data.get("config_hash"):
        problems.append("config_hash is missing")
    if problems:
        raise RecordError("%s cannot be launched: %s" % (where, "; ".join(problems)))
    return data


def read_last_good(state_file: str) -> t.Optional[t.Dict[str, t.Any]]:
    """The last known-good configuration of the server recorded at ``state_file``; None when none was kept."""
    path = good_path(state_file)
    data = _read_json(path, "last known-good configuration")
    return None if data is None else check_good(data, path)


def mark_good(state_file: str, config: t.Mapping[str, t.Any], since: float) -> t.Dict[str, t.Any]:
    """Keep ``config`` (the keys of GOOD_KEYS) as the last known-good configuration, since ``since``, unless it is kept
    already (then the file stays as it is); return what is kept."""
    good = {key: config.get(key) for key in GOOD_KEYS}
    path = good_path(state_file)
    kept = read_last_good(state_file)
    if kept is not None and all(kept.get(key) == good[key] for key in GOOD_KEYS):
        # the same configuration stays good since it first was: the file is not rewritten
        return kept
    good["since"] = since
    check_good(good, path)
    _write_json(path, good, GOOD_MODE, ".last-good.")
    return good


def string_env(env: t.Mapping[t.Any, t.Any]) -> t.Dict[str, str]:
    """An environment as a process gets it: names and values as strings, a null value as the empty string (Jinja and
    YAML hand numbers and nulls through as they are)."""
    return {str(key): "" if value is None else str(value) for key, value in env.items()}


def good_config(raw: t.Mapping[str, t.Any], option: str) -> t.Dict[str, t.Any]:
    """A configuration handed to a module (``option`` names it) in the types kept: Jinja may hand numbers as strings."""
    config = {key: raw.get(key) for key in GOOD_KEYS}
    if isinstance(raw.get("argv"), list):
        config["argv"] = [str(word) for word in raw["argv"]]
    if isinstance(raw.get("env"), dict):
        config["env"] = string_env(raw["env"])
    if raw.get("container") is not None and not isinstance(raw["container"], dict):
        raise RecordError("%s: container must be a dict (the container mode's spec) or null, got %r" % (option, raw["container"]))
    try:
        config["gpus"] = [int(gpu) for gpu in raw.get("gpus") or []]
        for key in ("tensor_parallel_size", "port"):
            config[key] = None if raw.get(key) in (None, "") else int(raw[key])
    except (TypeError, ValueError) as exc:
        raise RecordError("%s: gpus, tensor_parallel_size and port must be whole numbers (%s)" % (option, exc)) from None
    return config


def good_summary(good: t.Optional[t.Mapping[str, t.Any]], masked_argv: t.Callable[[t.Sequence[str]], t.List[str]]) -> t.Optional[t.Dict[str, t.Any]]:
    """What may be shown of a last known-good configuration: everything but the environment's values and the argv's
    secrets (``masked_argv`` masks them)."""
    if good is None:
        return None
    shown = {key: good.get(key) for key in GOOD_KEYS if key not in ("argv", "env")}
    shown["argv"] = masked_argv(good.get("argv") or [])
    if isinstance(good.get("container"), dict):
        shown["container"] = dict(good["container"], run_options=masked_argv(good["container"].get("run_options") or []))
    shown["env_keys"] = sorted(good.get("env") or {})
    shown["since"] = good.get("since")
    return shown


def carry_last_good(state_file: str) -> t.Optional[t.Dict[str, t.Any]]:
    """For a new record: the hash of the last known-good configuration and since when (None when none is kept, or
    when it cannot be read: the launch itself does not depend on it)."""
    try:
        good = read_last_good(state_file)
    except RecordError:
        return None
    if good is None:
        return None
    return {"config_hash": good["config_hash"], "since": good.get("since")}


# ---- the last start-ups ------------------------------------------------------------------------------------------
# What the last start-ups of each configuration took (the ready step's startup, by configuration hash: total and
# phases), beside the record as NAME.startups, so that it outlives the server as the last known-good configuration
# does: the ready step's timeout follows it (_server/startup.py). No value of the configuration is kept.

STARTUPS_SUFFIX = ".startups"


def startups_path(state_file: str) -> str:
    """Where the last start-ups of the server recorded at ``state_file`` are kept."""
    base = state_file[:-len(".json")] if state_file.endswith(".json") else state_file
    return base + STARTUPS_SUFFIX


def read_startups(state_file: str) -> t.Dict[str, t.Any]:
    """{config_hash: [{total_s, at, phases}, ...]}; empty when none is kept or the file cannot be read (a launch never
    depends on it)."""
    try:
        data = _read_json(startups_path(state_file), "start-up history")
    except RecordError:
        return {}
    return data if isinstance(data, dict) else {}


def write_startups(state_file: str, history: t.Mapping[str, t.Any]) -> None:
    _write_json(startups_path(state_file), history, 0o600, ".startups.")
