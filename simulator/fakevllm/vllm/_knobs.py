# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API server's serving knobs: start-up, token pace, prefill, chunking, faults, a dead engine, a chat-only server
(GPUOPS_SIM_* environment).

Read once when the API server starts; a malformed value stops the start-up with an error, as a bad
engine argument stops real vLLM. docs/simulator.md lists every knob.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, TypeVar

from vllm._pace import base_pace

STARTUP_DELAY_ENV = "GPUOPS_SIM_STARTUP_DELAY_S"
FAIL_AT_START_ENV = "GPUOPS_SIM_FAIL_AT_START"
FAIL_AFTER_ENV = "GPUOPS_SIM_FAIL_AFTER_S"
FAIL_MESSAGE_ENV = "GPUOPS_SIM_FAIL_MESSAGE"
TOKENS_PER_S_ENV = "GPUOPS_SIM_TOKENS_PER_S"
JITTER_ENV = "GPUOPS_SIM_JITTER"
SLOWDOWN_ENV = "GPUOPS_SIM_CONCURRENCY_SLOWDOWN"
TTFT_ENV = "GPUOPS_SIM_TTFT_MS"
PREFILL_ENV = "GPUOPS_SIM_PREFILL_MS_PER_TOKEN"
CHAT_ONLY_ENV = "GPUOPS_SIM_CHAT_ONLY"
CHUNK_ENV = "GPUOPS_SIM_TOKENS_PER_CHUNK"
NATURAL_LEN_ENV = "GPUOPS_SIM_NATURAL_LEN"
FAULT_AFTER_ENV = "GPUOPS_SIM_FAULT_AFTER_TOKENS"
ENGINE_DEAD_AFTER_ENV = "GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS"
NCCL_PROTO_ENV = "NCCL_PROTO"
WEIGHTS_S_ENV = "GPUOPS_SIM_WEIGHTS_S"
WEIGHTS_GIB_ENV = "GPUOPS_SIM_WEIGHTS_GIB"
COMPILE_S_ENV = "GPUOPS_SIM_COMPILE_S"
COMPILE_LOAD_S_ENV = "GPUOPS_SIM_COMPILE_LOAD_S"
GRAPHS_S_ENV = "GPUOPS_SIM_GRAPHS_S"
INIT_S_ENV = "GPUOPS_SIM_INIT_S"
STARTUP_LOG_ENV = "GPUOPS_SIM_STARTUP_LOG"
HANG_AFTER_ENV = "GPUOPS_SIM_HANG_AFTER_PHASE"
HANG_FROM_ENV = "GPUOPS_SIM_HANG_FROM_STARTUP"

FAIL_MODES = ("crash", "hang")
STARTUP_LOGS = ("v1", "v0", "none")  # vLLM V1's start-up lines, V0's (0.6), or none of them (an unknown format)
PHASES = ("weights", "compile", "graphs", "engine_init")
DEFAULT_FAIL_MESSAGE = "CUDA error: an illegal memory access was encountered"

T = TypeVar("T", int, float)


class KnobError(ValueError):
    """A GPUOPS_SIM_* value the server cannot use."""


@dataclass(frozen=True)
class Knobs:  # pylint: disable=too-many-instance-attributes  # one field per documented knob
    startup_delay_s: float
    fail_at_start: Optional[str]
    fail_after_s: float
    fail_message: str
    tokens_per_s: float
    pace_source: str
    nccl_proto: Optional[str]
    jitter: float
    concurrency_slowdown: float
    ttft_ms: float
    prefill_ms_per_token: float  # added to the TTFT for each prompt token not found in the prefix cache
    tokens_per_chunk: int
    natural_len: int
    fault_after_tokens: int
    engine_dead_after: Optional[int]  # generation requests served before the engine core dies; None: it never does
    chat_only: bool = False  # POST /v1/completions answers 404, as a server that serves only chat
    # the start-up's phases (_startup.py): seconds each takes, the weights' size, the log's format, a hang after a phase
    weights_s: float = 0.0
    weights_gib: float = 0.23
    compile_s: float = 0.0
    compile_load_s: Optional[float] = None  # loading compiled graphs from the cache; None: a twentieth of compile_s
    graphs_s: float = 0.0
    init_s: float = 0.0
    startup_log: str = "v1"
    hang_after: Optional[str] = None
    hang_from: int = 1  # the hang hits the Nth start-up recorded in the state directory and every later one


