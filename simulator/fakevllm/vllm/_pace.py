# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Token pace: the per-stream decode speed, how concurrency slows it, and when each token is due.

The base pace depends on NCCL_PROTO, the way a tensor-parallel decode step depends on the latency of
its all-reduces: the seed measurements (unset 47.3, LL 57.6, LL128 45.5 tokens/s per stream) and
49.0 for Simple, our own choice (see docs/simulator.md).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Dict, Optional

DEFAULT_PACE = 47.3
NCCL_PROTO_PACE: Dict[str, float] = {"LL": 57.6, "LL128": 45.5, "SIMPLE": 49.0}
MAX_JITTER = 0.5  # beyond half a gap, two tokens could swap places


def base_pace(nccl_proto: Optional[str]) -> float:
    """Tokens/s of one stream for this NCCL_PROTO (NCCL reads the names without regard to case)."""
    if nccl_proto is None or not nccl_proto.strip():
        return DEFAULT_PACE
    return NCCL_PROTO_PACE.get(nccl_proto.strip().upper(), DEFAULT_PACE)


@dataclass(frozen=True)
class PaceModel:
    base: float
    concurrency_slowdown: float
    jitter: float

    def at(self, streams: int) -> float:
        """Tokens/s of each stream while `streams` requests run."""
        return self.base / (1.0 + self.concurrency_slowdown * max(streams - 1, 0))


class TokenClock:
    """The instants (time.monotonic) at which one request's tokens are due.

    Token 0 is due at `first`. Each later token is due one gap (1 / pace at the number of running
    requests read at that moment) after the NOMINAL instant of the token before it, then displaced by
    a uniform random amount within +-jitter x gap. The displacement moves that instant only and is
    never carried on, so lateness does not accumulate and the mean pace is the model's exactly.
    """

    def __init__(self, model: PaceModel, first: float, streams: Callable[[], int],
                 rng: Optional[random.Random] = None) -> None:
        self._model = model
        self._streams = streams
        self._rng = rng or random.Random()
        self._nominal = first
        self._last = first
        self._started = False

    def next_due(self) -> float:
        if not self._started:
            self._started = True
            return self._nominal
        gap = 1.0 / self._model.at(self._streams())
        self._nominal += gap
        width = min(self._model.jitter, MAX_JITTER) * gap
        due = self._nominal + (self._rng.uniform(-width, width) if width > 0 else 0.0)
        self._last = max(due, self._last)
        return self._last

    def due_after(self, tokens: int) -> float:
        """The instant at which the last of the next `tokens` tokens is due (when their chunk goes out)."""
        due = self._last
        for _token in range(tokens):
            due = self.next_due()
        return due
