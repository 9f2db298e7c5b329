# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""restart_vllm.yml on a bad day: a run that cannot finish stops nothing, check mode previews a change, a launch that
fails is undone. Real ansible-playbook runs on a simulated host with a healthy server; every verdict comes from
independent readings: the server's PID and start time, /health, the simulator's own view of the GPUs, the files.
"""

from __future__ import annotations

import json
import os
import re
import socket
import typing as t
import urllib.error
import urllib.request

from ansible_run import flat, recap, RESTART, run_playbook
from gpusim.api import pid_alive, starttime
from inventories import role_host_vars, write_role_inventory
from readings import assert_server_owns_gpus, health, holders, record, server_pid

EIGHT = list(range(8))

# (variables over a healthy TP=8 server's, the variable the failure must name). Each fails before the lock.
BAD_BEFORE_THE_HOST = [
    ({"vllm_server_tensor_parallel_size": "eight"}, "vllm_server_tensor_parallel_size"),
    ({"vllm_server_tensor_parallel_size": 4}, "vllm_server_tensor_parallel_size"),
    ({"vllm_server_tensor_parallel_size": 0}, "vllm_server_tensor_parallel_size"),
    ({"vllm_server_gpus": [0, 0, 1, 2, 3, 4, 5, 6]}, "vllm_server_gpus"),
    ({"vllm_server_gpus": [0, 1, 2, 3, 4, 5, 6, -1]}, "vllm_server_gpus"),
    ({"vllm_server_port": 70000}, "vllm_server_port"),
    ({"vllm_server_launch_mode": "docker"}, "vllm_server_launch_mode"),
    ({"vllm_server_env": ["NCCL_PROTO=LL"]}, "vllm_server_env"),
    ({"vllm_server_env": {"BAD=KEY": "1"}}, "vllm_server_env"),
    ({"vllm_server_env": {"": "1"}}, "vllm_server_env"),
    ({"vllm_server_env": {"NCCL_PROTO": "LL\u0000128"}}, "vllm_server_env"),
    ({"vllm_server_args": ["--max-model-len", "40\u000096"]}, "vllm_server_args"),
    ({"vllm_server_name": "../etc/x"}, "vllm_server_name"),
    ({"vllm_server_state": "running"}, "vllm_server_state"),
    ({"vllm_server_model": ""}, "vllm_server_model"),
    ({"vllm_server_command": []}, "vllm_server_command"),
    ({"gpuops_fleet_idle_threshold_mib": -1}, "gpuops_fleet_idle_threshold_mib"),
    ({"vllm_server_reclaim_grace": -1}, "vllm_server_reclaim_grace"),
    ({"vllm_server_reclaim_timeout": 0}, "vllm_server_reclaim_timeout"),
    ({"vllm_server_reclaim_match": [""]}, "vllm_server_reclaim_match"),
    ({"vllm_server_ready_timeout": 0}, "vllm_server_ready_timeout"),
    ({"vllm_server_ready_generate_timeout": -1}, "vllm_server_ready_generate_timeout"),
    ({"vllm_server_stop_timeout": -1}, "vllm_server_stop_timeout"),
    ({"vllm_server_drain_timeout": -5}, "vllm_server_drain_timeout"),
    ({"vllm_server_log_dir": "logs"}, "vllm_server_log_dir"),
    ({"vllm_server_state_dir": "state"}, "vllm_server_state_dir"),
    ({"vllm_server_systemd_user": "Bad User"}, "vllm_server_systemd_user"),
    ({"vllm_server_systemd_enabled": "maybe"}, "vllm_server_systemd_enabled"),
    ({"vllm_server_systemd_restart_sec": 0}, "vllm_server_systemd_restart_sec"),
    ({"vllm_server_systemd_start_limit_burst": 0}, "vllm_server_systemd_start_limit_burst"),
    # 60 s cannot hold 6 starts 30 s apart: the limit would never stop a crash loop
    ({"vllm_server_systemd_start_limit_interval_sec": 60}, "vllm_server_systemd_start_limit_interval_sec"),
    ({"vllm_server_lock_stale_after": 0}, "vllm_server_lock_stale_after"),
    ({"vllm_server_health_host": "127.0.0.1/x"}, "vllm_server_health_host"),
    # the container mode: an image is required; each of its variables named with its value
    ({"vllm_server_launch_mode": "container"}, 'vllm_server_container_image=""'),
    ({"vllm_server_launch_mode": "container", "vllm_server_container_image": "i", "vllm_server_container_runtime": "lxc"},
     "vllm_server_container_runtime"),
    ({"vllm_server_container_restart": "sometimes"}, "vllm_server_container_restart"),
    ({"vllm_server_container_name": "-x"}, 'vllm_server_container_name="-x"'),
    ({"vllm_server_container_cdi_kind": "gpu"}, 'vllm_server_container_cdi_kind="gpu"'),
    ({"vllm_server_container_network": "--privileged"}, 'vllm_server_container_network="--privileged"'),
]

# these need the host to judge them (its GPU count, a pattern gpu_reclaim compiles): the preflight, before the drain
BAD_ON_THIS_HOST = [
    ({"vllm_server_gpus": [0, 1, 2, 3, 4, 5, 6, 8]}, "vllm_server_gpus"),
    ({"vllm_server_gpus": [], "vllm_server_tensor_parallel_size": 9}, "vllm_server_tensor_parallel_size"),
    ({"vllm_server_reclaim_match": ["(unclosed"]}, "vllm_server_reclaim_match"),
]


class Healthy(t.NamedTuple):
    pid: int
    start: float
    workers: t.List[int]
    gpus: t.Dict[int, t.List[int]]
    files: t.Dict[str, t.Tuple[int, bytes]]


def files_of(host) -> t.Dict[str, t.Tuple[int, bytes]]:
    """Every file of the role's state directory: name -> (mode, content)."""
    found = {}
    for path in sorted((host.state / "role").rglob("*")):
        if path.is_file():
            found[str(path.relative_to(host.state))] = (path.stat().st_mode, path.read_bytes())
    return found


