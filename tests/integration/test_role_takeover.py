# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server that listens on the port is the inventory's, whoever started it: real `ansible-playbook restart_vllm.yml`
runs against a fake vLLM server started by hand (a live bash parent, a real tmux pane) on the inventory's port and GPUs.

The hand-started server is drained, its whole tree stopped and replaced; its shell or tmux server lives on. A listener that is not vLLM, and an
offline vLLM job that does not listen on the port, are still refused before anything is stopped. Judged by the kernel's
socket table (the listener), PID liveness with start times, the simulator's reading of the GPUs and the fake vLLM's tree,
never by the role's own summary (whose words are checked as well, as words).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import typing as t

import psutil
import pytest

from ansible_run import flat, RESTART, run_playbook
from gpusim.api import FakeVllm, free_port, pid_alive, starttime, wait_for
from inventories import role_host_vars, write_role_inventory
from readings import assert_server_owns_gpus, health, holders, listening_pid, stream_in_flight
from simhost import hosts_with_ports

WORKER_MIB = 20000
JOB_MIB = 12000
SECRET = "hf_takeoverSecretValue42"
TOKENS = 1000  # a streamed request that outlasts the playbook's way to the stop (about 20 s at the fake's pace)


def inventory_for(tmp_path, host):
    """The inventory's server: TP 2 on GPUs 0-1, on the host's port."""
    env = {"GPUOPS_SIM_STATE": str(host.state), "GPUOPS_SIM_WORKER_MIB": str(WORKER_MIB)}
    entries = {host.name: role_host_vars(host, host.port, vllm_server_host_env=env)}
    return write_role_inventory(tmp_path / "inventory.json", entries, vllm_server_tensor_parallel_size=2)


def hand_server(host, tmp_path) -> FakeVllm:
    """`vllm serve` as an operator types it, on the inventory's port and GPUs, a secret on its command line (not started)."""
    return FakeVllm(host, tmp_path / "hand.log", gpus="0,1", port=host.port, worker_mib=WORKER_MIB, engine_core=True,
                    model="zai-org/GLM-5-GGUF", args=["--hf-token", SECRET])


