# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet's command line: start, stop, inspect and fault nodes of an SSH fleet."""

from __future__ import annotations

import argparse
import json
import sys
import typing as t
from pathlib import Path

from gpusim.fleet import inventory, lifecycle
from gpusim.fleet.record import FleetRecord, load
from gpusim.fleet.system import FleetError


def _record(directory: str) -> FleetRecord:
    rec = load(Path(directory))
    if rec is None:
        raise FleetError("no fleet is recorded in %s" % directory)
    return rec


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gpusim.fleet", description=__doc__)
    parser.add_argument("--dir", default="build/fleet", help="the fleet's folder: record, keys, inventory, nodes")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("up", help="start N nodes (a fleet left in --dir is torn down first) and write inventory.yml")
    start.add_argument("--nodes", type=int, default=4)
    start.add_argument("--gpus", type=int, default=8, help="simulated GPUs per node")
    start.add_argument("--python", help="interpreter of the nodes and of the inventory (default: this one)")
    sub.add_parser("down", help="end every recorded process, delete the namespaces and interfaces")
    sub.add_parser("status", help="one JSON line per node")
    for name, text in (("stop-sshd", "make a node unreachable"), ("start-sshd", "make it reachable again")):
        sub.add_parser(name, help=text).add_argument("node", help="node name or number")
    run = sub.add_parser("exec", help="run a command inside a node (its own PID, mount and network namespaces)")
    run.add_argument("node")
    run.add_argument("argv", nargs=argparse.REMAINDER)
    gpusim = sub.add_parser("gpusim", help="run `gpusim ARGS --state <node's GPUs>` inside a node")
    gpusim.add_argument("node")
    gpusim.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def main(argv: t.Optional[t.List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "up":
            rec = lifecycle.up(Path(args.dir), args.nodes, args.gpus, args.python)
            path = inventory.write(rec)
            for row in lifecycle.status(rec):
                print("%-12s %-15s %s" % (row["name"], row["address"], row["sshd"]))
            print("inventory: %s\nteardown:  PYTHONPATH=simulator %s -m gpusim.fleet --dir %s down" % (
                path, rec.python, rec.dir))
        elif args.command == "down":
            rec = load(Path(args.dir))
            if rec is None:
                print("no fleet recorded in %s: nothing to do" % args.dir)
                return 0
            print("ended: %s" % ", ".join(lifecycle.down(rec)))
        elif args.command == "status":
            for row in lifecycle.status(_record(args.dir)):
                print(json.dumps(row))
        elif args.command == "stop-sshd":
            lifecycle.stop_sshd(_record(args.dir), args.node)
        elif args.command == "start-sshd":
            lifecycle.start_sshd(_record(args.dir), args.node)
        elif args.command in ("exec", "gpusim"):
            rec = _record(args.dir)
            words = [w for w in (args.argv if args.command == "exec" else args.args) if w != "--"] or ["true"]
            if args.command == "exec":
                proc = lifecycle.node_exec(rec, args.node, words)
            else:
                proc = lifecycle.gpusim_on(rec, args.node, *words)
            sys.stdout.write(proc.stdout)
            sys.stderr.write(proc.stderr)
            return proc.returncode
    except FleetError as error:
        print("gpusim.fleet: %s" % error, file=sys.stderr)
        return 1
    return 0