def healthy_server(host, tmp_path, **extra) -> t.Tuple[Healthy, t.Dict[str, t.Any]]:
    base = role_host_vars(host, host.port, vllm_server_tensor_parallel_size=8, vllm_server_gpus=EIGHT,
                          vllm_server_env={"NCCL_PROTO": "LL"}, **extra)
    inventory = write_role_inventory(tmp_path / "good.json", {host.name: base})
    run = run_playbook(RESTART, inventory)
    assert run.returncode == 0, run.stdout[-3000:]
    pid, workers = assert_server_owns_gpus(host, EIGHT, 8)
    log = host.state / "role" / ("vllm-%d.log" % host.port)
    files = {k: v for k, v in files_of(host).items() if not k.endswith(".log")}
    assert log.exists()
    return Healthy(pid, starttime(pid), workers, holders(host), files), base


def assert_untouched(host, before: Healthy) -> None:
    assert pid_alive(before.pid, before.start), "the healthy server (PID %d) was stopped" % before.pid
    assert all(pid_alive(w) for w in before.workers)
    assert health(host.port) == 200
    assert holders(host) == before.gpus
    assert server_pid(host) == before.pid  # the process on the port, and the role's record still names it
    assert record(host)["pid"] == before.pid


def host_line(output: str, host: str) -> str:
    """The summary's FAILED line of one host, up to the next host's line or the next task."""
    text = flat(output)
    start = text.find("%s: FAILED at " % host)
    assert start >= 0, "no FAILED line for %s in the summary: %s" % (host, text[-3000:])
    line = text[start:]
    end = re.search(r"\s-\s['\"]?[\w.-]+: (?:FAILED|NOT RESTARTED|UNCHANGED|RESTARTED|STARTED|STOPPED|CHECK MODE)|TASK \[|PLAY ", line[10:])
    return line[:end.start() + 10] if end else line


