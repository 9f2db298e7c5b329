# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One vLLM server across two simulated hosts (vllm_server_nodes_group), through real ansible-playbook runs of
restart_vllm.yml: the fake vLLM's head serves only once its other rank joined over TCP, so a server that answers is a
whole one. Each outcome is read independently, per host: the listener on the port (the head), the TCP connection to
the head's rendezvous port (the headless rank), /proc, and the simulator's own view of who holds each host's GPUs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import typing as t

import psutil
import pytest

from ansible_run import BIN, flat, recap, REPO, RESTART, run_playbook, start_playbook
from gpusim.api import FakeVllm, free_port, pid_alive, role_host_vars, role_inventory, starttime, wait_for
from readings import health, holders, listening_pid
from report_fleet import console_errors, dump_dom
from simhost import hosts_with_ports

GROUP = "glm5_a"
CLEANUP = REPO / "playbooks" / "gpu_cleanup.yml"
ROLLOUT = REPO / "playbooks" / "rollout_vllm.yml"
REPORT = REPO / "playbooks" / "gpu_report.yml"
FAST = ("-e", "gpu_reclaim_timeout=10 gpu_reclaim_grace=2")


def group_inventory(tmp_path, nodes, group_vars=None, per_host=None, extra_groups=None, **all_vars: t.Any):
    """restart_vllm.yml's inventory: every node in vllm_servers, and in GROUP (in rank order) with the server's variables
    on that group; the head's port on every node."""
    port = nodes[0].port
    hosts = {n.name: role_host_vars(n.state, port, **(per_host or {}).get(n.name, {})) for n in nodes}
    # restart_vllm.yml's defaults: one host first, then a quarter, halting at the first failed batch; its batches are
    # grown to hold the group whole
    common = dict(all_vars)
    inventory = role_inventory(hosts, python=str(BIN / "python3"), **common)
    server = {"vllm_server_nodes_group": GROUP, "vllm_server_node_address": "127.0.0.1", "vllm_server_nodes_port": free_port(),
              "vllm_server_tensor_parallel_size": 1, "vllm_server_pipeline_parallel_size": 2}
    server.update(group_vars or {})
    inventory["all"]["children"][GROUP] = {"hosts": {n.name: {} for n in nodes}, "vars": server}
    inventory["all"]["children"].update(extra_groups or {})
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(inventory, indent=2))
    return path, server


def rank_pid(master_port: int) -> t.Optional[int]:
    """The headless rank: the process with a connection to the head's rendezvous port (the kernel's socket table)."""
    found = {c.pid for c in psutil.net_connections(kind="tcp")
             if c.raddr and c.raddr.port == master_port and c.status == psutil.CONN_ESTABLISHED and c.pid}
    return found.pop() if len(found) == 1 else None


def tree(pid: int) -> t.Set[int]:
    return {pid} | {child.pid for child in psutil.Process(pid).children(recursive=True)}


def assert_whole(nodes, server, gpus_each: int = 1, launched: bool = True) -> t.Tuple[int, int]:
    """The head listens, the headless rank is joined to it, and each one's own workers hold exactly its host's GPUs."""
    head, node2 = nodes
    head_pid = listening_pid(head.port)
    headless = rank_pid(server["vllm_server_nodes_port"])
    assert head_pid and headless and head_pid != headless, (head_pid, headless)
    for host, pid in ((head, head_pid), (node2, headless)):
        held = holders(host)
        mine = tree(pid)
        for gpu in range(8):
            if gpu < gpus_each:
                assert held[gpu] and set(held[gpu]) <= mine, (host.name, gpu, held, pid)
            else:
                assert not held[gpu], (host.name, gpu, held)
    if launched:  # the role's own ranks (a rank started by hand has the environment it was given)
        assert psutil.Process(headless).environ().get("VLLM_HOST_IP") == "127.0.0.1"
    return head_pid, headless


