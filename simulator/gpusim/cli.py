# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The `gpusim` command line: one sub-command per scenario step (docs/simulator.md)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Callable, List, Optional

from gpusim.allocs import gc_allocs
from gpusim.cleanup import cleanup
from gpusim.gpus import DEFAULT_NAME, DEFAULT_RESERVED_MIB, DEFAULT_TOTAL_MIB
from gpusim.host import ORPHANS, TOPOLOGIES, create_host, set_host_key
from gpusim.incident import replay_incident
from gpusim.procs import read_records
from gpusim.scenarios import add_foreign, set_driver_loaded, set_lost, set_orphan
from gpusim.spawn import SIMULATOR_DIR
from gpusim.statedir import STATE_ENV, StateDir, StateError, resolve_state
from gpusim.status import collect_status, render_status
from gpusim.stuck import spawn_stuck
from gpusim.tree import spawn_tree
from gpusim.vllm_tree import DEFAULT_MODEL, DEFAULT_WORKER_MIB, ENTRYPOINTS, TreeSpec, parse_gpu_list, spawn_vllm

Handler = Callable[[StateDir, argparse.Namespace], int]


def _print_json(value: object) -> None:
    print(json.dumps(value, indent=None if not sys.stdout.isatty() else 2))


def cmd_create(state: StateDir, args: argparse.Namespace) -> int:
    if args.force and any(record.is_running() for record in read_records(state)):
        raise StateError(f"processes recorded in {state.procs} are still running: run cleanup first")
    create_host(state, args.gpus, args.memory_mib, args.reserved_mib, args.name, args.topology, args.force,
                args.orphans, args.subreaper_title)
    print(f"created {args.gpus} x {args.memory_mib} MiB '{args.name}' ({args.topology}) in {state.root}")
    return 0


def cmd_vllm(state: StateDir, args: argparse.Namespace) -> int:
    gpus = parse_gpu_list(args.gpus) if args.gpus else list(range(args.first_gpu, args.first_gpu + args.tp))
    spec = TreeSpec(gpus=gpus, worker_mib=args.mib, engine_core=args.engine_core, entrypoint=args.entrypoint,
                    model=args.model, ignore_sigterm=args.ignore_sigterm, port=args.port,
                    wrapper=args.wrapper, sibling=args.sibling,
                    serve_args=tuple(args.serve_args[1:] if args.serve_args[:1] == ["--"] else args.serve_args))
    _print_json(spawn_vllm(state, spec))
    return 0


def cmd_stuck(state: StateDir, args: argparse.Namespace) -> int:
    _print_json(spawn_stuck(state, args.gpu, args.mib))
    return 0


def cmd_tree(state: StateDir, args: argparse.Namespace) -> int:
    try:
        root = json.loads(args.spec)
    except ValueError as error:
        raise StateError(f"tree: --spec is not JSON: {error}") from None
    _print_json(spawn_tree(state, root))
    return 0


def cmd_teardown_lag(state: StateDir, args: argparse.Namespace) -> int:
    if args.ms < 0:
        raise StateError("--ms must not be negative")
    set_host_key(state, "teardown_lag_ms", str(args.ms))
    print(f"a dead holder's memory stays listed for {args.ms} ms" if args.ms else "no driver teardown lag")
    return 0


def cmd_incident(state: StateDir, args: argparse.Namespace) -> int:
    for step in replay_incident(state, args.parent):
        print(f"killed pid {step['pid']} ({step['role']}: {step['title']}) with {step['signal']},"
              f" as `{step['as_by']}` did")
    return 0


def cmd_lose_gpu(state: StateDir, args: argparse.Namespace) -> int:
    set_lost(state, args.gpu, True)
    print(f"GPU {args.gpu} is lost (NVML_ERROR_GPU_IS_LOST)")
    return 0


def cmd_restore_gpu(state: StateDir, args: argparse.Namespace) -> int:
    set_lost(state, args.gpu, False)
    print(f"GPU {args.gpu} is back")
    return 0


def cmd_foreign(state: StateDir, args: argparse.Namespace) -> int:
    alloc = add_foreign(state, args.gpu, args.mib, args.pid, args.na)
    _print_json({"pid": alloc.pid, "gpu": alloc.gpu_index, "mib": alloc.used_mib, "flags": list(alloc.flags)})
    return 0


def cmd_orphan(state: StateDir, args: argparse.Namespace) -> int:
    set_orphan(state, args.gpu, args.mib)
    print(f"GPU {args.gpu}: {args.mib} MiB held by no process")
    return 0


def cmd_driver(state: StateDir, args: argparse.Namespace) -> int:
    set_driver_loaded(state, args.load)
    print("driver loaded" if args.load else "driver unloaded (nvmlInit fails with DRIVER_NOT_LOADED)")
    return 0


def cmd_status(state: StateDir, args: argparse.Namespace) -> int:
    status = collect_status(state)
    if args.json:
        _print_json(status)
    else:
        print(render_status(status))
    return 0


