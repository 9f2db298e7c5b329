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