def test_one_engine_across_two_hosts_launch_rerun_drift_and_a_killed_rank(make_host, tmp_path):
    nodes = hosts_with_ports(make_host, "gpu-node-01", "gpu-node-02")
    inventory, server = group_inventory(tmp_path, nodes)
    run = run_playbook(RESTART, inventory)
    assert run.returncode == 0, run.stdout[-5000:]
    head_pid, headless = assert_whole(nodes, server)
    argv = psutil.Process(headless).cmdline()
    assert argv[argv.index("--node-rank") + 1] == "1" and "--headless" in argv and "--pipeline-parallel-size" in argv
    head_argv = psutil.Process(head_pid).cmdline()
    assert head_argv[head_argv.index("--node-rank") + 1] == "0" and "--headless" not in head_argv

    # unchanged: nothing changes on either host, the same processes serve
    again = run_playbook(RESTART, inventory)
    assert again.returncode == 0, again.stdout[-4000:]
    assert {host: counts["changed"] for host, counts in recap(again.stdout).items()} == {"gpu-node-01": 0, "gpu-node-02": 0}, again.stdout[-3000:]
    assert assert_whole(nodes, server) == (head_pid, headless)

    # the fleet page, as a person sees it in a browser: the group is one server, whole, its ranks by host; the headless
    # host's server is healthy (its /health is its head's), and no host has a problem
    out = tmp_path / "report"
    shown = run_playbook(REPORT, inventory, "-e", "gpu_report_dir=%s" % out)
    assert shown.returncode == 0, shown.stdout[-4000:]
    dom, _raw, stderr = dump_dom(out / "index.html")
    assert not console_errors(stderr), console_errors(stderr)
    row = dom.find("tr", class_="group")
    assert row.attrs["data-group"] == "glm5_a" and row.attrs["data-whole"] == "yes", row.text()
    assert [(r.attrs["data-rank"], r.attrs["data-host"]) for r in row.find_all("span", class_="rank")] == [("0", "gpu-node-01"), ("1", "gpu-node-02")]
    assert "PID %s" % head_pid in row.text() and "PID %s" % headless in row.text()
    assert not dom.find_all("li", class_="problem"), [li.text() for li in dom.find_all("li", class_="problem")]
    rank_row = dom.find("section", id="host-gpu-node-02").find("tr", class_="server")
    assert "rank 1 of 2 of glm5_a (headless" in rank_row.text() and "HTTP 200" in rank_row.text(), rank_row.text()

    # a headless rank killed -9 (its workers orphaned, holding node 2's GPU): the head answers 503; an unforced run
    # replaces the whole server, and the orphans are reclaimed
    os.kill(headless, signal.SIGKILL)
    assert wait_for(lambda: not pid_alive(headless), 10, 0.1)
    assert holders(nodes[1])[0], "the orphaned worker still holds node 2's GPU"
    healed = run_playbook(RESTART, inventory)
    assert healed.returncode == 0, healed.stdout[-5000:]
    text = flat(healed.stdout)
    assert "gpu-node-01: RESTARTED (it does not answer /health (HTTP 503))" in text, text[-3000:]
    assert "gpu-node-02: STARTED (no managed server ran)" in text and "gpu-node-02: stopped 1 process(es)" in text, text[-3000:]
    new_head, new_headless = assert_whole(nodes, server)
    assert new_head != head_pid and not pid_alive(head_pid)  # the head was replaced too: a server is one

    # drift on the group's variables: both hosts restart with it
    drifted, _same = group_inventory(tmp_path, nodes, dict(server, vllm_server_args=["--max-model-len", "4096"]))
    preview = run_playbook(RESTART, drifted, "--check")  # check mode: says what it would do, changes nothing anywhere
    assert preview.returncode == 0, preview.stdout[-5000:]
    said = flat(preview.stdout)
    assert "would stop PID %s and launch" % new_head in said and "would stop PID %s and launch" % new_headless in said, said[-3000:]
    assert assert_whole(nodes, server) == (new_head, new_headless)
    moved = run_playbook(RESTART, drifted)
    assert moved.returncode == 0, moved.stdout[-5000:]
    final_head, final_headless = assert_whole(nodes, server)
    assert final_head != new_head and final_headless != new_headless
    assert "4096" in psutil.Process(final_headless).cmdline() and "4096" in psutil.Process(final_head).cmdline()

    # the head killed -9: its workers are orphans on node 1, and the headless rank lives on, holding node 2's GPU and
    # waiting for a head (vLLM #32136); an unforced run stops that rank, reclaims the orphans and starts the server whole
    head_workers = tree(final_head) - {final_head}
    os.kill(final_head, signal.SIGKILL)
    assert wait_for(lambda: not pid_alive(final_head), 10, 0.1)
    assert set(holders(nodes[0])[0]) <= head_workers and pid_alive(final_headless)
    revived = run_playbook(RESTART, drifted)
    assert revived.returncode == 0, revived.stdout[-5000:]
    assert not pid_alive(final_headless) and not any(pid_alive(pid) for pid in head_workers)
    last_head, last_headless = assert_whole(nodes, server)
    assert last_head != final_head and last_headless != final_headless


