# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`gpusim tree --spec JSON`: any process tree, each process titled as given, some holding GPU memory.

For the shapes real hosts have and a vLLM tree does not: a Ray node (raylet -> ray::JobSupervisor ->
/bin/sh -c ... -> python eval.py), a wrapper script, an MPS client, a holder that respawns. A node:

    {"key": "eval", "title": "python eval.py --shard 0", "comm": "python",
     "hold": [{"gpu": 0, "mib": 20000, "flags": ["mps"]}],
     "devices": [1], "ignore_term": false, "respawn": {"delay": 0.3, "hold": [...], "detach": false},
     "restart_children": {"delay": 0.1, "limit": 1, "hold_delay": 0.3, "title": "..."}, "children": [...]}

Only `title` is required; `key` defaults to the title. `devices` opens those GPUs' device files (see devices.py)
without holding memory. `restart_children` makes the node a supervisor that starts a child again after it
exits (see treenode.py). Prints {key: pid} once every node has started
and holds its memory. Every process is recorded in procs/, so `gpusim cleanup` ends it.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List

from gpusim import procfs
from gpusim.allocs import KNOWN_FLAGS
from gpusim.gpus import gpu_by_index, read_gpus
from gpusim.procs import read_records
from gpusim.spawn import kill_records, log_tail, python3, simulator_env, spawn_detached, wait_until
from gpusim.statedir import StateDir, StateError


def _check(node: Dict[str, Any], gpus: List[Any], keys: List[str]) -> None:
    if not isinstance(node, dict) or not str(node.get("title", "")).strip():
        raise StateError(f"tree: every node needs a non-empty title: {node!r}")
    node.setdefault("key", node["title"])
    if "/" in node["key"] or node["key"].startswith("."):
        raise StateError(f"tree: key {node['key']!r} may not contain '/' or start with '.'")
    keys.append(node["key"])
    holds = list(node.get("hold", [])) + list((node.get("respawn") or {}).get("hold", []))
    for item in holds:
        gpu_by_index(gpus, int(item["gpu"]))
        unknown = set(item.get("flags", ())) - set(KNOWN_FLAGS)
        if unknown:
            raise StateError(f"tree: unknown allocation flags {sorted(unknown)}")
    for gpu in node.get("devices", []):
        gpu_by_index(gpus, int(gpu))
    for child in node.get("children", []):
        _check(child, gpus, keys)


def spawn_tree(state: StateDir, root: Dict[str, Any], timeout: float = 20.0) -> Dict[str, int]:
    keys: List[str] = []
    _check(root, read_gpus(state.require()), keys)
    if len(set(keys)) != len(keys):
        raise StateError(f"tree: keys must be unique: {keys}")
    tree_id = f"{os.getpid()}-{len(list((state.root / 'trees').glob('*'))) if (state.root / 'trees').exists() else 0}"
    folder = state.root / "trees" / tree_id
    folder.mkdir(parents=True, exist_ok=True)
    spec_file = folder / "spec.json"
    spec_file.write_text(json.dumps({"id": tree_id, "root": root}))
    log_name = f"tree-{tree_id}"
    reaper = spawn_detached(state, [python3(), "-m", "gpusim.treenode", str(spec_file), ""], simulator_env(state, {}), log_name)

    def started() -> bool:
        return all((folder / key).exists() for key in keys)

    if not wait_until(lambda: started() or not reaper.is_running(), timeout) or not started():
        tree = procfs.descendants(reaper.pid)
        kill_records([record for record in read_records(state) if record.pid in tree] + [reaper])
        raise StateError(f"the tree did not start:\n{log_tail(state, log_name)}")
    return {key: int((folder / key).read_text()) for key in keys}