def test_bad_inventories_stop_nothing_on_a_healthy_server(fleet, tmp_path):
    """At least 20 bad inventories, each a host of one run (aliases of one simulated host): each fails naming its
    variable, and the healthy server is untouched, by PID, start time, /health, GPU holders and files."""
    (node,) = fleet("gpu-node-01")
    before, base = healthy_server(node, tmp_path)
    aliases = {"bad-%02d" % i: dict(base, **case[0]) for i, case in enumerate(BAD_BEFORE_THE_HOST)}
    inventory = write_role_inventory(tmp_path / "bad.json", aliases)
    run = run_playbook(RESTART, inventory, "--forks", str(len(aliases)))
    assert run.returncode != 0
    counters = recap(run.stdout)
    for i, (bad, needle) in enumerate(BAD_BEFORE_THE_HOST):
        alias = "bad-%02d" % i
        assert counters[alias]["failed"] >= 1, (alias, bad, counters.get(alias))
        line = host_line(run.stdout, alias)
        assert needle in line, "%s %s: the failure does not name %s: %s" % (alias, bad, needle, line)
    # the variable checks name the rule that failed, not every rule
    assert "vllm_server_systemd_user" not in host_line(run.stdout, "bad-05")
    assert_untouched(node, before)
    assert {k: v for k, v in files_of(node).items() if not k.endswith(".log")} == before.files

    for bad, needle in BAD_ON_THIS_HOST:
        inventory = write_role_inventory(tmp_path / "bad-host.json", {node.name: dict(base, **bad)})
        run = run_playbook(RESTART, inventory)
        assert run.returncode != 0, bad
        line = host_line(run.stdout, node.name)
        assert needle in line and "nothing was stopped" in line, (bad, line)
        assert_untouched(node, before)
        if bad.get("vllm_server_gpus"):
            assert "no GPU has index 8" in line, line