def test_data_parallel_across_two_hosts(make_host, tmp_path):
    nodes = hosts_with_ports(make_host, "gpu-node-01", "gpu-node-02")
    inventory, server = group_inventory(tmp_path, nodes, {"vllm_server_pipeline_parallel_size": 1, "vllm_server_data_parallel_size": 4})
    run = run_playbook(RESTART, inventory)
    assert run.returncode == 0, run.stdout[-5000:]
    _head, headless = assert_whole(nodes, server, gpus_each=2)
    argv = psutil.Process(headless).cmdline()
    assert argv[argv.index("--data-parallel-start-rank") + 1] == "2" and argv[argv.index("--data-parallel-size-local") + 1] == "2"


def test_a_refused_preflight_on_node_2_stops_nothing_on_node_1(make_host, tmp_path):
    nodes = hosts_with_ports(make_host, "gpu-node-01", "gpu-node-02")
    inventory, server = group_inventory(tmp_path, nodes)
    assert run_playbook(RESTART, inventory).returncode == 0
    head_pid, headless = assert_whole(nodes, server)
    # a colleague's job on node 2's GPU 0 (not vLLM-shaped: a stop would leave it holding the GPU)
    job = nodes[1].spawn_tree({"key": "job", "title": "python3 train.py", "hold": [{"gpu": 0, "mib": 2000}]})
    try:
        run = run_playbook(RESTART, inventory, "-e", "vllm_server_state=restarted")
        text = flat(run.stdout)
        assert run.returncode != 0, text[-3000:]
        assert "nothing was stopped on any host of server group glm5_a: gpu-node-02" in text, text[-4000:]
        assert pid_alive(head_pid) and pid_alive(headless) and pid_alive(job["job"])
        assert assert_whole_but(nodes, server, job["job"]) == (head_pid, headless)
    finally:
        os.kill(job["job"], signal.SIGKILL)


def assert_whole_but(nodes, server, extra: int) -> t.Tuple[int, int]:
    """As assert_whole, but node 2's GPU 0 also holds ``extra``."""
    head_pid = listening_pid(nodes[0].port)
    headless = rank_pid(server["vllm_server_nodes_port"])
    assert set(holders(nodes[0])[0]) <= tree(head_pid)
    assert set(holders(nodes[1])[0]) <= tree(headless) | {extra}
    return head_pid, headless


@pytest.mark.parametrize("change, needle", [
    ({"group_vars": {"vllm_server_pipeline_parallel_size": 1}},
     "vllm_server_tensor_parallel_size=1 x vllm_server_pipeline_parallel_size=1 (1 workers) does not split over the 2 hosts"),
    ({"per_host": {"gpu-node-02": {"vllm_server_port": 1}}}, "vllm_server_port differs between the hosts of server group glm5_a"),
    ({"extra_groups": {"glm5_b": {"hosts": {"gpu-node-02": {}}}}},
     "gpu-node-02 is a host of server group glm5_a but its vllm_server_nodes_group is \"glm5_b\""),
    ({"limit": "gpu-node-01"}, "server group glm5_a is changed whole, but gpu-node-02 is not in this run"),
])
def test_a_bad_group_is_refused_before_anything_is_touched(make_host, tmp_path, change, needle):
    nodes = hosts_with_ports(make_host, "gpu-node-01", "gpu-node-02")
    extra = change.get("extra_groups")
    if extra:  # glm5_b's server variables: node 2's group is glm5_b, so glm5_a holds a host of another server group
        extra["glm5_b"]["vars"] = {"vllm_server_nodes_group": "glm5_b"}
    inventory, _server = group_inventory(tmp_path, nodes, change.get("group_vars"), change.get("per_host"), extra)
    args = ["--limit", change["limit"]] if "limit" in change else []
    run = run_playbook(RESTART, inventory, *args)
    text = flat(run.stdout)
    assert run.returncode != 0 and needle in text, text[-4000:]
    for node in nodes:
        assert not (node.state / "role").exists() or not list((node.state / "role").glob("*.json"))  # no server record
        assert not any(holders(node).values())