def start_in_bash(argv: t.Sequence[str], env: t.Mapping[str, str], log) -> "subprocess.Popen[bytes]":
    """A live bash that runs ``argv`` as its child and stays after it (it has more to do), as a shell in a pane does."""
    with open(log, "ab") as out:
        return subprocess.Popen(["bash", "-c", shlex.join(argv) + "; echo server exited $?; sleep 3600"], env=dict(env),  # pylint: disable=consider-using-with
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def listener_under(parent: int, port: int, timeout: float = 60.0) -> int:
    """The PID listening on ``port`` once it is a child of ``parent`` and answers /health."""
    assert wait_for(lambda: health(port) == 200, timeout, 0.1), "the hand-started server never answered /health"
    pid = listening_pid(port)
    assert pid is not None and psutil.Process(pid).ppid() == parent, (pid, parent)
    return pid


def serving_under(shell: "subprocess.Popen[bytes]", node) -> t.Tuple[t.Optional[int], int, t.Dict[int, t.Optional[int]]]:
    """The hand-started server below ``shell`` once it answers and its two workers hold GPUs 0 and 1: (the shell's start
    time, the server's PID, its tree with start times), the tree holding both GPUs."""
    shell_start = starttime(shell.pid)
    old = listener_under(shell.pid, node.port)
    assert wait_for(lambda: len(holders(node)[0]) == 1 and len(holders(node)[1]) == 1, 30, 0.1), holders(node)
    old_tree = tree_with_starts(old)
    assert set(holders(node)[0] + holders(node)[1]) <= set(old_tree)
    return shell_start, old, old_tree


def tree_with_starts(pid: int) -> t.Dict[int, t.Optional[int]]:
    """The process and its descendants (API server, engine core, workers), each with its start time."""
    pids = [pid] + [child.pid for child in psutil.Process(pid).children(recursive=True)]
    return {p: starttime(p) for p in pids}


def colleague_job(host, gpu: int) -> t.Dict[str, int]:
    """An offline vLLM job (`python3 batch_infer.py` with a child `VLLM::Worker_TP0` on ``gpu``): no port, not the server."""
    return host.spawn_tree({"key": "batch", "title": "python3 batch_infer.py --input prompts.jsonl",
                            "children": [{"key": "worker", "title": "VLLM::Worker_TP0", "hold": [{"gpu": gpu, "mib": JOB_MIB}]}]})


def alive(started: t.Mapping[int, t.Optional[int]]) -> t.List[int]:
    return [pid for pid, start in started.items() if pid_alive(pid, start)]


def end(proc: "subprocess.Popen[bytes]") -> None:
    """End a process this test started, by its Popen handle (its whole session: the bash and what it still runs)."""
    if proc.poll() is None:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
    proc.wait(10)


def assert_taken_over(run, old_tree, parent: t.Tuple[int, t.Optional[int]], node, how: str) -> None:
    """The restart succeeded; the old tree is gone, its parent alive; the role's server holds the GPUs; the summary says so."""
    text = flat(run.stdout)
    assert run.returncode == 0, text[-4000:]
    assert alive(old_tree) == [], "left running: %s" % alive(old_tree)
    assert pid_alive(*parent), "the parent (%d) of the server taken over was ended" % parent[0]
    server, workers = assert_server_owns_gpus(node, [0, 1], 2)
    assert server not in old_tree and not set(workers) & set(old_tree)
    old = next(iter(old_tree))
    assert "taken over: PID %d" % old in text and how in text, text[-4000:]
    assert "--hf-token ********" in text and SECRET not in text, text[-4000:]


def test_a_server_started_by_hand_in_a_shell_is_taken_over_and_its_shell_lives_on(make_host, tmp_path, canaries):
    """One host, in steps: a listener that is not vLLM is refused; a hand-started server with a colleague's offline vLLM job
    on one of its GPUs is refused, naming the job; with that job gone the hand-started server is taken over. A second
    colleague's job on a GPU outside the server's stays alive throughout."""
    node = hosts_with_ports(make_host, "gpu-node-01")[0]
    inventory = inventory_for(tmp_path, node)
    bystander = colleague_job(node, gpu=5)
    watched = {pid: starttime(pid) for pid in bystander.values()}

    # 0. something that is not vLLM listens on the port: refused, named, not stopped
    web = start_in_bash([sys.executable, "-m", "http.server", str(node.port), "--bind", "127.0.0.1"], {"PATH": "/usr/bin:/bin"},
                        tmp_path / "web.log")
    try:
        assert wait_for(lambda: listening_pid(node.port) is not None, 20, 0.1)
        web_pid = listening_pid(node.port)
        assert web_pid is not None
        web_start = starttime(web_pid)
        before = node.snapshot()
        run = run_playbook(RESTART, inventory)
        text = flat(run.stdout)
        assert run.returncode != 0 and "nothing was stopped" in text and "PID %s (" % web_pid in text, text[-3000:]
        assert "not a vLLM server" in text, text[-3000:]
        assert pid_alive(web_pid, web_start) and listening_pid(node.port) == web_pid and node.snapshot() == before
    finally:
        end(web)
    assert wait_for(lambda: listening_pid(node.port) is None, 20, 0.1)

    hand = hand_server(node, tmp_path)
    shell = start_in_bash(hand.argv, hand.env, tmp_path / "hand.log")
    try:
        shell_start, old, old_tree = serving_under(shell, node)

        # 1. a colleague's offline vLLM job on GPU 1 (no port): still someone else's; nothing is stopped
        job = colleague_job(node, gpu=1)
        before = node.snapshot()
        run = run_playbook(RESTART, inventory)
        text = flat(run.stdout)
        assert run.returncode != 0 and "nothing was stopped" in text, text[-3000:]
        assert "pid %d (VLLM::Worker_TP0)" % job["worker"] in text and "python3 batch_infer.py" in text, text[-3000:]
        assert alive(old_tree) == list(old_tree) and pid_alive(job["worker"]) and listening_pid(node.port) == old
        assert node.snapshot() == before
        node.kill(job["worker"])
        node.kill(job["batch"])
        assert wait_for(lambda: holders(node)[1] == [h for h in holders(node)[1] if h in old_tree], 20, 0.1), holders(node)

        # 2. the real run takes it over
        run = run_playbook(RESTART, inventory)
        assert_taken_over(run, old_tree, (shell.pid, shell_start), node, "started by hand in a shell (PID %d" % shell.pid)
        assert shell.poll() is None
    finally:
        end(shell)
    assert alive(watched) == list(watched), "the colleague's job outside the server's GPUs was ended"
    assert holders(node)[5] == [bystander["worker"]]
    assert canaries.alive(), canaries.dead()


def test_a_server_on_a_ray_cluster_is_refused_by_name_and_nothing_is_stopped(make_host, tmp_path):
    """A hand-started server whose engine runs on a Ray cluster (--distributed-executor-backend ray): the role cannot end
    what Ray runs for it, so the run is refused before anything stops, naming the server and the way out."""
    node = hosts_with_ports(make_host, "gpu-node-01")[0]
    inventory = inventory_for(tmp_path, node)
    ray = FakeVllm(node, tmp_path / "ray.log", gpus="0,1", port=node.port, worker_mib=WORKER_MIB, model="zai-org/GLM-5-GGUF",
                   args=["--distributed-executor-backend", "ray"])
    shell = start_in_bash(ray.argv, ray.env, tmp_path / "ray-shell.log")
    try:
        _shell_start, old, old_tree = serving_under(shell, node)
        before = node.snapshot()
        run = run_playbook(RESTART, inventory)
        text = flat(run.stdout)
        assert run.returncode != 0 and "nothing was stopped" in text, text[-3000:]
        assert "PID %s (" % old in text and "runs on a Ray cluster (--distributed-executor-backend ray)" in text, text[-3000:]
        assert alive(old_tree) == list(old_tree) and listening_pid(node.port) == old and node.snapshot() == before
        assert not list((node.state / "role").glob("*.lock")), "the refused run left its lock"
    finally:
        end(shell)


def test_one_rank_of_a_server_across_hosts_is_refused_and_neither_rank_is_touched(make_host, tmp_path):
    """A server across two hosts started by hand (its head on this host's port, a headless rank on another host): taking
    over the head alone would leave the other rank holding its GPU (vLLM #32136), so the run is refused before anything
    stops, naming the flags; both ranks still run and the head still serves."""
    node, other = hosts_with_ports(make_host, "gpu-node-01", "gpu-node-02")
    inventory = inventory_for(tmp_path, node)
    ranks = ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "--tensor-parallel-size", "2"]
    head = FakeVllm(node, tmp_path / "head.log", gpus="0", port=node.port, worker_mib=WORKER_MIB, model="zai-org/GLM-5-GGUF",
                    args=ranks + ["--node-rank", "0"])
    rank = FakeVllm(other, tmp_path / "rank1.log", gpus="0", worker_mib=WORKER_MIB, model="zai-org/GLM-5-GGUF",
                    args=ranks + ["--node-rank", "1", "--headless"])
    shell = start_in_bash(head.argv, head.env, tmp_path / "head-shell.log")
    rank.start()
    try:
        old = listener_under(shell.pid, node.port)  # it listens once rank 1 joined
        old_tree = tree_with_starts(old)
        rank_tree = tree_with_starts(rank.pid)
        before = node.snapshot()
        run = run_playbook(RESTART, inventory)
        text = flat(run.stdout)
        assert run.returncode != 0 and "nothing was stopped" in text, text[-3000:]
        assert "PID %s (" % old in text and "one rank of a server across hosts (--nnodes 2, --node-rank 0)" in text, text[-3000:]
        assert alive(old_tree) == list(old_tree) and alive(rank_tree) == list(rank_tree) and node.snapshot() == before
        assert health(node.port) == 200 and holders(other)[0] and set(holders(other)[0]) <= set(rank_tree), holders(other)
    finally:
        end(shell)
        rank.stop()


