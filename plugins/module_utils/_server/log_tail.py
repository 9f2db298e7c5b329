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
