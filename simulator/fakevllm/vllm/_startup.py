# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API server's start-up sequence, as vLLM runs and logs it: weights, torch.compile (from its cache when the cache
root holds an entry for this configuration), CUDA graph capture, the engine's init, then the API server.

Each phase takes the seconds its knob gives (GPUOPS_SIM_WEIGHTS_S, _COMPILE_S, _GRAPHS_S, _INIT_S; 0 by default) and
prints the lines real vLLM prints for it (GPUOPS_SIM_STARTUP_LOG: V1's format, V0's, or none). The compile cache lives
where vLLM keeps it: VLLM_CACHE_ROOT, else XDG_CACHE_HOME/vllm, else the simulated host's home (STATE/home/.cache/vllm:
the fake never writes the machine's own home), in torch_compile_cache/<hash>/rank_<r>_<dp>/backbone; the hash covers
what vLLM's covers (model, parallel sizes, dtype, max model length, compilation config, version), never NCCL or other
environment. --enforce-eager skips compile and graph capture, as in vLLM.

Every start-up leaves one JSON line in STATE/startups.jsonl (what the tests judge by): its PID, the phases it ran with
their seconds, whether it compiled or loaded from the cache, the cache directory, and how it ended (ready or hung).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from vllm import __version__
from vllm._args import ServerArgs
from vllm._knobs import Knobs
from vllm._proctree import log

from gpusim.statedir import StateDir

CACHE_ENTRY_FILE = "vllm_compile_cache.py"
RECORD_NAME = "startups.jsonl"
# the largest batch the compiled graph covers (vLLM's max_num_batched_tokens for a server)
COMPILE_RANGE_END = 8192


def records_path(state: StateDir) -> Path:
    return state.root / RECORD_NAME


def read_records(state: StateDir) -> List[Dict[str, Any]]:
    """Every start-up recorded on this simulated host, oldest first."""
    try:
        text = records_path(state).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def cache_root(state: StateDir, env: Optional[Dict[str, str]] = None) -> Path:
    env = dict(os.environ) if env is None else env
    if env.get("VLLM_CACHE_ROOT"):
        return Path(env["VLLM_CACHE_ROOT"]).expanduser()
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "vllm"
    return state.root / "home" / ".cache" / "vllm"


def compile_hash(args: ServerArgs) -> str:
    """The compile cache's key: only what changes the compiled graphs (vLLM hashes its model, parallel, cache and
    compilation configs and its own version); ten hex digits, as vLLM's directory names."""
    relevant = {"model": args.model, "tp": args.tensor_parallel_size, "pp": args.pipeline_parallel_size,
                "dtype": args.dtype, "max_model_len": args.max_model_len, "block_size": args.block_size,
                "compilation_config": args.compilation_config, "version": __version__}
    if args.enable_lora:  # vLLM's key covers its LoRA config too (the adapters loaded are not in it)
        relevant["lora"] = {"max_loras": args.max_loras}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:10]


