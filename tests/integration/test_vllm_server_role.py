# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role gpuops.fleet.vllm_server through real `ansible-playbook playbooks/restart_vllm.yml` runs on simulated hosts.

Outcomes are judged by independent readings: the simulator's own view of each GPU (gpusim status), the liveness
of each PID, the server's /proc entries and its HTTP answers, never by the role's own summary alone. A server is
the process that listens on the host's port (server_pid), never the PID the role wrote into its record.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ansible_run import flat, recap, RESTART, run_playbook, start_playbook
from gpusim.api import pid_alive, simulator_environ, starttime
from inventories import inventory_for
from readings import assert_server_owns_gpus, environ, holders, server_pid, stream_in_flight

MIB = 93029
HOLDER = Path(__file__).resolve().parent / "holder.py"


def test_incident_to_verified_servers_then_idempotent_then_new_env(fleet, tmp_path, canaries):
    node1, node2 = fleet("gpu-node-01", "gpu-node-02")
    old1 = node1.gpusim_json("vllm", "--tp", "8", "--mib", str(MIB))
    node1.gpusim("incident")
    old2 = node2.gpusim_json("vllm", "--tp", "4", "--first-gpu", "4", "--mib", "61000")
    # a bystander next to the server on the same host, on a GPU the server does not use
    bystander = subprocess.Popen([sys.executable, str(HOLDER), "--gpu", "0", "--mib", "7000"],
                                 env=simulator_environ(dict(os.environ, GPUOPS_SIM_STATE=str(node2.state))), stdout=subprocess.PIPE)
    try:
        assert bystander.stdout.readline().strip() == b"holding"
        inventory = inventory_for(tmp_path, [node1, node2], {
            "gpu-node-01": {"vllm_server_tensor_parallel_size": 8, "vllm_server_env": {"NCCL_PROTO": "LL"}},
            "gpu-node-02": {"vllm_server_tensor_parallel_size": 4, "vllm_server_gpus": [4, 5, 6, 7]},
        })
        run = run_playbook(RESTART, inventory)
        assert run.returncode == 0, run.stdout[-4000:]
        for pid in [old1["parent"], *old1["workers"], old2["parent"], *old2["workers"]]:
            assert not pid_alive(pid), "old PID %d survived the restart" % pid
        server1, workers1 = assert_server_owns_gpus(node1, range(8), 8)
        server2, workers2 = assert_server_owns_gpus(node2, [4, 5, 6, 7], 4)
        started = {pid: starttime(pid) for pid in [server1, server2, *workers1, *workers2]}
        assert environ(server1)["NCCL_PROTO"] == "LL"
        assert environ(server1)["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
        assert "NCCL_PROTO" not in environ(server2) and environ(server2)["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
        assert holders(node2)[0] == [bystander.pid] and bystander.poll() is None
        assert "651203 MiB freed" in flat(run.stdout)  # 7 workers x 93,029 MiB, as the simulator held them

        again = run_playbook(RESTART, inventory, "-e", "vllm_server_state=started")
        assert again.returncode == 0, again.stdout[-4000:]
        counters = recap(again.stdout)
        assert counters["gpu-node-01"]["changed"] == 0 and counters["gpu-node-02"]["changed"] == 0, again.stdout[-3000:]
        assert "UNCHANGED" in again.stdout
        # the same processes as before the second run (PID and start time: nothing was restarted in between)
        assert assert_server_owns_gpus(node1, range(8), 8) == (server1, workers1)
        assert assert_server_owns_gpus(node2, [4, 5, 6, 7], 4) == (server2, workers2)
        assert all(pid_alive(pid, start) for pid, start in started.items())

        changed = run_playbook(RESTART, inventory, "-e", "vllm_server_state=started", "--limit", "gpu-node-01",
                               "-e", json.dumps({"vllm_server_env": {"NCCL_PROTO": "LL128"}}))
        assert changed.returncode == 0, changed.stdout[-4000:]
        new1 = assert_server_owns_gpus(node1, range(8), 8)[0]
        assert new1 != server1 and not pid_alive(server1) and not any(pid_alive(w) for w in workers1)
        assert environ(new1)["NCCL_PROTO"] == "LL128"
        assert server_pid(node2) == server2 and pid_alive(server2, started[server2])  # outside --limit: untouched
        assert canaries.alive() and bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_stop_state_frees_the_gpus(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    inventory = inventory_for(tmp_path, [node], vllm_server_tensor_parallel_size=2)
    assert run_playbook(RESTART, inventory).returncode == 0
    server, workers = assert_server_owns_gpus(node, [0, 1], 2)
    stop = run_playbook(RESTART, inventory, "-e", "vllm_server_state=stopped")
    assert stop.returncode == 0, stop.stdout[-3000:]
    assert not pid_alive(server) and not any(pid_alive(w) for w in workers)
    assert [g["used_mib"] for g in node.status()["gpus"]][:2] == [0, 0]
    assert not (node.state / "role" / ("vllm-%d.json" % node.port)).exists()


def test_crash_at_start_fails_fast_with_the_log_tail(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    inventory = inventory_for(tmp_path, [node], {node.name: {
        "vllm_server_host_env": {"GPUOPS_SIM_STATE": str(node.state), "GPUOPS_SIM_FAIL_AT_START": "crash",
                                 "GPUOPS_SIM_FAIL_AFTER_S": "1"}}}, vllm_server_ready_timeout=600)
    started = time.monotonic()
    run = run_playbook(RESTART, inventory)
    took = time.monotonic() - started
    assert run.returncode != 0
    assert "FAILED at" in flat(run.stdout) and "exited" in flat(run.stdout)
    assert "log|" in run.stdout, run.stdout[-3000:]  # the server's own last lines, in the summary
    assert took < 300, "a dead server must fail the wait long before the 600 s ready timeout (took %.0f s)" % took
    assert all(g["used_mib"] == 0 for g in node.status()["gpus"])


def test_foreign_holder_fails_before_anything_is_stopped(fleet, tmp_path, canaries):
    (node,) = fleet("gpu-node-01")
    inventory = inventory_for(tmp_path, [node], vllm_server_tensor_parallel_size=2, vllm_server_gpus=[0, 1])
    assert run_playbook(RESTART, inventory).returncode == 0
    server, workers = assert_server_owns_gpus(node, [0, 1], 2)
    intruder = subprocess.Popen([sys.executable, str(HOLDER), "--gpu", "1", "--mib", "4000"],
                                env=simulator_environ(dict(os.environ, GPUOPS_SIM_STATE=str(node.state))), stdout=subprocess.PIPE)
    try:
        assert intruder.stdout.readline().strip() == b"holding"
        run = run_playbook(RESTART, inventory)
        assert run.returncode != 0
        assert "nothing was stopped" in flat(run.stdout)
        failure = flat(run.stdout).split("nothing was stopped", 1)[1]
        assert "pid %d (python" % intruder.pid in failure and "GPU 1" in failure, run.stdout[-3000:]
        assert "vllm_server_reclaim_all_holders" in failure
        # the refusal names what blocks, not the server's own workers (which the stop would end)
        assert not any(str(w) in failure for w in workers), failure[:2000]
        assert intruder.poll() is None
        assert pid_alive(server) and all(pid_alive(w) for w in workers), "the running server was stopped anyway"
        assert canaries.alive()
    finally:
        intruder.kill()
        intruder.wait()


def test_lost_gpu_fails_the_host_and_names_it(fleet, tmp_path):
    node, healthy = fleet("gpu-node-01", "gpu-node-02")
    node.gpusim("lose-gpu", "--gpu", "1")
    inventory = inventory_for(tmp_path, [node, healthy], vllm_server_tensor_parallel_size=2)
    run = run_playbook(RESTART, inventory)
    assert run.returncode != 0
    assert re.search(r"gpu-node-01: FAILED at .*GPU 1", flat(run.stdout)), run.stdout[-3000:]
    assert_server_owns_gpus(healthy, [0, 1], 2)  # one host's failure does not stop the others


@pytest.mark.parametrize("bad, needle", [
    ({"vllm_server_tensor_parallel_size": "eight"}, "vllm_server_tensor_parallel_size"),
    ({"vllm_server_gpus": [0, 0]}, "vllm_server_gpus"),
    ({"vllm_server_port": 70000}, "vllm_server_port"),
    ({"vllm_server_launch_mode": "docker"}, "vllm_server_launch_mode"),
    ({"vllm_server_env": ["NCCL_PROTO=LL"]}, "vllm_server_env"),
    ({"vllm_server_name": "../etc/x"}, "vllm_server_name"),
    ({"vllm_server_state": "running"}, "vllm_server_state"),
])
def test_bad_variables_fail_before_anything_is_touched(fleet, tmp_path, bad, needle):
    (node,) = fleet("gpu-node-01")
    tree = node.gpusim_json("vllm", "--tp", "2", "--mib", "5000")
    inventory = inventory_for(tmp_path, [node], {node.name: bad}, vllm_server_tensor_parallel_size=2)
    run = run_playbook(RESTART, inventory)
    assert run.returncode != 0
    assert needle in run.stdout, run.stdout[-3000:]
    assert all(pid_alive(pid) for pid in [tree["parent"], *tree["workers"]])


def test_shell_metacharacters_reach_the_server_as_one_word(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    canary_file = tmp_path / "injected"
    model = "org/my model; touch %s $HOME `id` %%h \"q\"" % canary_file
    inventory = inventory_for(tmp_path, [node], vllm_server_model=model,
                              vllm_server_args=["--served-model-name", "m$(touch %s)" % canary_file],
                              vllm_server_served_model_name="m$(touch %s)" % canary_file)
    run = run_playbook(RESTART, inventory)
    assert run.returncode == 0, run.stdout[-3000:]
    server = server_pid(node)
    assert server is not None
    argv = psutil.Process(server).cmdline()
    assert argv[3] == model and argv[argv.index("--served-model-name") + 1] == "m$(touch %s)" % canary_file
    assert not canary_file.exists()


def test_concurrent_runs_on_one_server_the_second_fails_at_once(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    inventory = inventory_for(tmp_path, [node], {node.name: {
        "vllm_server_host_env": {"GPUOPS_SIM_STATE": str(node.state), "GPUOPS_SIM_STARTUP_DELAY_S": "8"}}})
    first = start_playbook(RESTART, inventory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lock = node.state / "role" / ("vllm-%d.lock" % node.port)
        deadline = time.monotonic() + 60
        while not lock.exists() and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.1)
        assert lock.exists(), "the first run never took the lock"
        second = run_playbook(RESTART, inventory)
        assert second.returncode != 0
        assert "locked by another run" in flat(second.stdout) and "running 'Restart vLLM servers, rolling'" in flat(second.stdout)
        output = first.communicate(timeout=240)[0]
        assert first.returncode == 0, output[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert_server_owns_gpus(node, [0], 1)
    assert not lock.exists()


@pytest.mark.parametrize("max_tokens, drain_timeout, cut", [(150, 60, 0), (2000, 1, 1)])
def test_drain_waits_for_requests_in_flight(fleet, tmp_path, max_tokens, drain_timeout, cut):
    (node,) = fleet("gpu-node-01")
    inventory = inventory_for(tmp_path, [node], vllm_server_drain_timeout=drain_timeout)
    assert run_playbook(RESTART, inventory).returncode == 0
    client, out = stream_in_flight(node.port, max_tokens)
    run = run_playbook(RESTART, inventory)
    client.join(timeout=120)
    assert not client.is_alive()
    assert run.returncode == 0, run.stdout[-3000:]
    # what the client saw decides what was cut: a stream without [DONE] and short of its tokens
    cut_seen = 0 if out["done"] and out["chunks"] == max_tokens else 1
    assert cut_seen == cut, out
    if cut:
        assert out["chunks"] < max_tokens, out
        assert "cut %d request(s)" % cut_seen in flat(run.stdout)  # the summary agrees with the client
    else:
        assert "cut " not in flat(run.stdout).rsplit("One line per host", maxsplit=1)[-1]
        assert "error" not in out, out


def test_rolling_restart_halts_after_a_failed_batch(fleet, tmp_path):
    first, second = fleet("gpu-node-01", "gpu-node-02")
    first.gpusim("lose-gpu", "--gpu", "0")
    inventory = inventory_for(tmp_path, [first, second], vllm_restart_serial=1, vllm_restart_max_fail_percentage=0)
    run = run_playbook(RESTART, inventory)
    assert run.returncode != 0
    text = flat(run.stdout)
    assert "gpu-node-01: FAILED at" in text
    assert "gpu-node-02: NOT RESTARTED: halted" in text, text[-2000:]
    assert not (second.state / "role" / ("vllm-%d.json" % second.port)).exists()
    assert recap(run.stdout)["gpu-node-02"]["failed"] == 1


def test_check_mode_changes_nothing_and_says_what_it_would_do(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    tree = node.gpusim_json("vllm", "--tp", "8", "--mib", str(MIB))
    node.gpusim("incident")
    before = node.status()
    inventory = inventory_for(tmp_path, [node], vllm_server_tensor_parallel_size=8)
    run = run_playbook(RESTART, inventory, "--check")
    assert run.returncode == 0, run.stdout[-3000:]
    assert "CHECK MODE: would be started" in flat(run.stdout) and "would end 7 process(es) holding 651203 MiB" in flat(run.stdout)
    assert node.status() == before
    assert all(pid_alive(pid) for pid in tree["workers"][1:])
    assert not (node.state / "role" / ("vllm-%d.json" % node.port)).exists()
