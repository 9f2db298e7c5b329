# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One batch of streaming requests read by one client, pinned to one core; prints its figures as JSON.

    python bench/_ingest_probe.py CLIENT URL MODEL CONCURRENCY OUTPUT_LEN CPU

CLIENT is `gpuops` (vllm_benchmark's client) or `aiohttp` (the way vllm bench serve reads a stream: an aiohttp
session with a pooled connector, `response.content.iter_any()`, SSE messages cut at blank lines, one
`time.perf_counter()` per message). Both clients send the same bodies and their outcomes go through the same
metrics code, so the figures differ only by how each reads the streams. CPU is the processor the probe is pinned to.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import os
import sys
import time
from typing import Any, Dict, List, Sequence

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.client import Client
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import Outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.metrics import run_metrics
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.prompts import request_bodies
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.server import Server


def read_with_gpuops(url: str, bodies: Sequence[bytes], concurrency: int) -> Any:
    client = Client(Server(url).target("completions"), "completions", 300.0)
    return client.run(bodies, concurrency, [0.0] * len(bodies))


def read_with_aiohttp(url: str, bodies: Sequence[bytes], concurrency: int) -> Any:
    import aiohttp  # pylint: disable=import-outside-toplevel  # only this baseline needs it

    async def one(session: Any, index: int, body: bytes) -> Outcome:
        outcome = Outcome(index)
        text = ""
        decoder = codecs.getincrementaldecoder("utf-8")()
        start = time.perf_counter()
        outcome.start = last = start
        try:
            async with session.post(url + "/v1/completions", data=body,
                                    headers={"Content-Type": "application/json"}) as response:
                if response.status != 200:
                    outcome.reason, outcome.error = "http_error", "HTTP %d" % response.status
                    return outcome
                async for piece in response.content.iter_any():
                    text += decoder.decode(piece)
                    while "\n\n" in text:
                        message, text = text.split("\n\n", 1)
                        message = message.strip()
                        if not message or message.startswith(":"):
                            continue
                        data = message[len("data: "):] if message.startswith("data: ") else message
                        if data == "[DONE]":
                            continue
                        now = time.perf_counter()
                        event = json.loads(data)
                        if event.get("choices"):
                            if outcome.content_chunks == 0:
                                outcome.ttft = now - start
                            else:
                                outcome.itl.append(now - last)
                            last = now
                            outcome.content_chunks += 1
                        elif event.get("usage"):
                            outcome.output_tokens = event["usage"]["completion_tokens"]
                            outcome.prompt_tokens = event["usage"]["prompt_tokens"]
            outcome.success = outcome.content_chunks > 0
            outcome.reason = "" if outcome.success else "no_content"
            outcome.latency = last - start
            outcome.tokens_seen = outcome.output_tokens
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            outcome.reason, outcome.error = "connection_dropped", str(exc)
        return outcome

    async def run() -> Any:
        connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency, keepalive_timeout=60)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=300)) as session:
            semaphore = asyncio.Semaphore(concurrency)

            async def limited(index: int, body: bytes) -> Outcome:
                async with semaphore:
                    return await one(session, index, body)

            started = time.perf_counter()
            outcomes = await asyncio.gather(*(limited(i, body) for i, body in enumerate(bodies)))
            return list(outcomes), time.perf_counter() - started

    return asyncio.run(run())


READERS = {"gpuops": read_with_gpuops, "aiohttp": read_with_aiohttp}


def main(argv: List[str]) -> int:
    name, url, model, concurrency, output_len, cpu = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5])
    os.sched_setaffinity(0, {cpu})
    bodies = request_bodies("completions", model, concurrency, 16, output_len, True, 0, "ingest-%s" % name)
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    outcomes, duration = READERS[name](url, bodies, concurrency)
    cpu_s, wall_s = time.process_time() - cpu_start, time.perf_counter() - wall_start
    metrics = run_metrics(outcomes, duration)
    chunks = sum(o.content_chunks for o in outcomes if o.success)
    figures: Dict[str, Any] = {
        "client": name, "concurrency": concurrency, "completed": metrics["completed"], "failed": metrics["failed"],
        "failed_by_reason": metrics["failed_by_reason"], "tokens": metrics["total_output_tokens"], "chunks": chunks,
        "wall_s": wall_s, "cpu_s": cpu_s, "decode_tok_s": metrics["decode_tok_s"],
        "median_ttft_ms": metrics["median_ttft_ms"], "p99_itl_ms": metrics["p99_itl_ms"],
        "median_itl_ms": metrics["median_itl_ms"],
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