def in_bash(server: FakeVllm, log) -> "subprocess.Popen[bytes]":
    """A live bash that runs the server as its child and stays after it, as a shell in a tmux pane does."""
    with open(log, "ab") as out:
        return subprocess.Popen(["bash", "-c", shlex.join(server.argv) + "; sleep 3600"], env=dict(server.env),  # pylint: disable=consider-using-with
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def end(shell: "subprocess.Popen[bytes]") -> None:
    """End a shell this test started, and what it still runs, by its Popen handle."""
    if shell.poll() is None:
        for child in psutil.Process(shell.pid).children(recursive=True):
            child.kill()
        shell.kill()
    shell.wait(10)


def test_a_server_across_two_hosts_started_by_hand_is_taken_over_as_one(make_host, tmp_path):
    """Each rank started by hand in a shell on its host (the head on the port, the headless rank joined to it): the run
    takes both over - the head found on the port, the headless rank by its flags (joined to the group's head address) -
    stops both trees, leaves both shells, and launches the group's own server."""
    nodes = hosts_with_ports(make_host, "gpu-node-01", "gpu-node-02")
    inventory, server = group_inventory(tmp_path, nodes)
    ranks = ["--pipeline-parallel-size", "2", "--nnodes", "2", "--master-addr", "127.0.0.1",
             "--master-port", str(server["vllm_server_nodes_port"])]
    head = FakeVllm(nodes[0], tmp_path / "head.log", gpus="0", port=nodes[0].port, model="zai-org/GLM-5-GGUF", args=ranks + ["--node-rank", "0"])
    rank = FakeVllm(nodes[1], tmp_path / "rank.log", gpus="0", model="zai-org/GLM-5-GGUF", args=ranks + ["--node-rank", "1", "--headless"])
    shells = [in_bash(head, tmp_path / "head-shell.log"), in_bash(rank, tmp_path / "rank-shell.log")]
    try:
        assert wait_for(lambda: health(nodes[0].port) == 200, 60, 0.2), "the hand-started head never served"
        old_head, old_rank = assert_whole(nodes, server, launched=False)
        old = tree(old_head) | tree(old_rank)
        run = run_playbook(RESTART, inventory)
        text = flat(run.stdout)
        assert run.returncode == 0, text[-5000:]
        assert not [pid for pid in old if pid_alive(pid)], "left running"
        assert all(shell.poll() is None for shell in shells), "a shell of a server taken over was ended"
        new_head, new_rank = assert_whole(nodes, server)
        assert not {new_head, new_rank} & old
        assert "taken over: PID %s" % old_head in text and "taken over: PID %s" % old_rank in text, text[-4000:]
    finally:
        for shell in shells:
            end(shell)


def test_a_hand_started_server_across_more_hosts_than_the_group_is_refused(make_host, tmp_path):
    """A server across 3 hosts started by hand, two of them the group's: taking it over would leave its third rank
    holding a GPU on a host the run does not touch; refused naming both counts, nothing stopped on any host."""
    nodes = hosts_with_ports(make_host, "gpu-node-01", "gpu-node-02", "gpu-node-03")
    inventory, server = group_inventory(tmp_path, nodes[:2])
    ranks = ["--pipeline-parallel-size", "3", "--nnodes", "3", "--master-addr", "127.0.0.1",
             "--master-port", str(server["vllm_server_nodes_port"])]
    servers = [FakeVllm(node, tmp_path / ("rank%d.log" % rank), gpus="0", port=nodes[0].port if rank == 0 else None,
                        args=ranks + ["--node-rank", str(rank)] + (["--headless"] if rank else [])) for rank, node in enumerate(nodes)]
    shells = [in_bash(one, tmp_path / ("shell%d.log" % rank)) for rank, one in enumerate(servers)]
    try:
        assert wait_for(lambda: health(nodes[0].port) == 200, 60, 0.2), "the hand-started head never served"
        running = {pid: starttime(pid) for node in nodes for pid in holders(node)[0]}
        assert len(running) == 3
        run = run_playbook(RESTART, inventory)
        text = flat(run.stdout)
        assert run.returncode != 0 and "nothing was stopped" in text, text[-4000:]
        assert "a server across 3 hosts" in text and "vllm_server_nodes_group=glm5_a holds 2" in text, text[-4000:]
        assert all(pid_alive(pid, started) for pid, started in running.items()) and health(nodes[0].port) == 200
    finally:
        for shell in shells:
            end(shell)


def test_fleet_cleanup_leaves_a_live_headless_rank_and_takes_one_whose_head_is_gone(make_host, tmp_path):
    """gpu_cleanup.yml on the headless node: while its head serves, the rank's workers are a live server's (nothing
    ended); once the head's host lost its server (killed -9, whole tree), the rank retries for ever holding its GPU:
    its workers are orphans, ended, and the GPU verified free by the simulator."""
    nodes = hosts_with_ports(make_host, "gpu-node-01", "gpu-node-02")
    inventory, server = group_inventory(tmp_path, nodes)
    assert run_playbook(RESTART, inventory).returncode == 0
    head_pid, headless = assert_whole(nodes, server)
    workers = tree(headless) - {headless}
    kept = run_playbook(CLEANUP, inventory, "--limit", "gpu-node-02", *FAST)
    assert kept.returncode == 0, kept.stdout[-4000:]
    assert all(pid_alive(pid) for pid in workers) and set(holders(nodes[1])[0]) <= workers
    for pid in sorted(tree(head_pid), reverse=True):  # the head's host lost its server: every process of it
        os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: rank_pid(server["vllm_server_nodes_port"]) is None, 20, 0.2), "the rank never saw its head go"
    assert pid_alive(headless) and set(holders(nodes[1])[0]) <= workers  # it keeps its workers and retries
    cleaned = run_playbook(CLEANUP, inventory, "--limit", "gpu-node-02", *FAST)
    text = flat(cleaned.stdout)
    assert cleaned.returncode == 0, text[-4000:]
    assert not any(pid_alive(pid) for pid in workers) and not holders(nodes[1])[0], holders(nodes[1])


