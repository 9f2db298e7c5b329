# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A restart's start-up by phase, as restart_vllm.yml sums it up per host, judged by the fake vLLM's own record of each
start-up (STATE/startups.jsonl: the phases it ran, whether it compiled or loaded from its compile cache):

- a forced restart with weights, compile and graph knobs shows each phase in the summary line;
- the next forced restart of the same configuration loads its compiled graphs from the cache (the summary says
  "cache hit", the fake did not compile), and a compile-relevant change compiles again;
- a log in an unknown format gives the total only, and the run passes;
- a start-up that hangs after its weights on the second launch fails at about twice the first start-up's time, not at
  vllm_server_ready_timeout, naming the log's last phase;
- the standalone ready entry point, on a server that started well before, keeps no start-up (NAME.startups unchanged).
"""

from __future__ import annotations

import json
import re
import time
import typing as t
from pathlib import Path

from ansible_run import RESTART, run_playbook
from inventories import inventory_for
from readings import assert_server_owns_gpus, server_pid
from gpusim.api import starttime

KNOBS = {"GPUOPS_SIM_WEIGHTS_S": "1.0", "GPUOPS_SIM_COMPILE_S": "3.0", "GPUOPS_SIM_GRAPHS_S": "1.0",
         "GPUOPS_SIM_INIT_S": "0.2", "GPUOPS_SIM_COMPILE_LOAD_S": "0.2"}


def startups(state: Path) -> t.List[t.Dict[str, t.Any]]:
    """The fake vLLM's own record of its start-ups on this simulated host, oldest first."""
    path = state / "startups.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def summary_line(output: str, host: str, start: str) -> str:
    """The summary's line of ``host`` that begins with ``start`` (the callback may wrap it: joined again)."""
    found = re.findall(r"%s:\s+(%s[^'\"]*)" % (re.escape(host), re.escape(start)), output)
    assert found, output[-4000:]
    return re.sub(r"\s*\n\s*", " ", found[-1]).strip()


def restart(tmp_path: Path, node: t.Any, env: t.Mapping[str, str], **host_vars: t.Any) -> t.Any:
    inventory = inventory_for(tmp_path, [node], {node.name: dict({"vllm_server_env": dict(env)}, **host_vars)})
    began = time.monotonic()
    proc = run_playbook(RESTART, inventory)
    proc.took = time.monotonic() - began
    return proc


def test_phases_in_the_summary_then_a_cache_hit_then_a_new_compile(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    cold = restart(tmp_path, node, KNOBS)
    assert cold.returncode == 0, cold.stdout[-4000:]
    line = summary_line(cold.stdout, node.name, "start-up ")
    assert re.search(r"start-up [0-9.]+ s: weights 1\.0 s \(0\.23 GiB\), compile: compiled, 3\.0 s, graphs 1\.0 s \(0\.45 GiB\),"
                     r" engine init [0-9.]+ s, API up", line), line
    first = startups(node.state)
    assert len(first) == 1 and first[0]["compiled"] is True and first[0]["outcome"] == "ready"
    server = assert_server_owns_gpus(node, [0], 1)[0]
    assert first[0]["pid"] == server

    warm = restart(tmp_path, node, KNOBS)  # forced: the same configuration starts again
    assert warm.returncode == 0, warm.stdout[-4000:]
    assert "compile: cache hit, 0.2 s" in summary_line(warm.stdout, node.name, "start-up ")
    second = startups(node.state)[1]
    assert second["pid"] == assert_server_owns_gpus(node, [0], 1)[0] != server
    assert second["compiled"] is False and second["cache"] == "hit" and second["cache_dir"] == first[0]["cache_dir"]

    changed = restart(tmp_path, node, KNOBS, vllm_server_args=["--max-model-len", "4096"])  # compile-relevant
    assert changed.returncode == 0, changed.stdout[-4000:]
    assert "compile: compiled, 3.0 s" in summary_line(changed.stdout, node.name, "start-up ")
    third = startups(node.state)[2]
    assert third["compiled"] is True and third["cache_dir"] != first[0]["cache_dir"]


def test_an_unknown_log_format_gives_the_total_only(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    proc = restart(tmp_path, node, dict(KNOBS, GPUOPS_SIM_STARTUP_LOG="none"))
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert re.search(r"start-up [0-9.]+ s \(no start-up phases in the log\)", summary_line(proc.stdout, node.name, "start-up "))
    assert startups(node.state)[0]["compiled"] is True  # it did compile: only its log does not say so


def test_a_hang_after_the_weights_fails_at_twice_the_usual_start_up(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    env = dict(KNOBS, GPUOPS_SIM_HANG_AFTER_PHASE="weights", GPUOPS_SIM_HANG_FROM_STARTUP="2")
    limits = {"vllm_server_ready_timeout": 120, "vllm_server_ready_timeout_floor": 1}
    first = restart(tmp_path, node, env, **limits)
    assert first.returncode == 0, first.stdout[-4000:]
    usual = float(re.search(r"ready in ([0-9.]+) s", first.stdout).group(1))
    assert usual >= 4.0  # weights + compile + graphs + init

    second = restart(tmp_path, node, env, **limits)
    assert second.returncode != 0, second.stdout[-4000:]
    hung = startups(node.state)[1]
    assert hung["outcome"] == "hung" and [phase["name"] for phase in hung["phases"]] == ["weights"]
    failed = re.search(r"was not ready after ([0-9.]+) s \(2 x the slowest of the last 1 start-up\(s\)", second.stdout)
    assert failed, second.stdout[-4000:]
    assert abs(float(failed.group(1)) - 2 * usual) < 0.2 * usual
    assert "the log's last start-up phase: weights" in second.stdout
    assert second.took < 60  # far from the 120 s ceiling: stop, launch, twice the usual start-up, undo


def test_the_ready_entry_point_on_a_running_server_keeps_no_start_up(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    launched = restart(tmp_path, node, KNOBS)
    assert launched.returncode == 0, launched.stdout[-4000:]
    (history,) = list((node.state / "role").glob("*.startups"))
    kept = history.read_bytes()
    assert len(json.loads(kept)) == 1
    pid = server_pid(node)
    start = starttime(pid)
    time.sleep(8.0)  # the server has run a while: its age is no start-up
    ready = run_playbook(Path(__file__).parent / "playbooks" / "ready_only.yml", tmp_path / "inventory.json")
    assert ready.returncode == 0, ready.stdout[-4000:]
    assert server_pid(node) == pid and starttime(pid) == start  # the same server, waited for and checked
    assert history.read_bytes() == kept  # nothing kept: before the fix, its age (8 s and more) was kept as a start-up
    assert len(startups(node.state)) == 1  # the fake started once