def _number(env: Mapping[str, str], name: str, default: T, kind: Callable[[str], T], minimum: T,
            above: bool = False) -> T:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or math.isnan(value) or value < minimum or (above and value == minimum):
        bound = f"above {minimum}" if above else f"at least {minimum}"
        raise KnobError(f"{name} must be a {'whole ' if kind is int else ''}number {bound}, not {raw!r}")
    return value


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise KnobError(f"{name} must be 1 or 0 (or empty), not {raw!r}")


def read_knobs(env: Optional[Mapping[str, str]] = None) -> Knobs:
    env = os.environ if env is None else env
    fail = env.get(FAIL_AT_START_ENV, "").strip().lower() or None
    if fail is not None and fail not in FAIL_MODES:
        raise KnobError(f"{FAIL_AT_START_ENV} must be one of {', '.join(FAIL_MODES)} (or empty), not {fail!r}")
    nccl_proto = env.get(NCCL_PROTO_ENV)
    if env.get(TOKENS_PER_S_ENV, "").strip():
        pace = _number(env, TOKENS_PER_S_ENV, 0.0, float, 0.0, above=True)
        source = TOKENS_PER_S_ENV
    else:
        pace = base_pace(nccl_proto)
        source = NCCL_PROTO_ENV
    log_format = env.get(STARTUP_LOG_ENV, "").strip().lower() or "v1"
    if log_format not in STARTUP_LOGS:
        raise KnobError(f"{STARTUP_LOG_ENV} must be one of {', '.join(STARTUP_LOGS)} (or empty), not {log_format!r}")
    hang_after = env.get(HANG_AFTER_ENV, "").strip().lower() or None
    if hang_after is not None and hang_after not in PHASES:
        raise KnobError(f"{HANG_AFTER_ENV} must be one of {', '.join(PHASES)} (or empty), not {hang_after!r}")
    return Knobs(
        weights_s=_number(env, WEIGHTS_S_ENV, 0.0, float, 0.0),
        weights_gib=_number(env, WEIGHTS_GIB_ENV, 0.23, float, 0.0),
        compile_s=_number(env, COMPILE_S_ENV, 0.0, float, 0.0),
        compile_load_s=_number(env, COMPILE_LOAD_S_ENV, 0.0, float, 0.0) if env.get(COMPILE_LOAD_S_ENV, "").strip() else None,
        graphs_s=_number(env, GRAPHS_S_ENV, 0.0, float, 0.0),
        init_s=_number(env, INIT_S_ENV, 0.0, float, 0.0),
        startup_log=log_format,
        hang_after=hang_after,
        hang_from=_number(env, HANG_FROM_ENV, 1, int, 1),
        startup_delay_s=_number(env, STARTUP_DELAY_ENV, 0.0, float, 0.0),
        fail_at_start=fail,
        fail_after_s=_number(env, FAIL_AFTER_ENV, 1.0, float, 0.0),
        fail_message=env.get(FAIL_MESSAGE_ENV, "").strip() or DEFAULT_FAIL_MESSAGE,
        tokens_per_s=pace,
        pace_source=source,
        nccl_proto=nccl_proto,
        jitter=_number(env, JITTER_ENV, 0.02, float, 0.0),
        concurrency_slowdown=_number(env, SLOWDOWN_ENV, 0.001, float, 0.0),
        ttft_ms=_number(env, TTFT_ENV, 25.0, float, 0.0),
        prefill_ms_per_token=_number(env, PREFILL_ENV, 0.0, float, 0.0),
        tokens_per_chunk=_number(env, CHUNK_ENV, 1, int, 1),
        natural_len=_number(env, NATURAL_LEN_ENV, 128, int, 1),
        fault_after_tokens=_number(env, FAULT_AFTER_ENV, 3, int, 0),
        engine_dead_after=_number(env, ENGINE_DEAD_AFTER_ENV, -1, int, 0) if env.get(ENGINE_DEAD_AFTER_ENV, "").strip() else None,
        chat_only=_flag(env, CHAT_ONLY_ENV),
    )