def test_a_group_run_killed_after_its_head_stopped_is_finished_by_the_next_run(make_host, tmp_path):
    """ansible-playbook SIGKILLed (with its task workers) once the head of the group had stopped: each host's lock is
    left by a dead run; the next, unforced run takes both locks over and starts the whole server again."""
    nodes = hosts_with_ports(make_host, "gpu-node-01", "gpu-node-02")
    inventory, server = group_inventory(tmp_path, nodes)
    assert run_playbook(RESTART, inventory).returncode == 0
    head_pid, headless = assert_whole(nodes, server)
    proc = start_playbook(RESTART, inventory, "-e", "vllm_server_state=restarted", stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_for(lambda: not pid_alive(head_pid), 120, 0.05), "the forced run never stopped the head"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # this test's own ansible-playbook, its session and workers
        proc.wait(30)
    assert list((nodes[0].state / "role").glob("*.lock")), "the killed run left no lock to take over"
    rerun = run_playbook(RESTART, inventory)
    assert rerun.returncode == 0, rerun.stdout[-5000:]
    assert "took over the lock" in flat(rerun.stdout + rerun.stderr), flat(rerun.stdout + rerun.stderr)[-3000:]
    new_head, new_headless = assert_whole(nodes, server)
    assert new_head != head_pid and not pid_alive(headless)

    # and a stop: the head first, then the headless rank; every GPU of both hosts free, by the simulator
    stopped = run_playbook(RESTART, inventory, "-e", "vllm_server_state=stopped", "-v")
    assert stopped.returncode == 0, stopped.stdout[-4000:]
    said = flat(stopped.stdout)
    # the headless host's stop waited until its head no longer answered (vllm_process's head_stopped)
    assert re.search(r"head_stopped: gone: true url: http://127\.0\.0\.1:%d/health" % nodes[0].port, said), said[-4000:]
    assert not pid_alive(new_head) and not pid_alive(new_headless)
    assert not any(holders(nodes[0]).values()) and not any(holders(nodes[1]).values())


ROLLOUT_LOAD = {"vllm_server_benchmark_input_len": 16, "vllm_server_benchmark_output_len": 64, "vllm_server_benchmark_num_requests": 4,
                "vllm_server_benchmark_concurrency": 2, "vllm_server_benchmark_warmup_requests": 1, "vllm_server_benchmark_repeats": 3}


def two_groups(tmp_path, nodes):
    """glm5_a on the first two hosts, glm5_b on the last two: each group's port is its head's, each its own nodes port."""
    groups = {"glm5_a": nodes[:2], "glm5_b": nodes[2:]}
    hosts = {n.name: role_host_vars(n.state, members[0].port) for members in groups.values() for n in members}
    inventory = role_inventory(hosts, python=str(BIN / "python3"), **ROLLOUT_LOAD)
    for name, members in groups.items():
        inventory["all"]["children"][name] = {"hosts": {n.name: {} for n in members}, "vars": {
            "vllm_server_nodes_group": name, "vllm_server_node_address": "127.0.0.1", "vllm_server_nodes_port": free_port(),
            "vllm_server_tensor_parallel_size": 1, "vllm_server_pipeline_parallel_size": 2}}
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(inventory, indent=2))
    return path, {name: members[0].port for name, members in groups.items()}


