# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the server sent for each generation request, and when: `GET /sim/sent`.

Each record is one generation request that ended (complete or cut): its id (1, 2, ... in the order they ended),
the endpoint, whether it streamed, when it arrived (`arrived_s`: the host's monotonic clock, CLOCK_MONOTONIC, in
seconds, so arrivals compare between requests and with a client's time.monotonic()), its prompt tokens and how
many of them the prefix cache held (`cached_tokens`, 0 with prefix caching off), the output tokens it was to
generate, and one entry per piece of content it wrote, `[ms, tokens]`, `ms` counted from the request's arrival to
the moment the write returned. A streamed request has one entry per content chunk; a whole answer has one entry.
`finished_ms` is when the request counted as done (the instant /metrics' e2e latency observes), null when it was
cut before that. The last MAX_RECORDS are kept.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Tuple

MAX_RECORDS = 4096


class SentRecord:
    """One request's writes, filled in while it runs."""

    def __init__(self, arrival: float, chat: bool, stream: bool, output_tokens: int,  # pylint: disable=too-many-arguments
                 prompt_tokens: int = 0, cached_tokens: int = 0) -> None:
        self.arrival = arrival
        self.chat = chat
        self.stream = stream
        self.output_tokens = output_tokens
        self.prompt_tokens = prompt_tokens
        self.cached_tokens = cached_tokens
        self.chunks: List[Tuple[float, int]] = []
        self.finished_ms: Optional[float] = None

    def wrote(self, tokens: int) -> None:
        """`tokens` tokens of content just went out."""
        self.chunks.append((round((time.monotonic() - self.arrival) * 1000.0, 3), tokens))

    def finished(self, at: float) -> None:
        self.finished_ms = round((at - self.arrival) * 1000.0, 3)


class SentLog:
    """The records of the requests that ended, oldest first (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: Deque[Dict[str, Any]] = collections.deque(maxlen=MAX_RECORDS)
        self._next_id = 1

    def add(self, record: SentRecord) -> None:
        with self._lock:
            self._records.append({
                "id": self._next_id, "endpoint": "chat" if record.chat else "completions", "stream": record.stream,
                "arrived_s": round(record.arrival, 6),
                "prompt_tokens": record.prompt_tokens, "cached_tokens": record.cached_tokens,
                "output_tokens": record.output_tokens, "chunks": [list(chunk) for chunk in record.chunks],
                "finished_ms": record.finished_ms,
            })
            self._next_id += 1

    def after(self, last_id: int) -> List[Dict[str, Any]]:
        """The records whose id is above `last_id` (0: every record kept)."""
        with self._lock:
            return [dict(record) for record in self._records if record["id"] > last_id]