def cmd_env(state: StateDir, _args: argparse.Namespace) -> int:
    build = SIMULATOR_DIR / "build"
    print(f"export LD_LIBRARY_PATH={shlex.quote(str(build / 'lib'))}" + "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    print(f"export PATH={shlex.quote(str(build / 'bin'))}:$PATH")
    print(f"export {STATE_ENV}={shlex.quote(str(state.root))}")
    return 0


def cmd_cleanup(state: StateDir, args: argparse.Namespace) -> int:
    result = cleanup(state, remove=args.remove)
    _print_json(result)
    if result["left"]:
        print(f"gpusim: error: still running after SIGKILL: {result['left']}", file=sys.stderr)
        return 1
    return 0


def cmd_gc(state: StateDir, _args: argparse.Namespace) -> int:
    removed = gc_allocs(state.require())
    print(f"removed {len(removed)} dead allocation record(s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state", default=argparse.SUPPRESS,
                        help=f"state directory of the simulated host (default: ${STATE_ENV})")
    parser = argparse.ArgumentParser(prog="gpusim", parents=[common], description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, parents=[common], help=help_text)
        cmd.set_defaults(handler=handler)
        return cmd

    cmd = command("create", cmd_create, "create a simulated host")
    cmd.add_argument("--gpus", type=int, default=8)
    cmd.add_argument("--memory-mib", type=int, default=DEFAULT_TOTAL_MIB)
    cmd.add_argument("--reserved-mib", type=int, default=DEFAULT_RESERVED_MIB)
    cmd.add_argument("--name", default=DEFAULT_NAME)
    cmd.add_argument("--topology", choices=TOPOLOGIES, default="pcie")
    cmd.add_argument("--force", action="store_true", help="replace an existing host")
    cmd.add_argument("--orphans", choices=ORPHANS, default="reaper",
                     help="where a dead parent's children go: a subreaper above each tree, or PID 1 (init)")
    cmd.add_argument("--subreaper-title", default="", metavar="TITLE",
                     help="the subreaper's process title, e.g. '/lib/systemd/systemd --user'")

    cmd = command("vllm", cmd_vllm, "start a fake vLLM server tree holding GPUs")
    cmd.add_argument("--gpus", help="GPU indices, e.g. 0-7 or 4,5,6,7 (rank i uses the i-th)")
    cmd.add_argument("--tp", type=int, default=8, help="tensor parallel size (with --first-gpu)")
    cmd.add_argument("--first-gpu", type=int, default=0)
    cmd.add_argument("--mib", type=int, default=DEFAULT_WORKER_MIB, help="MiB each worker holds")
    cmd.add_argument("--engine-core", action="store_true", help="v1 tree: server -> VLLM::EngineCore -> workers")
    cmd.add_argument("--entrypoint", choices=ENTRYPOINTS, default="api_server")
    cmd.add_argument("--model", default=DEFAULT_MODEL)
    cmd.add_argument("--ignore-sigterm", action="store_true", help="workers ignore SIGTERM")
    cmd.add_argument("--port", type=int, help="serve /health on 127.0.0.1:PORT")
    cmd.add_argument("--wrapper", metavar="TITLE",
                     help="start the server below a wrapper with this title, which stays (see gpusim/wrapper.py)")
    cmd.add_argument("--sibling", metavar="TITLE", help="and a process beside the server, below the wrapper")
    cmd.add_argument("serve_args", nargs=argparse.REMAINDER,
                     help="after --, more of the server's flags (one server across hosts: --nnodes 2 --node-rank 1 --headless ...)")

    cmd = command("stuck", cmd_stuck, "a holder whose memory survives any signal (a zombie)")
    cmd.add_argument("--gpu", type=int, required=True)
    cmd.add_argument("--mib", type=int, default=4096)

    cmd = command("tree", cmd_tree, "any process tree of titled processes, some holding GPU memory (see gpusim/tree.py)")
    cmd.add_argument("--spec", required=True, help="the root node, as JSON")

    cmd = command("teardown-lag", cmd_teardown_lag, "a dead holder's memory stays listed for a while (0: off)")
    cmd.add_argument("--ms", type=int, required=True)

    cmd = command("incident", cmd_incident, "SIGKILL the API server and only the first worker")
    cmd.add_argument("--parent", type=int, help="PID of the API server (when several run)")

    for name, handler, help_text in (("lose-gpu", cmd_lose_gpu, "every query on the GPU answers GPU_IS_LOST"),
                                     ("restore-gpu", cmd_restore_gpu, "undo lose-gpu")):
        command(name, handler, help_text).add_argument("--gpu", type=int, required=True)

    cmd = command("foreign", cmd_foreign, "memory held by a PID from another PID namespace")
    cmd.add_argument("--gpu", type=int, required=True)
    cmd.add_argument("--mib", type=int, required=True)
    cmd.add_argument("--pid", type=int, help="default: above pid_max, so it can never exist here")
    cmd.add_argument("--na", action="store_true", help="per-process memory not available")

    cmd = command("orphan", cmd_orphan, "memory held by no process (0 clears)")
    cmd.add_argument("--gpu", type=int, required=True)
    cmd.add_argument("--mib", type=int, required=True)

    cmd = command("driver", cmd_driver, "unload or load the driver")
    group = cmd.add_mutually_exclusive_group(required=True)
    group.add_argument("--unload", dest="load", action="store_false")
    group.add_argument("--load", dest="load", action="store_true")

    command("status", cmd_status, "memory and live holders per GPU").add_argument("--json", action="store_true")
    command("env", cmd_env, "shell lines that point NVML and nvidia-smi at this host")
    command("cleanup", cmd_cleanup, "SIGKILL every recorded process, remove dead records").add_argument(
        "--remove", action="store_true", help="also delete the state directory")
    command("gc", cmd_gc, "remove dead allocation records")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(resolve_state(getattr(args, "state", None)), args)
    except StateError as error:
        print(f"gpusim: error: {error}", file=sys.stderr)
        return 1
