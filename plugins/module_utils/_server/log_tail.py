# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The last lines of a server's log: a log file, or a systemd unit's journal.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _http, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

# read at most this much of a log's end: a multi-GB log must not be read whole
_TAIL_BYTES = 256 * 1024

RunCommand = t.Callable[..., t.Tuple[int, str, str]]


def file_tail(path: str, lines: int) -> t.List[str]:
    """The last ``lines`` lines of ``path`` (empty when the file does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - _TAIL_BYTES))
            data = handle.read()
    except FileNotFoundError:
        return []
    text = data.decode("utf-8", errors="replace")
    return [line.rstrip("\r") for line in text.splitlines()][-lines:] if lines > 0 else []


def journal_tail(run_command: RunCommand, unit: str, lines: int) -> t.List[str]:
    """The last lines of a unit's journal (``journalctl -u UNIT``); the error in one line if journalctl fails."""
    rc, out, err = run_command(["journalctl", "--no-pager", "--output=cat", "-n", str(lines), "-u", unit])
    if rc != 0:
        return ["(journalctl -u %s failed: %s)" % (unit, (err or out).strip())]
    return out.splitlines()[-lines:]


# a start-up's lines are read at most this far from where they begin (vLLM prints a few hundred lines while it starts)
_STARTUP_BYTES = 4 * 1024 * 1024
# the line the process mode writes before each launch (_server/process.py's launch_detached)
LAUNCH_MARK = "==== "


def file_since(path: str, offset: t.Optional[int]) -> t.List[str]:
    """The lines of ``path`` from byte ``offset`` on (this launch's: read only the new part), at most _STARTUP_BYTES of
    them; without an offset, or when the file is shorter than it (rotated), the lines after its last launch line in its
    last _STARTUP_BYTES. Empty when the file does not exist."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            known = offset is not None and 0 <= offset <= size
            handle.seek(offset if known else max(0, size - _STARTUP_BYTES))
            data = handle.read(_STARTUP_BYTES)
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    if not known:
        marks = [number for number, line in enumerate(lines) if line.startswith(LAUNCH_MARK) and " launching: " in line]
        lines = lines[marks[-1] + 1:] if marks else lines
    return lines


def journal_since(run_command: RunCommand, unit: str, since: float) -> t.List[str]:
    """A unit's journal lines since ``since`` (epoch seconds: this start-up's); empty when journalctl fails."""
    rc, out, _err = run_command(["journalctl", "--no-pager", "--output=cat", "--since", "@%d" % int(since), "-u", unit])
    return out.splitlines() if rc == 0 else []