@pytest.fixture
def tmux(tmp_path):
    """A tmux server of this test's own (its own socket), killed at the end whatever happens."""
    socket = tmp_path / "tmux.sock"
    base = ["tmux", "-S", str(socket)]
    yield base
    subprocess.run(base + ["kill-server"], check=False, capture_output=True, timeout=20)


def test_check_mode_previews_then_a_server_in_a_tmux_pane_is_taken_over(make_host, tmp_path, tmux, canaries):
    node = hosts_with_ports(make_host, "gpu-node-01")[0]
    inventory = inventory_for(tmp_path, node)
    hand = hand_server(node, tmp_path)
    pane_command = "bash -c %s" % shlex.quote(shlex.join(hand.argv) + "; exec bash")
    subprocess.run(tmux + ["new-session", "-d", "-s", "vllm", "-x", "200", "-y", "50", pane_command], check=True, env=hand.env,
                   timeout=20)
    pane = int(subprocess.run(tmux + ["display-message", "-p", "-t", "vllm", "#{pane_pid}"], check=True, capture_output=True,
                              text=True, timeout=20).stdout)
    server = psutil.Process(pane).ppid()
    parents = {pane: starttime(pane), server: starttime(server)}
    assert "tmux" in psutil.Process(server).name()
    old = listener_under(pane, node.port)
    assert old is not None
    assert wait_for(lambda: len(holders(node)[0]) == 1 and len(holders(node)[1]) == 1, 30, 0.1), holders(node)
    old_tree = tree_with_starts(old)

    before = node.snapshot()
    check = run_playbook(RESTART, inventory, "--check")
    text = flat(check.stdout)
    assert check.returncode == 0, text[-4000:]
    assert "would take over PID %s started by hand in tmux" % old in text and "--hf-token ********" in text, text[-4000:]
    assert SECRET not in text
    assert alive(old_tree) == list(old_tree) and node.snapshot() == before and listening_pid(node.port) == old

    # a request in flight on the hand-started server: the takeover drains it before the stop (the client's own reading)
    client, out = stream_in_flight(node.port, TOKENS)
    run = run_playbook(RESTART, inventory)
    client.join(timeout=120)
    assert not client.is_alive() and out["done"] and out["chunks"] == TOKENS and "error" not in out, out
    assert_taken_over(run, old_tree, (pane, parents[pane]), node, "started by hand in tmux (PID %d" % server)
    assert alive(parents) == list(parents), "the tmux server or its pane's shell was ended"
    assert canaries.alive(), canaries.dead()