class Startup:
    """Runs the phases in a thread; ``done`` is set once the API server is up (never after a hang)."""

    def __init__(self, state: StateDir, args: ServerArgs, knobs: Knobs) -> None:
        self.state, self.args, self.knobs = state, args, knobs
        self.done = threading.Event()
        self.phases: List[Dict[str, Any]] = []
        self.record: Dict[str, Any] = {}

    def start(self, rest_ready: Callable[[], bool], stopping: threading.Event) -> None:
        threading.Thread(target=self._run, args=(rest_ready, stopping), daemon=True).start()

    # ---- the sequence ------------------------------------------------------------------------------------------

    def _say(self, where: str, message: str) -> None:
        if self.knobs.startup_log != "none":
            log(f"[{where}] {message}")

    def _phase(self, name: str, seconds: float) -> None:
        self.phases.append({"name": name, "seconds": round(seconds, 3)})

    def _hangs_after(self, name: str) -> bool:
        return self.knobs.hang_after == name and self.record["ordinal"] >= self.knobs.hang_from

    def _run(self, rest_ready: Callable[[], bool], stopping: threading.Event) -> None:
        knobs, args = self.knobs, self.args
        eager = args.enforce_eager or knobs.startup_log == "v0"  # V0 runs no torch.compile
        self.record = {"pid": os.getpid(), "started_at": time.time(), "ordinal": len(read_records(self.state)) + 1,
                       "model": args.model, "log_format": knobs.startup_log, "enforce_eager": args.enforce_eager,
                       "compile_hash": None if eager else compile_hash(args), "cache_dir": None, "compiled": None,
                       "cache": None, "phases": self.phases, "outcome": None}
        began = time.monotonic()
        time.sleep(knobs.weights_s)
        self._phase("weights", knobs.weights_s)
        if knobs.startup_log == "v0":
            self._say("model_runner.py:1067", f"Loading model weights took {knobs.weights_gib:.4f} GB")
        else:
            self._say("default_loader.py:384", f"Loading weights took {knobs.weights_s:.2f} seconds")
            self._say("gpu_model_runner.py:2581", f"Model loading took {knobs.weights_gib:.4f} GiB memory and"
                                                  f" {time.monotonic() - began:.6f} seconds")
        if self._hang("weights"):
            return
        init_began = time.monotonic()
        if not args.enforce_eager and knobs.startup_log != "v0":
            self._compile()
            if self._hang("compile"):
                return
        tokens = self.args.num_gpu_blocks * self.args.block_size
        self._say("kv_cache_utils.py:1087", f"GPU KV cache size: {tokens:,} tokens")
        self._say("kv_cache_utils.py:1091", f"Maximum concurrency for {args.max_model_len:,} tokens per request:"
                                            f" {tokens / args.max_model_len:.2f}x")
        if not args.enforce_eager:
            time.sleep(knobs.graphs_s)
            self._phase("graphs", knobs.graphs_s)
            where = "model_runner.py:1530" if knobs.startup_log == "v0" else "gpu_model_runner.py:4587"
            self._say(where, f"Graph capturing finished in {round(knobs.graphs_s):.0f} secs, took 0.45 GiB")
            if self._hang("graphs"):
                return
        time.sleep(knobs.init_s)
        init_s = time.monotonic() - init_began
        self._phase("engine_init", init_s)
        where = "llm_engine.py:447" if knobs.startup_log == "v0" else "core.py:210"
        self._say(where, f"init engine (profile, create kv cache, warmup model) took {init_s:.2f} seconds")
        if self._hang("engine_init"):
            return
        api_began = time.monotonic()
        while not rest_ready():  # every worker holds its GPU, the start-up delay is over, every rank joined
            if stopping.wait(0.05):
                return
        if args.port is not None and (args.nodes is None or args.nodes.head):
            server = "Starting vLLM API server on" if knobs.startup_log == "v0" else "Starting vLLM API server 0 on"
            self._say("api_server.py:1880", f"{server} http://{args.host}:{args.port}")
            if knobs.startup_log != "none":
                print("INFO:     Waiting for application startup.\nINFO:     Application startup complete.", flush=True)
            self._phase("api", time.monotonic() - api_began)
        self._finish("ready")
        self.done.set()

    def _compile(self) -> None:
        knobs = self.knobs
        entry = cache_root(self.state) / "torch_compile_cache" / str(self.record["compile_hash"])
        ranks = [entry / f"rank_{rank}_0" / "backbone" for rank in range(self.args.local_workers)]
        self.record["cache_dir"] = str(entry)
        self._say("backends.py:1069", f"Using cache directory: {ranks[0]} for vLLM's torch.compile")
        hit = all((rank / CACHE_ENTRY_FILE).is_file() for rank in ranks)
        if hit:
            seconds = knobs.compile_load_s if knobs.compile_load_s is not None else knobs.compile_s / 20
            time.sleep(seconds)
            self._say("backends.py:286", f"Directly load the compiled graph(s) for compile range (1, {COMPILE_RANGE_END})"
                                         f" from the cache, took {seconds:.3f} s")
        else:
            seconds = knobs.compile_s
            time.sleep(seconds)
            for rank in ranks:
                rank.mkdir(parents=True, exist_ok=True)
                tmp = rank / f"{CACHE_ENTRY_FILE}.tmp.{os.getpid()}"
                tmp.write_text(f"# compiled by the fake vLLM {__version__} for {self.args.model}\n", encoding="utf-8")
                os.replace(tmp, rank / CACHE_ENTRY_FILE)
            self._say("backends.py:393", f"Compiling a graph for compile range (1, {COMPILE_RANGE_END}) takes {seconds:.2f} s")
        self.record.update(compiled=not hit, cache="hit" if hit else "miss")
        self._phase("compile", seconds)
        self._say("monitor.py:48", f"torch.compile took {seconds:.2f} s in total")

    def _hang(self, name: str) -> bool:
        """True when the start-up stops for good after phase ``name`` (GPUOPS_SIM_HANG_AFTER_PHASE): recorded as hung."""
        if not self._hangs_after(name):
            return False
        self._finish("hung")
        return True

    def _finish(self, outcome: str) -> None:
        self.record["outcome"] = outcome
        self.record["ended_at"] = time.time()
        with open(records_path(self.state), "a", encoding="utf-8") as handle:
            handle.write(json.dumps(self.record, sort_keys=True) + "\n")
