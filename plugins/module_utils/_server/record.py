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
import tempfile
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import START_TIME_TOLERANCE_S


class RecordError(Exception):
    """The state file exists but cannot be read or is not a record of this collection."""


def read_record(path: str) -> t.Optional[t.Dict[str, t.Any]]:
    """The record at ``path``; None when there is none."""
    try:
        with open(path, "r", encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RecordError("cannot read the server record %s: %s" % (path, exc)) from None
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int) or not isinstance(data.get("create_time"), (int, float)):
        raise RecordError("%s is not a server record (it needs an integer pid and a create_time); move it away" % path)
    return data


def write_record(path: str, data: t.Mapping[str, t.Any]) -> None:
    """Write the record atomically (a reader sees the old file or the new one, never half of one)."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=".record.", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2, sort_keys=True)
            out.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
GOOD_KEYS = ("argv", "env", "gpus", "model", "served_name", "mode", "config_hash", "tensor_parallel_size", "port", "name")
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
    try:
        with open(path, "r", encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RecordError("cannot read the last known-good configuration %s: %s" % (path, exc)) from None
    return check_good(data, path)


def mark_good(state_file: str, config: t.Mapping[str, t.Any], since: float) -> t.Dict[str, t.Any]:
    """Keep ``config`` (the keys of GOOD_KEYS) as the last known-good configuration, since ``since``; return it."""
    good = {key: config.get(key) for key in GOOD_KEYS}
    good["since"] = since
    path = good_path(state_file)
    check_good(good, path)
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=".last-good.", dir=folder)  # mkstemp creates it 0600
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(good, out, indent=2, sort_keys=True)
            out.write("\n")
        os.chmod(tmp, GOOD_MODE)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return good


def good_summary(good: t.Optional[t.Mapping[str, t.Any]], masked_argv: t.Callable[[t.Sequence[str]], t.List[str]]) -> t.Optional[t.Dict[str, t.Any]]:
    """What may be shown of a last known-good configuration: everything but the environment's values and the argv's
    secrets (``masked_argv`` masks them)."""
    if good is None:
        return None
    shown = {key: good.get(key) for key in GOOD_KEYS if key not in ("argv", "env")}
    shown["argv"] = masked_argv(good.get("argv") or [])
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