def group_pids(nodes, ports) -> t.Dict[str, t.Optional[int]]:
    """Each host's server: the listener of its group's head, or the process holding its GPU 0's top (a headless rank)."""
    found: t.Dict[str, t.Optional[int]] = {}
    for node in nodes:
        held = holders(node)[0]
        found[node.name] = psutil.Process(held[0]).ppid() if held else None
    return found


def test_a_rollout_over_two_groups_measures_each_head_and_rolls_a_regressing_group_back_whole(make_host, tmp_path):
    """restart_vllm.yml's default batches (one host, then a quarter) grow to whole groups; rollout_vllm.yml's canary is
    the whole first group, measured on its head: LL128 regresses, so both of its hosts are rolled back, and the second
    group is never touched."""
    nodes = hosts_with_ports(make_host, "gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04")
    inventory, ports = two_groups(tmp_path, nodes)
    launched = run_playbook(RESTART, inventory)
    assert launched.returncode == 0, launched.stdout[-5000:]
    assert all(health(port) == 200 for port in ports.values())
    before = group_pids(nodes, ports)
    assert all(before.values()), before
    run = run_playbook(ROLLOUT, inventory, "-e", '{"vllm_server_env_overrides": {"NCCL_PROTO": "LL128"}}',
                       "-e", "vllm_rollout_threshold_pct=2", "-e", "vllm_rollout_results_dir=%s" % (tmp_path / "results"),
                       timeout=900)
    text = flat(run.stdout)
    assert run.returncode != 0 and "rollout halted" in text and "REGRESSION" in text, text[-4000:]
    after = group_pids(nodes, ports)
    for node in nodes[:2]:  # the canary group: rolled back whole, its old environment, serving again
        assert after[node.name] and after[node.name] != before[node.name], (node.name, before, after)
        assert "NCCL_PROTO" not in psutil.Process(after[node.name]).environ()
    assert health(ports["glm5_a"]) == 200
    for node in nodes[2:]:  # the next group: never touched
        assert after[node.name] == before[node.name], node.name
    data = json.loads((tmp_path / "results" / "report.json").read_text())
    assert [h["host"] for h in data["batches"][0]["hosts"]] == ["gpu-node-01"]  # the head, measured for its group
    assert data["batches"][0]["hosts"][0]["verdict"] == "regression"
    assert sorted((r["host"], r["status"]) for r in data["rollbacks"]) == [("gpu-node-01", "ok"), ("gpu-node-02", "ok")]


def test_a_launch_that_fails_on_one_host_is_undone_on_every_host(make_host, tmp_path):
    """The new configuration's headless rank crashes at start on gpu-node-02: its head never serves, so the group cannot
    come up; every host fails, each undoes its own launch (no server process, every GPU free by the simulator), and
    neither host's last known-good configuration changes."""
    nodes = hosts_with_ports(make_host, "gpu-node-01", "gpu-node-02")
    inventory, server = group_inventory(tmp_path, nodes)
    assert run_playbook(RESTART, inventory).returncode == 0
    assert_whole(nodes, server)
    good = {node.name: sorted((node.state / "role").glob("*.last-good"))[0].read_bytes() for node in nodes}
    crash = {"GPUOPS_SIM_FAIL_AT_START": "crash", "GPUOPS_SIM_FAIL_AFTER_S": "0.3"}
    bad, _same = group_inventory(tmp_path, nodes, dict(server, vllm_server_args=["--max-model-len", "4096"],
                                                       vllm_server_ready_timeout=20),
                                 per_host={"gpu-node-02": {"vllm_server_host_env": dict(crash, GPUOPS_SIM_STATE=str(nodes[1].state))}})
    run = run_playbook(RESTART, bad)
    text = flat(run.stdout)
    assert run.returncode != 0, text[-4000:]
    assert "gpu-node-01: FAILED" in text and "gpu-node-02: FAILED" in text, text[-4000:]
    assert listening_pid(nodes[0].port) is None and rank_pid(server["vllm_server_nodes_port"]) is None
    for node in nodes:
        assert not any(holders(node).values()), (node.name, holders(node))
        assert sorted((node.state / "role").glob("*.last-good"))[0].read_bytes() == good[node.name], node.name
