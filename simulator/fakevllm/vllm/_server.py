# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API server process: what `vllm serve` and `python -m vllm.entrypoints.openai.api_server` run.

Order as in vLLM: bind the port, start the engine (EngineCore and/or workers), answer /health with 200
once every worker holds its GPU and the simulated start-up delay has passed.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Optional

from vllm import __version__, _simhost
from vllm._args import ServerArgs
from vllm._http import Serving, start_http, stop_http
from vllm._knobs import KnobError, Knobs, read_knobs
from vllm._multinode import Rendezvous, join_head
from vllm._proctree import Supervisor, log, start_child
from vllm._startup import Startup
from vllm.v1.engine.core import engine_core_args
from vllm.v1.executor.multiproc_executor import start_workers

from gpusim import procfs
from gpusim.allocs import live_allocs
from gpusim.procs import ROLE_API_SERVER, record_self
from gpusim.statedir import StateDir


class Readiness:
    """Ready = every worker of this tree holds its GPU, the start-up delay is over, the start-up's phases ran (weights,
    compile, graphs, engine init: _startup.py), no start-up fault, and, for a server across hosts, every other rank
    joined and is still there."""

    def __init__(self, state: StateDir, args: ServerArgs, knobs: Knobs, started: float,
                 rendezvous: Optional[Rendezvous] = None, startup: Optional[Startup] = None) -> None:
        self.state = state
        self.startup = startup
        self.workers = args.local_workers
        self.ready_at = started + knobs.startup_delay_s
        self.never = knobs.fail_at_start is not None
        self.rendezvous = rendezvous
        self._held = False

    def __call__(self) -> bool:
        if self.startup is not None and not self.startup.done.is_set():
            return False
        return self.rest()

    def rest(self) -> bool:
        """Ready but for the start-up's phases."""
        if self.never or time.monotonic() < self.ready_at:
            return False
        if self.rendezvous is not None and not self.rendezvous.complete():
            return False
        if not self._held:
            self._held = self._workers_hold()
        return self._held

    def _workers_hold(self) -> bool:
        """Count live allocations whose holder descends from this process (a short climb per holder)."""
        me = os.getpid()
        holding = 0
        for alloc in live_allocs(self.state):
            pid = alloc.pid
            for _level in range(4):  # worker -> (EngineCore ->) API server, which may be PID 1 (in a container)
                stat = procfs.read_stat(pid)
                if stat is None:
                    break
                if stat.ppid == me:
                    holding += 1
                    break
                if stat.ppid <= 1:
                    break
                pid = stat.ppid
        return holding >= self.workers


def crash_report(knobs: Knobs) -> None:
    """What vLLM prints when its engine fails to start: the root cause, then the API server's RuntimeError."""
    log("EngineCore failed to start.", level="ERROR")
    print("Traceback (most recent call last):\n"
          '  File "vllm/v1/engine/core.py", in run_engine_core\n'
          "    engine_core = EngineCoreProc(*args, **kwargs)\n"
          f"RuntimeError: {knobs.fail_message}\n"
          "\nThe above exception was the direct cause of the following exception:\n\n"
          "Traceback (most recent call last):\n"
          '  File "vllm/entrypoints/openai/api_server.py", in run_server\n'
          "    async with build_async_engine_client(args) as engine_client:\n"
          "RuntimeError: Engine core initialization failed. See root cause above."
          " Failed core proc(s): {'EngineCore_DP0': 1}", file=sys.stderr, flush=True)
    log("Engine core initialization failed. See root cause above.", level="ERROR")


def run_server(args: ServerArgs) -> int:
    started = time.monotonic()
    try:
        knobs = read_knobs()
        state = _simhost.state_dir()
    except KnobError as error:
        log(f"APIServer: ValueError: {error}", level="ERROR")
        return 1
    except _simhost.StartupError as error:
        log(f"APIServer: {error}", level="ERROR")
        return 1
    record_self(state, ROLE_API_SERVER)
    nodes = args.nodes
    log(f"vLLM API server version {__version__} (simulated), model {args.model},"
        f" tensor_parallel_size={args.tensor_parallel_size}"
        + (f", {nodes.shape} across hosts, {'head' if nodes.head else 'headless'} rank {nodes.rank}" if nodes else ""))
    supervisor = Supervisor("APIServer")
    stopping = threading.Event()
    supervisor.on_stop(stopping.set)
    unbound = threading.Event()  # the head could not bind its API port once the ranks joined: it exits 1
    rendezvous: Optional[Rendezvous] = None
    if nodes is not None and nodes.head:
        try:
            rendezvous = Rendezvous(nodes.address, nodes.port, nodes.peers)
        except OSError as error:
            log(f"APIServer: cannot listen for the other ranks on {nodes.address}:{nodes.port}: {error}", level="ERROR")
            return 1
        supervisor.on_stop(rendezvous.close)
        log(f"APIServer: waiting for ranks {list(nodes.peers)} at {nodes.address}:{nodes.port}")
    startup = Startup(state, args, knobs)
    if nodes is not None and not nodes.head:
        # no API (the head serves it); the rank joins once its own workers are up
        readiness = Readiness(state, args, knobs, started, startup=startup)
        join_head(nodes.address, nodes.port, nodes.rank, readiness, stopping)
    else:
        readiness = Readiness(state, args, knobs, started, rendezvous, startup)
    if args.port is not None and (nodes is None or nodes.head):
        serving = Serving(args, knobs, readiness)
        if rendezvous is None:
            if not _serve(serving, args, supervisor):
                return 1
        else:  # the head listens once every rank joined
            threading.Thread(target=_serve_when_joined, args=(rendezvous, serving, args, supervisor, stopping, unbound),
                             daemon=True).start()
    if _simhost.engine_core_enabled():
        core_args = engine_core_args(args.local_workers, args.gpu_memory_utilization)
        supervisor.adopt([start_child("vllm.v1.engine.core", core_args)])
    else:
        supervisor.adopt(start_workers(args.local_workers, args.gpu_memory_utilization))
    startup.start(readiness.rest, stopping)
    fail_at: Optional[float] = None
    if knobs.fail_at_start == "crash":
        fail_at = started + knobs.fail_after_s
    elif knobs.fail_at_start == "hang":
        log("APIServer: waiting for the engine to become ready ...")
    code = supervisor.run(fail_at=fail_at, on_fail=lambda: crash_report(knobs))
    return 1 if unbound.is_set() else code


def _serve(serving: Serving, args: ServerArgs, supervisor: Supervisor) -> bool:
    """Bind the API's port and serve it until the tree goes down; False (said in the log) when the port is taken."""
    try:
        server = start_http(serving, args.host, args.port)
    except OSError as error:
        log(f"APIServer: OSError: [Errno {error.errno}] error while attempting to bind on address"
            f" ({args.host!r}, {args.port}): {error.strerror}", level="ERROR")
        return False
    supervisor.on_stop(lambda: stop_http(server))
    log(f"APIServer: listening on http://{args.host}:{args.port} (ready once the engine is up)")
    if args.api_keys:
        log("APIServer: /v1/* answers only requests with an API key (Authorization: Bearer)")
    return True


def _serve_when_joined(rendezvous: Rendezvous, serving: Serving, args: ServerArgs, supervisor: Supervisor,
                       stopping: threading.Event, unbound: threading.Event) -> None:
    while not stopping.is_set():
        if rendezvous.wait_complete(timeout=0.5):
            if not stopping.is_set() and not _serve(serving, args, supervisor):
                unbound.set()
                os.kill(os.getpid(), signal.SIGTERM)  # the port is taken: the tree goes down, as one that cannot bind
            return
