# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""LoRA adapters (vllm_server_lora_adapters) through real `ansible-playbook playbooks/restart_vllm.yml` runs.

A server started with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True gets a changed adapter set through its API,
without a restart: judged by the fake vLLM's own record of loads, unloads and completions per adapter
($GPUOPS_SIM_STATE/lora.jsonl, simulator/fakevllm/vllm/_lora.py), the PID and start time of the process on the port,
the GPUs' holders (the simulator's allocations) and /v1/models. Any other change, and any change on a server without
runtime updating, still restarts it. On a server with VLLM_API_KEY the loads and their proofs carry the key (the fake
refuses /v1/* without it), which neither the play's output (-v) nor the fake's record shows.
"""

from __future__ import annotations

import http.client
import json
import re
import sys
import typing as t
from pathlib import Path

from ansible_run import ansible_env, BIN, flat, recap, REPO, RESTART, run_playbook
from gpusim.api import pid_alive, starttime
from inventories import inventory_for
from readings import holders, server_pid

HOST = "gpu-node-01"
RUNTIME = {"vllm_server_args": ["--enable-lora", "--max-loras", "4"],
           "vllm_server_env": {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}}


def _adapter_dirs(tmp_path: Path, *names: str) -> t.Dict[str, str]:
    paths = {}
    for name in names:
        path = tmp_path / "adapters" / name
        path.mkdir(parents=True, exist_ok=True)
        (path / "adapter_config.json").write_text("{}")
        paths[name] = str(path)
    return paths


def _set(paths: t.Mapping[str, str], *names: str) -> t.List[t.Dict[str, str]]:
    return [{"name": name, "path": paths.get(name, "/nonexistent/adapters/%s" % name)} for name in names]


def _run(inventory: Path, adapters: t.List[t.Dict[str, str]], *extra: str, env: t.Optional[t.Dict[str, str]] = None):
    return run_playbook(RESTART, inventory, "-e", json.dumps({"vllm_server_lora_adapters": adapters}), *extra, env=env)


def _events(node: t.Any, pid: int, after: int = 0) -> t.List[t.Tuple[str, str, bool]]:
    """The fake's record for the server ``pid``: (event, name, ok), from the ``after``-th line of the host's record."""
    path = node.state / "lora.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [(e["event"], e["name"], e["ok"]) for e in map(json.loads, lines[after:]) if e["pid"] == pid]


def _record_length(node: t.Any) -> int:
    path = node.state / "lora.jsonl"
    return len(path.read_text().splitlines()) if path.is_file() else 0


def _get(port: int, path: str) -> t.Tuple[int, t.Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read() or b"null")
    finally:
        conn.close()


def _served(port: int) -> t.Dict[str, str]:
    """/v1/models' adapters: name -> root."""
    status, body = _get(port, "/v1/models")
    assert status == 200, body
    return {entry["id"]: entry["root"] for entry in body["data"] if entry.get("parent")}


def _complete(port: int, model: str) -> t.Tuple[int, t.Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/v1/completions", json.dumps({"model": model, "prompt": "a b", "max_tokens": 2}),
                     {"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def _counting_python(tmp_path: Path) -> Path:
    """bench/_host_python.py: logs one line per module execution on the host (as test_restart_module_count.py)."""
    path = tmp_path / "host-python"
    path.write_text("#!%s -S\n%s" % (sys.executable, (REPO / "bench" / "_host_python.py").read_text()))
    path.chmod(0o755)
    return path


def _results(output: str) -> int:
    counters = recap(output)[HOST]
    return counters["ok"] + counters["skipped"] + counters["failed"]


def test_adapters_change_at_run_time_without_a_restart(fleet, tmp_path):
    (node,) = fleet(HOST)
    paths = _adapter_dirs(tmp_path, "sql", "chat", "math")
    inventory = inventory_for(tmp_path, [node], {HOST: dict(RUNTIME)}, vllm_server_state="started",
                              ansible_python_interpreter=str(_counting_python(tmp_path)))
    log = tmp_path / "modules.jsonl"
    env = ansible_env(GPUOPS_BENCH_MODULE_LOG=str(log), GPUOPS_BENCH_REAL_PYTHON=str(BIN / "python3"))
    first = _run(inventory, [], env=env)
    assert first.returncode == 0, first.stdout[-4000:]
    pid = server_pid(node)
    assert pid is not None
    start, gpus = starttime(pid), holders(node)
    assert _served(node.port) == {}

    # two adapters added: no stop, same PID and start time, the GPUs' holders untouched; each loaded and proven by a
    # completion in its name, by the fake's own record
    log.write_text("")
    mark = _record_length(node)
    added = _run(inventory, _set(paths, "sql", "chat"), "--diff", env=env)
    assert added.returncode == 0, added.stdout[-4000:]
    assert server_pid(node) == pid and pid_alive(pid, start) and holders(node) == gpus
    assert _events(node, pid, mark) == [("load", "sql", True), ("generate", "sql", True),
                                        ("load", "chat", True), ("generate", "chat", True)]
    assert _served(node.port) == {"sql": paths["sql"], "chat": paths["chat"]}
    for name in ("sql", "chat"):
        status, body = _complete(node.port, name)
        assert status == 200 and body["model"] == name and body["usage"]["completion_tokens"] == 2
    assert recap(added.stdout)[HOST]["changed"] == 1, recap(added.stdout)
    assert "loaded sql (%s), chat (%s)" % (paths["sql"], paths["chat"]) in flat(added.stdout)
    assert "+LoRA adapters: chat, sql" in added.stdout
    # the adapter path costs no more than a rerun where nothing changes: one module run (the reading), as many results
    assert not re.search(r"TASK \[gpuops\.fleet\.vllm_server : (Stop|Launch|Reclaim)", added.stdout)
    assert _results(added.stdout) <= 8, "\n".join(re.findall(r"^(TASK .*|ok: .*|skipping: .*|changed: .*)$", added.stdout, re.M))
    ran = [json.loads(line)["module"] for line in log.read_text().splitlines() if line.strip()]
    assert len(ran) <= 1, ran
    assert "Lock the server for this run" not in added.stdout  # the reading took the lock itself, for the change only
    assert not list((node.state / "role").glob("*.lock"))  # the lock's task released its lock

    # the same set again: nothing changes, nothing is loaded
    mark = _record_length(node)
    again = _run(inventory, _set(paths, "sql", "chat"), env=env)
    assert again.returncode == 0, again.stdout[-4000:]
    assert recap(again.stdout)[HOST]["changed"] == 0
    assert _events(node, pid, mark) == [] and pid_alive(pid, start) and server_pid(node) == pid

    # check mode previews a change and makes none
    mark = _record_length(node)
    preview = _run(inventory, _set(paths, "chat", "math"), "--check", "--diff")
    assert preview.returncode == 0, preview.stdout[-4000:]
    assert "would load math (%s); would unload sql" % paths["math"] in flat(preview.stdout)
    assert "-LoRA adapters: chat, sql" in preview.stdout and "+LoRA adapters: chat, math" in preview.stdout
    assert _events(node, pid, mark) == [] and _served(node.port) == {"sql": paths["sql"], "chat": paths["chat"]}
    assert not list((node.state / "role").glob("*.lock"))

    # one removed
    mark = _record_length(node)
    removed = _run(inventory, _set(paths, "chat"))
    assert removed.returncode == 0, removed.stdout[-4000:]
    assert _events(node, pid, mark) == [("unload", "sql", True)]
    assert _served(node.port) == {"chat": paths["chat"]} and pid_alive(pid, start) and holders(node) == gpus
    assert _complete(node.port, "sql")[0] == 404
    assert recap(removed.stdout)[HOST]["changed"] == 1

    # a load that fails: the adapters loaded before it in the same run are unloaded again, the one removed is loaded
    # again, the server serves what it served, its PID unchanged, and the run fails naming the adapter and the answer
    mark = _record_length(node)
    failed = _run(inventory, _set(paths, "math", "ghost"))
    assert failed.returncode != 0
    assert _events(node, pid, mark) == [("unload", "chat", True), ("load", "math", True), ("generate", "math", True),
                                        ("load", "ghost", False), ("unload", "math", True), ("load", "chat", True)]
    assert _served(node.port) == {"chat": paths["chat"]} and pid_alive(pid, start) and server_pid(node) == pid
    said = flat(failed.stdout)
    assert "LoRA adapter ghost failed to load from /nonexistent/adapters/ghost" in said, said[-3000:]
    assert "No adapter found" in said and "nothing was stopped" in said
    assert not list((node.state / "role").glob("*.lock"))

    # another change with an adapter change: a restart, whose new server serves the adapters from its start
    mark = _record_length(node)
    both = _run(inventory, _set(paths, "chat", "math"), "-e", '{"vllm_server_env_overrides": {"NCCL_PROTO": "LL"}}')
    assert both.returncode == 0, both.stdout[-4000:]
    new = server_pid(node)
    assert new is not None and new != pid and not pid_alive(pid, start)
    assert _served(node.port) == {"chat": paths["chat"], "math": paths["math"]}
    status, body = _get(node.port, "/sim/lora")
    assert status == 200 and [(e["event"], e["name"], e["source"]) for e in body["events"]][:2] == [
        ("load", "chat", "start"), ("load", "math", "start")]


def test_without_runtime_updating_an_adapter_change_restarts(fleet, tmp_path):
    (node,) = fleet(HOST)
    paths = _adapter_dirs(tmp_path, "sql", "chat")
    inventory = inventory_for(tmp_path, [node], {HOST: {"vllm_server_args": ["--enable-lora", "--max-loras", "4"]}},
                              vllm_server_state="started")
    first = _run(inventory, _set(paths, "sql"))
    assert first.returncode == 0, first.stdout[-4000:]
    pid = server_pid(node)
    assert pid is not None and _served(node.port) == {"sql": paths["sql"]}
    assert "--lora-modules" in Path("/proc/%s/cmdline" % pid).read_text()
    start = starttime(pid)

    same = _run(inventory, _set(paths, "sql"))
    assert same.returncode == 0 and recap(same.stdout)[HOST]["changed"] == 0
    assert server_pid(node) == pid and pid_alive(pid, start)

    changed = _run(inventory, _set(paths, "sql", "chat"))
    assert changed.returncode == 0, changed.stdout[-4000:]
    new = server_pid(node)
    assert new != pid and not pid_alive(pid, start)
    assert _served(node.port) == {"sql": paths["sql"], "chat": paths["chat"]}
    # the endpoints do not exist there: every load was a start's (--lora-modules), none through the API
    record = [json.loads(line) for line in (node.state / "lora.jsonl").read_text().splitlines()]
    assert {(e["source"], e["event"]) for e in record} == {("start", "load")}
    assert [(e["name"], e["pid"]) for e in record][-2:] == [("sql", new), ("chat", new)]


def test_adapters_on_a_keyed_server_are_sent_with_its_key_and_never_shown(fleet, tmp_path):
    key = "sk-lora-key-8c1f"
    (node,) = fleet(HOST)
    paths = _adapter_dirs(tmp_path, "sql")
    keyed = dict(RUNTIME, vllm_server_env=dict(RUNTIME["vllm_server_env"], VLLM_API_KEY=key))
    inventory = inventory_for(tmp_path, [node], {HOST: keyed}, vllm_server_state="started")
    first = _run(inventory, [])
    assert first.returncode == 0, first.stdout[-4000:]
    pid = server_pid(node)
    assert pid is not None
    start = starttime(pid)
    assert _get(node.port, "/v1/models")[0] == 401  # the fake refuses /v1/* without the key: a load without it fails

    mark = _record_length(node)
    added = _run(inventory, _set(paths, "sql"), "-v")
    output = added.stdout + added.stderr
    assert added.returncode == 0, output[-4000:]
    # loaded through the API and proven by a completion in its name, both accepted by the keyed server, no restart
    assert _events(node, pid, mark) == [("load", "sql", True), ("generate", "sql", True)]
    assert server_pid(node) == pid and pid_alive(pid, start)
    assert "loaded sql (%s)" % paths["sql"] in flat(added.stdout)
    assert key not in output, output[max(0, output.find(key) - 1500):output.find(key) + 300]
    assert key not in (node.state / "lora.jsonl").read_text()


def test_a_rollback_restores_the_last_good_adapters_without_a_restart(fleet, tmp_path):
    (node,) = fleet(HOST)
    paths = _adapter_dirs(tmp_path, "sql", "chat")
    inventory = inventory_for(tmp_path, [node], {HOST: dict(RUNTIME)}, vllm_server_state="started")
    good = _run(inventory, _set(paths, "sql"))  # a launch: its configuration, adapters included, is the last known-good
    assert good.returncode == 0, good.stdout[-4000:]
    pid = server_pid(node)
    assert pid is not None and _served(node.port) == {"sql": paths["sql"]}
    start = starttime(pid)
    last_good = next((node.state / "role").glob("*.last-good")).read_bytes()

    changed = _run(inventory, _set(paths, "chat"))  # at run time: the last known-good configuration is not this one
    assert changed.returncode == 0, changed.stdout[-4000:]
    assert _served(node.port) == {"chat": paths["chat"]} and server_pid(node) == pid

    # the rollback, with the new list still in the variables: the last known-good list comes back through the API,
    # the same process serves it, nothing stopped or launched
    mark = _record_length(node)
    back = run_playbook(Path(__file__).parent / "playbooks" / "rollback_only.yml", inventory, "-e",
                        json.dumps({"vllm_server_lora_adapters": _set(paths, "chat")}))
    assert back.returncode == 0, back.stdout[-4000:]
    assert _events(node, pid, mark) == [("unload", "chat", True), ("load", "sql", True), ("generate", "sql", True)]
    assert _served(node.port) == {"sql": paths["sql"]}
    assert server_pid(node) == pid and pid_alive(pid, start)
    assert not re.search(r"TASK \[gpuops\.fleet\.vllm_server : (Stop|Launch|Reclaim)", back.stdout)
    shown = back.stdout[back.stdout.index("vllm_server_rollback_result"):]
    assert re.search(r"^\s+action: adapters$", shown, re.M), shown[:3000]
    assert next((node.state / "role").glob("*.last-good")).read_bytes() == last_good