def test_a_failed_launch_after_a_takeover_names_the_command_line_that_ran(make_host, tmp_path):
    """The hand-started server is taken over, then the new server fails at its start: the run fails and undoes its own
    launch (the GPUs free, by the simulator's reading); the server taken over stays stopped, its shell lives on, and the
    failure gives its command line (secrets masked), since the role cannot start a process it did not start."""
    node = hosts_with_ports(make_host, "gpu-node-01")[0]
    inventory = inventory_for(tmp_path, node)
    hand = hand_server(node, tmp_path)
    shell = start_in_bash(hand.argv, hand.env, tmp_path / "hand.log")
    try:
        shell_start, old, old_tree = serving_under(shell, node)

        run = run_playbook(RESTART, inventory, "-e", '{"vllm_server_env_overrides": {"GPUOPS_SIM_FAIL_AT_START": "1"}}')
        text = flat(run.stdout)
        assert run.returncode != 0 and "was stopped and GPU 0, 1 verified free" in text, text[-4000:]
        assert alive(old_tree) == [] and pid_alive(shell.pid, shell_start)
        assert not any(holders(node)[index] for index in range(8)), holders(node)
        assert listening_pid(node.port) is None
        assert "the server taken over (PID %s, started by hand in a shell (PID %s" % (old, shell.pid) in text, text[-4000:]
        assert "stays stopped, this run does not start it again: its command line was `" in text, text[-4000:]
        assert "--hf-token ********` (secrets masked)" in text.split("its command line was `", 1)[1] and SECRET not in text
    finally:
        end(shell)
