# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`python3 -m gpusim.treenode SPEC_FILE PATH`: one process of a `gpusim tree` (see tree.py).

It takes the title of its node (setproctitle, and `comm` as the kernel would set it for that program),
records itself, starts its children, holds its GPU memory, then waits for signals: the default action of
SIGTERM ends it, unless the node ignores SIGTERM or respawns (forks a child that allocates after a delay,
then exits; with `detach`, that child is a daemon in a session of its own whose parent is gone). Children
are reaped at once (SIGCHLD ignored), so a dead node never lingers as a zombie.

A node with `restart_children` is a supervisor: it reaps its children itself and, `delay` seconds after one
exits, starts it again (a new process, at most `limit` times in all, titled `title` when given), which holds
its memory `hold_delay` seconds after it started, as a restarted server would once its CUDA context is up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List

import setproctitle

from gpusim.allocs import register_own_alloc
from gpusim.devices import open_devices
from gpusim.procs import record_self
from gpusim.spawn import python3
from gpusim.statedir import StateDir, resolve_state

ROLE_TREE_NODE = "tree_node"
ROLE_RESPAWNED = "tree_respawned"


def node_at(spec: Dict[str, Any], path: List[int]) -> Dict[str, Any]:
    node = spec
    for index in path:
        node = node["children"][index]
    return node


def comm_of(node: Dict[str, Any]) -> str:
    """What the kernel's comm would be: the node's `comm`, else the base name of its program, cut to 15."""
    program = node["title"].split()[0].rsplit("/", 1)[-1]
    return str(node.get("comm") or program)[:15]


def take_identity(node: Dict[str, Any]) -> None:
    setproctitle.setproctitle(node["title"])
    with open("/proc/self/comm", "w", encoding="ascii", errors="replace") as handle:
        handle.write(comm_of(node))


def hold(state: StateDir, holds: List[Dict[str, Any]]) -> None:
    for item in holds:
        register_own_alloc(state, int(item["gpu"]), int(item["mib"]), tuple(item.get("flags", ())))


def announce(state: StateDir, tree_id: str, key: str) -> None:
    folder = state.root / "trees" / tree_id
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{key}.tmp.{os.getpid()}"
    tmp.write_text(f"{os.getpid()}\n")
    tmp.rename(folder / key)


def respawn(state: StateDir, node: Dict[str, Any]) -> None:
    """SIGTERM handler of a respawning node: fork a child that allocates after a delay, then exit.

    With `detach`, the child leaves the tree as a daemon does: it starts a session of its own (setsid), forks the
    process that allocates and exits at once, so that process is in no process group or session of the tree, and its
    parent is gone (the kernel gives it to whatever adopts orphans) before it holds anything. SIGTERM stays blocked
    until each forked process has set its own handling, so the inherited handler never runs twice.
    """
    plan = node["respawn"]
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    if os.fork() == 0:
        try:
            if plan.get("detach"):
                signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the intermediate: gone in a moment anyway
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
                os.setsid()
                if os.fork() != 0:
                    os._exit(0)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            record_self(state, ROLE_RESPAWNED)
            time.sleep(float(plan.get("delay", 0.3)))
            hold(state, plan.get("hold", node.get("hold", [])))
            while True:
                signal.pause()
        except BaseException:  # pylint: disable=broad-exception-caught  # a forked child must not return
            traceback.print_exc()
        finally:
            os._exit(1)
    os._exit(0)


def supervise(spec_file: str, path: List[int], children: List["subprocess.Popen[bytes]"], plan: Dict[str, Any]) -> None:
    """Restart each child that exits, `delay` seconds later, until `limit` restarts were made; then wait for signals."""
    left = int(plan.get("limit", 1))
    while left > 0:
        for index, child in enumerate(children):
            if left > 0 and child.poll() is not None:
                time.sleep(float(plan.get("delay", 0.1)))
                child_path = ".".join(str(p) for p in path + [index])
                argv = [python3(), "-m", "gpusim.treenode", spec_file, child_path, str(float(plan.get("hold_delay", 0.3)))]
                # pylint: disable-next=consider-using-with  # polled above, and reaped by it
                children[index] = subprocess.Popen(argv + ([plan["title"]] if plan.get("title") else []))
                left -= 1
        time.sleep(0.01)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    for child in children:
        child.poll()


def main() -> int:
    spec_file, path_text = sys.argv[1], sys.argv[2]
    hold_delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0  # a restarted child (see supervise)
    spec = json.loads(Path(spec_file).read_text())
    path = [int(part) for part in path_text.split(".") if part]
    node = node_at(spec["root"], path)
    if len(sys.argv) > 4:  # a restarted child that runs another program (`restart_children.title`)
        node = dict(node, title=sys.argv[4], comm=None)
    state = resolve_state(None)
    take_identity(node)
    record_self(state, ROLE_TREE_NODE)
    restart = node.get("restart_children")
    if not restart:
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    children = []
    for index, _child in enumerate(node.get("children", [])):
        child_path = ".".join(str(p) for p in path + [index])
        # pylint: disable-next=consider-using-with  # SIGCHLD is ignored (the kernel reaps it), or supervise() reaps it
        children.append(subprocess.Popen([python3(), "-m", "gpusim.treenode", spec_file, child_path]))
    time.sleep(hold_delay)
    hold(state, node.get("hold", []))
    for gpu in node.get("devices", []):  # the device files open without memory (a process NVML does not list)
        open_devices(state, int(gpu))
    if node.get("respawn"):
        signal.signal(signal.SIGTERM, lambda _number, _frame: respawn(state, node))
    elif node.get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    announce(state, spec["id"], node["key"])
    if restart:
        supervise(spec_file, path, children, restart)
    while True:
        signal.pause()


if __name__ == "__main__":
    raise SystemExit(main())
