# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Faults queued through `POST /sim/faults` for the next generation requests, one fault per request."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Deque, List, Optional

HTTP_500 = "http_500"
ERROR_EVENT = "error_event"
STALL = "stall"
DROP = "drop"
KINDS = (HTTP_500, ERROR_EVENT, STALL, DROP)
MAX_QUEUED = 100_000


class FaultError(ValueError):
    """A /sim/faults body the server cannot queue."""


def parse_faults(body: Any) -> List[str]:
    """{"http_500": 1, "drop": 2} (kinds in the body's order) or {"queue": ["drop", "http_500"]}."""
    if not isinstance(body, dict) or not body:
        raise FaultError(f"expected an object such as {{\"http_500\": 1}} with kinds from: {', '.join(KINDS)}")
    if set(body) == {"queue"}:
        queue = body["queue"]
        if not isinstance(queue, list) or not all(isinstance(kind, str) and kind in KINDS for kind in queue):
            raise FaultError(f"queue: expected a list of kinds from: {', '.join(KINDS)}")
        return list(queue)
    faults: List[str] = []
    for kind, count in body.items():
        if kind not in KINDS:
            raise FaultError(f"unknown fault kind {kind!r}; kinds: {', '.join(KINDS)}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise FaultError(f"{kind}: expected a count (a whole number, 0 or more), not {count!r}")
        faults.extend([kind] * count)
    return faults


class FaultQueue:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: Deque[str] = deque()

    def extend(self, faults: List[str]) -> None:
        with self._lock:
            if len(self._queue) + len(faults) > MAX_QUEUED:
                raise FaultError(f"at most {MAX_QUEUED} faults may wait at once")
            self._queue.extend(faults)

    def take(self) -> Optional[str]:
        """The fault for the request being admitted now, if any."""
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def clear(self) -> int:
        with self._lock:
            count = len(self._queue)
            self._queue.clear()
            return count

    def snapshot(self) -> List[str]:
        with self._lock:
            return list(self._queue)
