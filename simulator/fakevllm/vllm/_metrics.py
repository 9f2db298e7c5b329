# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`GET /metrics`: vLLM's request and token metrics in Prometheus text format, counted exactly."""

from __future__ import annotations

import threading
from typing import Dict, List, Tuple

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FINISH_REASONS = ("stop", "length")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    """Thread-safe counters. A request is running from its admission until just before its last byte."""

    def __init__(self, model_name: str) -> None:
        self._lock = threading.Lock()
        self._labels = f'engine="0",model_name="{_label(model_name)}"'
        self.running = 0
        self.waiting = 0  # the simulated scheduler admits every request at once
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success: Dict[str, int] = {reason: 0 for reason in FINISH_REASONS}

    def admit(self, prompt_tokens: int) -> None:
        with self._lock:
            self.running += 1
            self.prompt_tokens += prompt_tokens

    def generated(self, tokens: int) -> None:
        with self._lock:
            self.generation_tokens += tokens

    def finish(self, finish_reason: str = "") -> None:
        """The request is done (finish_reason "" when it failed or was cut)."""
        with self._lock:
            self.running -= 1
            if finish_reason in self.success:
                self.success[finish_reason] += 1

    def running_now(self) -> int:
        return self.running

    def render(self) -> str:
        with self._lock:
            rows: List[Tuple[str, str, str, List[Tuple[str, int]]]] = [
                ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
                 [(self._labels, self.running)]),
                ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
                 [(self._labels, self.waiting)]),
                ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
                 [(self._labels, self.prompt_tokens)]),
                ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
                 [(self._labels, self.generation_tokens)]),
                ("vllm:request_success_total", "counter", "Count of successfully processed requests.",
                 [(f'{self._labels.split(",", 1)[0]},finished_reason="{reason}",{self._labels.split(",", 1)[1]}',
                   count) for reason, count in self.success.items()]),
            ]
        lines: List[str] = []
        for name, kind, help_text, samples in rows:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(f"{name}{{{labels}}} {float(value)!r}" for labels, value in samples)
        return "\n".join(lines) + "\n"