def test_check_mode_previews_a_drift_and_changes_nothing(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    before, base = healthy_server(node, tmp_path)
    inventory = write_role_inventory(tmp_path / "good.json", {node.name: base})
    state_before = node.status()
    run = run_playbook(RESTART, inventory, "--check", "--diff", "-e", "vllm_server_state=started",
                       "-e", json.dumps({"vllm_server_env": {"NCCL_PROTO": "LL128"}}))
    assert run.returncode == 0, run.stdout[-4000:]
    text = flat(run.stdout)
    assert "its configuration changed" in text
    assert re.search(r"would stop PID %d and launch .* with NCCL_PROTO=LL128" % before.pid, text), text[-3000:]
    assert_untouched(node, before)
    assert node.status() == state_before
    assert {k: v for k, v in files_of(node).items() if not k.endswith(".log")} == before.files
    # the preflight is a reading: ok, not changed
    assert re.search(r"TASK \[gpuops\.fleet\.vllm_server : Look for holders that a stop would leave[^\]]*\] \**\s*ok:", run.stdout), \
        run.stdout[-4000:]


def test_a_launch_that_hangs_is_undone_and_its_gpus_freed(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    hang = {"GPUOPS_SIM_STATE": str(node.state), "GPUOPS_SIM_FAIL_AT_START": "hang"}
    inventory = write_role_inventory(tmp_path / "hang.json", {node.name: role_host_vars(
        node, node.port, vllm_server_tensor_parallel_size=2, vllm_server_host_env=hang, vllm_server_ready_timeout=4)})
    run = run_playbook(RESTART, inventory)
    assert run.returncode != 0
    text = flat(run.stdout)
    assert "was not ready after 4 s" in text and "log|" in run.stdout, text[-3000:]
    assert "was stopped and GPU 0, 1 verified free" in text, text[-3000:]
    # nothing was taken over: no word of it, and no empty rendering of those words
    assert "leaves it for debugging)None" not in text and "stays stopped" not in text, text[-3000:]
    assert "Wait for /health" in text  # the step that failed first, not the undo
    assert all(g["used_mib"] == 0 and not g["holders"] for g in node.status()["gpus"])
    assert not (node.state / "role" / ("vllm-%d.json" % node.port)).exists()


def test_a_server_whose_engine_died_fails_ready_is_undone_and_not_kept_as_good(fleet, tmp_path):
    """/health and /v1/models answer, every completion is HTTP 500 EngineDeadError (the fake's engine died before its
    first request): the ready step's generation check fails the launch, naming itself and the server's answer; the
    launch is undone (nothing listens on the port, no GPU held, by the simulator's own reading), and the last known-good
    configuration on disk is still the healthy one's, byte for byte."""
    (node,) = fleet("gpu-node-01")
    before, base = healthy_server(node, tmp_path)
    last_good = node.state / "role" / ("vllm-%d.last-good" % node.port)
    good = last_good.read_bytes()
    assert json.loads(good)["env"].get("NCCL_PROTO") == "LL"
    dead = dict(base, vllm_server_env={"NCCL_PROTO": "LL128"}, vllm_server_ready_generate_timeout=20,
                vllm_server_host_env=dict(base["vllm_server_host_env"], GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS="0"))
    inventory = write_role_inventory(tmp_path / "dead.json", {node.name: dead})
    run = run_playbook(RESTART, inventory)
    assert run.returncode != 0, run.stdout[-3000:]
    line = host_line(run.stdout, node.name)
    assert "generation check failed" in line and "got HTTP 500" in line and "EngineDeadError" in line, line
    assert "was stopped and GPU 0, 1, 2, 3, 4, 5, 6, 7 verified free" in line, line
    assert "Wait for /health" in flat(run.stdout)  # the ready step failed, not the undo
    log = (node.state / "role" / ("vllm-%d.log" % node.port)).read_text()
    assert "EngineDeadError" in log  # the fake's own log: it got the completion and refused it
    # the faulty server is gone and keeps no GPU; the healthy one was replaced by the restart, as asked
    assert not pid_alive(before.pid, before.start)
    assert server_pid(node) is None
    assert all(g["used_mib"] == 0 and not g["holders"] for g in node.status()["gpus"]), node.status()
    assert last_good.read_bytes() == good  # the rollback target is still the healthy configuration


def complete(port: int, model: str) -> t.Tuple[int, t.Any]:
    """One short completion sent straight to the server on ``port``: (HTTP status, its JSON body, else its text)."""
    request = urllib.request.Request(
        "http://127.0.0.1:%d/v1/completions" % port, headers={"Content-Type": "application/json"},
        data=json.dumps({"model": model, "prompt": "hello", "max_tokens": 3, "ignore_eos": True}).encode())
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8", "replace")


def test_a_rerun_replaces_a_server_whose_engine_died_behind_a_live_health(fleet, tmp_path):
    """The fake's engine core dies after 3 completions (GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS=3, the same in every run:
    it is part of the configuration). A rerun with vllm_server_state=started must not take a server that answers /health
    but no completion for unchanged: --check says it would restart it and why, and touches nothing (same listener, PID
    and start time); the real rerun replaces it with a server that generates, naming EngineDeadError. A rerun on that
    working server leaves it alone (changed=0, same PID) after one completion of its own: the fake's counter shows it; with
    vllm_server_ready_generate_timeout=0 the dead one is left alone too (the check is skipped)."""
    (node,) = fleet("gpu-node-01")
    plain = role_host_vars(node, node.port)
    model = "zai-org/GLM-5-GGUF"  # the simulated fleet's vllm_server_model (gpusim.inventory)
    inventory = write_role_inventory(tmp_path / "dying.json", {node.name: dict(
        plain, vllm_server_tensor_parallel_size=2, vllm_server_gpus=[0, 1], vllm_server_ready_generate_timeout=20,
        vllm_server_host_env=dict(plain["vllm_server_host_env"], GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS="3"))})
    first = run_playbook(RESTART, inventory)
    assert first.returncode == 0, first.stdout[-3000:]
    old, old_workers = assert_server_owns_gpus(node, [0, 1], 2)
    old_start = starttime(old)
    # the ready step's completion was the 1st; the 2nd and 3rd generate, the 4th meets a dead engine behind a live /health
    assert complete(node.port, model)[0] == 200 and complete(node.port, model)[0] == 200
    status, body = complete(node.port, model)
    assert status == 500 and "EngineDeadError" in body, (status, body)
    assert health(node.port) == 200
    held = holders(node)

    check = run_playbook(RESTART, inventory, "--check", "-e", "vllm_server_state=started")
    assert check.returncode == 0, check.stdout[-4000:]
    text = flat(check.stdout)
    assert re.search(r"CHECK MODE: would be restarted \(the running server does not generate: HTTP 500.{0,800}?EngineDeadError", text), \
        text[-4000:]
    assert server_pid(node) == old and pid_alive(old, old_start) and all(pid_alive(w) for w in old_workers)
    assert holders(node) == held

    rerun = run_playbook(RESTART, inventory, "-e", "vllm_server_state=started")
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    text = flat(rerun.stdout)
    assert re.search(r"RESTARTED \(the running server does not generate: HTTP 500.{0,800}?EngineDeadError", text), text[-4000:]
    assert not pid_alive(old, old_start) and not any(pid_alive(w) for w in old_workers)
    new, _workers = assert_server_owns_gpus(node, [0, 1], 2)
    assert new != old
    new_start = starttime(new)
    # the new server generates: its ready step took the 1st completion, this is the 2nd
    status, body = complete(node.port, model)
    assert status == 200 and body["usage"]["completion_tokens"] >= 1 and body["choices"][0]["text"], body

    # a server that generates is left alone: the rerun's reading takes the 3rd completion, so the 4th meets a dead engine
    again = run_playbook(RESTART, inventory, "-e", "vllm_server_state=started")
    assert again.returncode == 0, again.stdout[-4000:]
    assert recap(again.stdout)[node.name]["changed"] == 0
    assert "UNCHANGED" in flat(again.stdout)
    assert server_pid(node) == new and pid_alive(new, new_start)
    status, body = complete(node.port, model)
    assert status == 500 and "EngineDeadError" in body, (status, body)

    # vllm_server_ready_generate_timeout=0 skips the check (a server that cannot generate): /health alone decides again
    skipped = run_playbook(RESTART, inventory, "-e", "vllm_server_state=started", "-e", "vllm_server_ready_generate_timeout=0")
    assert skipped.returncode == 0, skipped.stdout[-4000:]
    assert recap(skipped.stdout)[node.name]["changed"] == 0 and "UNCHANGED" in flat(skipped.stdout)
    assert server_pid(node) == new and pid_alive(new, new_start)


def test_a_launch_that_hangs_is_kept_when_asked(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    hang = {"GPUOPS_SIM_STATE": str(node.state), "GPUOPS_SIM_FAIL_AT_START": "hang"}
    inventory = write_role_inventory(tmp_path / "hang.json", {node.name: role_host_vars(
        node, node.port, vllm_server_host_env=hang, vllm_server_ready_timeout=4, vllm_server_keep_failed_server=True)})
    run = run_playbook(RESTART, inventory)
    assert run.returncode != 0
    text = flat(run.stdout)
    assert "was not ready after 4 s" in text and "was left as it is, with its GPUs" in text, text[-3000:]
    pid = server_pid(node)
    assert pid is not None and pid_alive(pid) and holders(node)[0]


def test_a_port_already_taken_is_refused_naming_its_holder(fleet, tmp_path):
    """Something that is not vLLM listens on the server's port (here: this test's own process): the run refuses before
    anything is stopped or launched, naming the process; it is not signalled (it is this test)."""
    (node,) = fleet("gpu-node-01")
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", node.port))
        squatter.listen(1)
        inventory = write_role_inventory(tmp_path / "port.json", {node.name: role_host_vars(node, node.port)})
        run = run_playbook(RESTART, inventory)
        assert run.returncode != 0
        text = flat(run.stdout)
        assert "nothing was stopped: port %d is held by PID %d (" % (node.port, os.getpid()) in text, text[-3000:]
        assert "which is not a vLLM server" in text, text[-3000:]
        assert all(g["used_mib"] == 0 and not g["holders"] for g in node.status()["gpus"])
        assert not (node.state / "role" / ("vllm-%d.json" % node.port)).exists()
    finally:
        squatter.close()
