# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuops.fleet.gpu_reclaim through real ansible-playbook runs on simulated GPU hosts.

Every outcome is judged by an independent reading, never by the module's own `verified` alone: the simulator's
reading of each GPU (gpusim's status: live allocation records and /proc) and the liveness of each PID involved
(PID and start time, from /proc). Every scenario ends by checking its canaries (see conftest.Canaries): the
wrapper above the server that names it, a sibling of the server, the simulator's reaper, a holder of a GPU
the scenario does not select, and two children of pytest.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import time

import psutil
import pytest

from ansible_run import ansible_env, BIN, REPO, run_module, run_playbook
from gpusim.api import orphan_parent, parent_pid, pid_alive, proc_state, starttime, title, wait_for
from simhost import SimHost

MIB = 93029
FAST = {"grace": 2, "timeout": 10}
WRAPPER = "/bin/bash /opt/gpuops/run-vllm.sh vllm serve zai-org/GLM-5-GGUF --tensor-parallel-size 8"
SIBLING = "python3 /opt/gpuops/exporter.py --scrape http://127.0.0.1:8000/metrics --job vllm-serve"


def reclaim(host, inventory, tmp_path, args=None, *extra):
    """One gpu_reclaim run through ansible-playbook; its full result."""
    return run_module("gpu_reclaim", inventory(host), tmp_path / "out", dict(FAST, **(args or {})), *extra)[host.name]


def used(host):
    """The simulator's own reading: MiB in use per GPU."""
    return host.used_mib()


def serve(host, canaries, tp=8, **kwargs):
    """A fake vLLM tree below a wrapper that names it, with a sibling; the companions and the reaper are canaries."""
    tree = host.spawn_vllm(tp, wrapper=WRAPPER, sibling=SIBLING, **kwargs)
    canaries.guard_tree(tree)
    return tree


def members(tree):
    return [pid for pid in [tree["parent"], tree["engine_core"], *tree["workers"]] if pid is not None]


def none_alive(pids):
    return not any(pid_alive(pid) for pid in pids)


class UntouchedServer:
    """One healthy fake vLLM tree on GPUs 0 and 1 (below a wrapper that names it, with a sibling), shared by the cases
    that must fail before they signal anything. Each case checks it is intact before and after its run: every process
    of the tree, its wrapper, its sibling and the simulator's reaper still running with the start time it had when the
    tree was started."""

    def __init__(self, host, tree):
        self.host = host
        self.tree = tree
        pids = members(tree) + [tree["wrapper"], tree["sibling"], tree["reaper"]]
        self.started = {pid: starttime(pid) for pid in pids}

    def gone(self):
        """The processes of the tree that no longer run with their start time."""
        return sorted(pid for pid, start in self.started.items() if not pid_alive(pid, start))


@pytest.fixture(scope="module", name="untouched")
def untouched_fixture(tmp_path_factory):
    host = SimHost("gpu-node-01", tmp_path_factory.mktemp("reclaim-untouched") / "gpu-node-01")
    host.gpusim("create")
    try:
        yield UntouchedServer(host, host.spawn_vllm(2, wrapper=WRAPPER, sibling=SIBLING, mib=1000))
    finally:
        cleanup = host.gpusim("cleanup", check=False)
        assert cleanup.returncode == 0, "simulator cleanup failed: %s %s" % (cleanup.stdout, cleanup.stderr)


def untouched_server(untouched, canaries):
    """The shared server, checked intact, with its companions and reaper among this case's canaries."""
    assert not untouched.gone(), "the shared server lost %s in an earlier case" % untouched.gone()
    canaries.guard_tree(untouched.tree)
    return untouched.host, untouched.tree


# the cases that share the untouched server run one after the other on one pytest-xdist worker
SHARES_THE_UNTOUCHED_SERVER = pytest.mark.xdist_group("test_gpu_reclaim-untouched-server")


def test_incident_freed_in_one_run_then_idempotent(make_host, inventory, tmp_path, canaries):
    host = make_host()
    tree = serve(host, canaries, 8, mib=MIB)
    assert used(host) == [MIB] * 8
    result = reclaim(host, inventory, tmp_path)
    assert result.get("failed") is not True, result["msg"]
    assert result["changed"] is True and result["verified"] is True
    killed = {k["pid"]: k for k in result["killed"]}
    assert set(killed) == {tree["parent"], *tree["workers"]}
    assert killed[tree["parent"]]["role"] == "launcher"
    assert sorted(killed[w]["name"] for w in tree["workers"]) == ["VLLM::Worker_TP%d" % i for i in range(8)]
    assert all(killed[w]["gpus"] == [i] for i, w in enumerate(tree["workers"]))
    assert [g["memory_used_mib_before"] for g in result["gpus"]] == [MIB] * 8
    assert used(host) == [0] * 8 and host.holders() == []
    assert none_alive(members(tree))
    again = reclaim(host, inventory, tmp_path)
    assert again["changed"] is False and again["verified"] is True and again["killed"] == []
    assert used(host) == [0] * 8
    assert canaries.alive(), canaries.dead()


def test_incident_after_broken_cleanup(make_host, inventory, tmp_path, canaries):
    host = make_host()
    tree = serve(host, canaries, 8, mib=MIB)
    host.incident()
    assert used(host) == [0] + [MIB] * 7
    assert {parent_pid(w) for w in tree["workers"][1:]} == {tree["reaper"]}, "the orphans went to the simulator's reaper"
    result = reclaim(host, inventory, tmp_path)
    assert result["verified"] is True and result["changed"] is True
    assert {k["pid"] for k in result["killed"]} == set(tree["workers"][1:])
    assert used(host) == [0] * 8
    assert none_alive(tree["workers"])
    assert canaries.alive(), canaries.dead()


@pytest.mark.parametrize("orphans", ["reaper", "init"])
def test_orphans_of_a_killed_server_under_a_subreaper_or_pid_1(make_host, inventory, tmp_path, canaries, orphans):
    """Where a SIGKILLed server's workers go (the simulator's subreaper, titled as systemd --user, or PID 1) changes nothing."""
    host = make_host("gpu-node-01", "--orphans", orphans, *(["--subreaper-title", "/lib/systemd/systemd --user"] if orphans == "reaper" else []))
    tree = serve(host, canaries, 4, mib=20000)
    host.incident()
    adopted = {parent_pid(w) for w in tree["workers"][1:]}
    if orphans == "reaper":
        assert adopted == {tree["reaper"]} and title(tree["reaper"]) == "/lib/systemd/systemd --user"
    else:
        assert adopted == {orphan_parent()} and tree["reaper"] not in adopted, adopted  # PID 1, measured
    result = reclaim(host, inventory, tmp_path)
    assert result.get("verified") is True, result
    assert {k["pid"] for k in result["killed"]} == set(tree["workers"][1:])
    assert all(k["role"] != "launcher" for k in result["killed"]), "no launcher is left above orphans"
    assert used(host) == [0] * 8 and none_alive(tree["workers"])
    assert canaries.alive(), canaries.dead()


def test_reclaim_during_start_up_while_workers_are_still_untitled(make_host, inventory, tmp_path, canaries):
    """Real workers run as `python3 -c "from multiprocessing.spawn import spawn_main; ..."` for a while, holding a CUDA
    context, before they set their VLLM::Worker_TP<i> title: a reclaim then must still end the whole server."""
    host = make_host()
    window = {"GPUOPS_SIM_WORKER_SPAWN_S": "60", "GPUOPS_SIM_WORKER_SPAWN_MIB": "500"}
    tree = serve(host, canaries, 4, mib=MIB, env=window)
    assert used(host)[:4] == [500] * 4
    assert all("spawn_main" in title(w) and "--multiprocessing-fork" in title(w) for w in tree["workers"])
    result = reclaim(host, inventory, tmp_path)
    assert result.get("verified") is True, result
    killed = {k["pid"]: k for k in result["killed"]}
    assert set(killed) == {tree["parent"], *tree["workers"]} and killed[tree["parent"]]["role"] == "launcher"
    assert all("spawn_main" in " ".join(killed[w]["cmdline"]) for w in tree["workers"]), "ended before titling itself"
    assert used(host) == [0] * 8 and none_alive(members(tree))
    assert canaries.alive(), canaries.dead()


def adhoc_in_nested_pid_namespace(host, module, args):
    """`ansible localhost -m MODULE -a ARGS` run inside `unshare --pid --fork --mount-proc`: its result."""
    argv, extra = host.nested_pid_namespace([str(BIN / "ansible"), "localhost", "--one-line", "-m", module, "-a", args])
    env = dict(ansible_env(), **host.environment(), **extra)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert " => " in done.stdout, (done.stdout, done.stderr)
    status, _sep, answer = done.stdout.partition(" => ")
    return dict(json.loads(answer), failed="FAILED!" in status)


@pytest.mark.skipif(os.geteuid() != 0, reason="unshare --pid --mount-proc needs root")
def test_module_in_a_nested_pid_namespace_sees_outer_pids_and_touches_nothing(make_host, tmp_path, canaries):
    """The module runs in a container-like PID namespace; NVML lists the machine's PIDs, which it cannot see."""
    host = make_host()
    tree = serve(host, canaries, 2, mib=MIB)
    before = host.snapshot()
    facts = adhoc_in_nested_pid_namespace(host, "gpuops.fleet.gpu_facts", "gpus=0,1")
    listed = [(p["pid"], p["visible"]) for g in facts["ansible_facts"]["gpus"] for p in g["processes"]]
    assert listed == [(w, False) for w in tree["workers"]], listed
    result = adhoc_in_nested_pid_namespace(host, "gpuops.fleet.gpu_reclaim", "gpus=0,1 grace=1 timeout=3")
    assert result["failed"] is True and result.get("changed") is False and result["killed"] == []
    assert "PID namespace" in result["msg"] and str(tree["workers"][0]) in result["msg"], result["msg"]
    assert host.snapshot() == before and all(pid_alive(p) for p in members(tree))
    assert canaries.alive(), canaries.dead()


@pytest.mark.skipif(os.geteuid() != 0, reason="unshare --pid --mount-proc needs root")
def test_in_a_nested_pid_namespace_a_local_process_that_shares_a_listed_pid_is_unverifiable(make_host, tmp_path, canaries):
    """NVML lists the machine's PID 1 (its init); inside the namespace PID 1 is the ansible command itself, which has no
    device file open: gpu_facts does not name it as the holder, and gpu_reclaim names the PID as unverifiable."""
    host = make_host()
    host.record_alloc(1, 3, 5000, flags=["foreign"])
    tree = serve(host, canaries, 2, mib=MIB)
    before = host.snapshot()
    facts = adhoc_in_nested_pid_namespace(host, "gpuops.fleet.gpu_facts", "gpus=3")
    (listed,) = facts["ansible_facts"]["gpus"][0]["processes"]
    assert listed["pid"] == 1 and listed["unverified"] is True and listed["name"] is None and listed["cmdline"] is None, listed
    result = adhoc_in_nested_pid_namespace(host, "gpuops.fleet.gpu_reclaim", "gpus=3 grace=1 timeout=3")
    assert result["failed"] is True and result.get("changed") is False and result["killed"] == []
    assert "GPU 3: pid 1 holds 5000 MiB: unverifiable" in result["msg"] and "nested PID namespace" in result["msg"], result["msg"]
    assert host.snapshot() == before and all(pid_alive(p) for p in members(tree))
    assert canaries.alive(), canaries.dead()


def test_v1_tree_with_engine_core_launchers_first(make_host, inventory, tmp_path, canaries):
    host = make_host()
    tree = serve(host, canaries, 8, engine_core=True, entrypoint="serve", mib=MIB)
    result = reclaim(host, inventory, tmp_path)
    assert result.get("verified") is True, result
    killed = {k["pid"]: k for k in result["killed"]}
    assert set(killed) == {tree["parent"], tree["engine_core"], *tree["workers"]}
    assert killed[tree["parent"]]["role"] == "launcher"
    assert killed[tree["engine_core"]]["name"] == "VLLM::EngineCore"
    assert used(host) == [0] * 8 and none_alive(members(tree))
    assert canaries.alive(), canaries.dead()


def test_workers_ignoring_sigterm_are_ended_by_sigkill(make_host, inventory, tmp_path, canaries):
    host = make_host()
    tree = serve(host, canaries, 8, ignore_sigterm=True, mib=MIB)
    result = reclaim(host, inventory, tmp_path, {"grace": 1})
    assert result.get("verified") is True, result
    by_pid = {k["pid"]: k for k in result["killed"]}
    assert all(by_pid[w]["signal"] == "SIGKILL" for w in tree["workers"])
    assert all(by_pid[w]["seconds_to_exit"] >= 1.0 for w in tree["workers"])
    assert by_pid[tree["parent"]]["signal"] in ("SIGTERM", "SIGKILL")
    assert used(host) == [0] * 8 and none_alive(members(tree))
    assert canaries.alive(), canaries.dead()


def test_holder_that_cannot_be_ended_fails_with_its_state(make_host, inventory, tmp_path, canaries):
    host = make_host()
    stuck = host.spawn_stuck(2, 5000)
    stuck_pid, keeper = stuck["holder"], stuck["keeper"]
    canaries.hold(host, 5)
    result = reclaim(host, inventory, tmp_path, {"gpus": ["2"], "grace": 1, "timeout": 4})
    assert result["failed"] is True and result["verified"] is False
    assert "GPU 2" in result["msg"] and str(stuck_pid) in result["msg"] and "zombie" in result["msg"]
    assert result["elapsed_s"] < 4 * 5, "timeout 4 bounds the task (a generous bound: the machine may be loaded)"
    # the independent reading: a zombie that still holds its memory, exactly what the module says
    assert proc_state(stuck_pid) == "Z" and used(host)[2] == 5000 and host.holders(2) == [stuck_pid]
    assert [(s["pid"], s["state"]) for s in result["survivors"]] == [(stuck_pid, "zombie")]
    assert stuck_pid not in {k["pid"] for k in result["killed"]}
    assert pid_alive(keeper), "the zombie's parent is no launcher and holds no GPU: never signalled"
    survivors = {s["pid"]: s for s in result["evidence"]["survivors"]}
    evidence = survivors[stuck_pid]
    assert evidence["state"] == "zombie" and evidence["username"] == pwd.getpwuid(os.geteuid()).pw_name
    chain = [p["pid"] for p in evidence["parents"]]
    assert chain[:2] == [keeper, parent_pid(keeper)], "the parent chain, as /proc tells it"
    with open("/proc/%d/comm" % keeper) as handle:
        assert evidence["parents"][0]["name"] == handle.read().strip()
    assert isinstance(result["evidence"]["xid"], list)
    assert canaries.alive(), canaries.dead()


def test_foreign_pid_is_named_and_can_be_ignored(make_host, inventory, tmp_path, canaries):
    host = make_host()
    foreign = host.foreign(2, 20000)
    canaries.hold(host, 6)
    before = host.snapshot()
    result = reclaim(host, inventory, tmp_path, {"gpus": ["0", "1", "2"]})
    assert result["failed"] is True and result["changed"] is False
    assert "GPU 2" in result["msg"] and "20000 MiB" in result["msg"] and "PID namespace" in result["msg"]
    assert host.snapshot() == before, "nothing was signalled: the simulator's reading is unchanged"
    tree = serve(host, canaries, 2, mib=30000)
    ignored = reclaim(host, inventory, tmp_path, {"gpus": ["0", "1", "2"], "ignore_foreign": True})
    assert ignored.get("failed") is not True and ignored["verified"] is True
    assert {k["pid"] for k in ignored["killed"]} == {tree["parent"], *tree["workers"]}
    assert used(host)[:3] == [0, 0, 20000] and host.holders(2) == [foreign], "the foreign PID still holds GPU 2"
    assert {g["index"]: g["memory_used_mib_after"] for g in ignored["gpus"]}[2] == 20000, "and the module says so"
    assert none_alive(members(tree))
    assert canaries.alive(), canaries.dead()


def test_local_pid_without_device_files_is_unverifiable_when_nvml_lists_missing_pids(make_host, inventory, tmp_path, canaries):
    """NVML lists a PID this namespace does not have, so its PIDs may be the machine's (a container's view): a PID it also
    lists that belongs here to a plain sleep (no device file open) is never signalled on NVML's word; the task fails naming
    it, while the fake vLLM workers, which hold their device files open, are still ended."""
    host = make_host()
    host.foreign(2, 20000)
    sleeper = subprocess.Popen(["sleep", "600"])
    canaries.procs.append(sleeper)  # checked alive at the end, ended by its handle whatever happens
    host.record_alloc(sleeper.pid, 3, 7000, flags=["foreign"])
    tree = serve(host, canaries, 2, mib=30000)
    canaries.hold(host, 6)
    devices = host.device_holders()
    assert sleeper.pid not in devices and all(worker in devices for worker in tree["workers"])
    result = reclaim(host, inventory, tmp_path, {"gpus": ["0", "1", "2", "3"], "ignore_foreign": True})
    assert result["failed"] is True and result["verified"] is False
    assert "GPU 3: pid %d holds 7000 MiB: unverifiable" % sleeper.pid in result["msg"], result["msg"]
    assert sleeper.pid not in {k["pid"] for k in result["killed"]}
    assert {k["pid"] for k in result["killed"]} == {tree["parent"], *tree["workers"]}
    # the independent reading: the sleep runs on and NVML still lists it; the server's GPUs are free, its processes gone
    assert sleeper.poll() is None and pid_alive(sleeper.pid)
    assert used(host)[:4] == [0, 0, 20000, 7000] and host.holders(3) == [sleeper.pid]
    assert none_alive(members(tree))
    checked = reclaim(host, inventory, tmp_path, {"gpus": ["3"], "ignore_foreign": True}, "--check")
    assert checked["would_kill"] == [] and [text for text in checked["would_fail"] if "pid %d" % sleeper.pid in text]
    assert sleeper.poll() is None
    assert canaries.alive(), canaries.dead()


def test_memory_held_by_no_process(make_host, inventory, tmp_path, canaries):
    """Memory no process holds; a process that has GPU 5's device file open (NVML does not list it) is the lead."""
    host = make_host()
    host.orphan(5, 4096)
    opener = tree(host, node("opener", "python3 /opt/probe/cuda_init_hang.py", devices=[5]))["opener"]
    canaries.hold(host, 1)
    before = host.snapshot()
    result = reclaim(host, inventory, tmp_path, {"gpus": ["4", "5"], "timeout": 2})
    assert result["failed"] is True
    assert "GPU 5" in result["msg"] and "4096 MiB" in result["msg"] and "no process" in result["msg"]
    assert [g["index"] for g in result["gpus"] if not g["verified"]] == [5]
    assert host.snapshot() == before and used(host)[5] == 4096 and host.holders(5) == []
    assert pid_alive(opener), "not a holder: never signalled"
    # the evidence names who has the device files open, exactly as /proc/PID/fd tells it
    devices = {entry["pid"]: entry["devices"] for entry in result["evidence"]["device_holders"]}
    assert devices == host.device_holders()
    assert str(host.state / "dev" / "nvidia5") in devices[opener]
    assert canaries.alive(), canaries.dead()


def test_lost_gpu_reported_while_others_are_reclaimed(make_host, inventory, tmp_path, canaries):
    host = make_host()
    tree = serve(host, canaries, 8, mib=MIB)
    host.lose_gpu(3)
    result = reclaim(host, inventory, tmp_path)
    assert result["failed"] is True
    assert "GPU 3" in result["msg"] and "lost" in result["msg"].lower()
    gpus = {g["index"]: g for g in result["gpus"]}
    assert gpus[3]["error"] and not gpus[3]["verified"]
    assert all(gpus[i]["verified"] for i in gpus if i != 3)
    # independent: the server's whole tree is gone (its TP3 worker too, as a member of the launcher's tree),
    # so the simulator reads every GPU free; GPU 3 is still lost, which is why the module cannot prove it
    assert none_alive(members(tree)) and used(host) == [0] * 8
    assert host.status()["gpus"][3]["lost"] is True
    assert canaries.alive(), canaries.dead()


def test_driver_not_loaded_touches_nothing(make_host, inventory, tmp_path, canaries):
    host = make_host()
    tree = serve(host, canaries, 8, mib=MIB)
    host.driver(False)
    before = host.snapshot()
    result = reclaim(host, inventory, tmp_path)
    assert result["failed"] is True and result["changed"] is False
    assert "driver" in result["msg"].lower()
    assert host.snapshot() == before and all(pid_alive(p) for p in members(tree))
    assert canaries.alive(), canaries.dead()


def test_two_servers_only_the_selected_one_ends(make_host, inventory, tmp_path, canaries):
    host = make_host()
    first = serve(host, canaries, 4, first_gpu=0, mib=40000)
    second = serve(host, canaries, 4, first_gpu=4, mib=40000)
    result = reclaim(host, inventory, tmp_path, {"gpus": ["0", "1", "2", "3"]})
    assert result.get("verified") is True, result
    assert {k["pid"] for k in result["killed"]} == {first["parent"], *first["workers"]}
    assert none_alive(members(first)) and all(pid_alive(p) for p in members(second))
    assert used(host) == [0] * 4 + [40000] * 4
    assert canaries.alive(), canaries.dead()


def test_match_selects_holders(make_host, inventory, tmp_path, canaries):
    """After the broken cleanup no parent watches the workers (a live vLLM parent would take its whole tree down)."""
    host = make_host()
    tree = serve(host, canaries, 8, mib=MIB)
    host.incident()
    result = reclaim(host, inventory, tmp_path, {"gpus": ["1", "2", "3"], "match": ["^VLLM::Worker_TP[1-3]$"], "kill_tree": False})
    assert result.get("verified") is True, result
    assert {k["pid"] for k in result["killed"]} == set(tree["workers"][1:4])
    assert none_alive(tree["workers"][1:4]) and all(pid_alive(p) for p in tree["workers"][4:])
    assert used(host) == [0] * 4 + [MIB] * 4
    assert canaries.alive(), canaries.dead()


def test_exclude_keeps_a_holder_and_says_so(make_host, inventory, tmp_path, canaries):
    host = make_host()
    tree = serve(host, canaries, 8, mib=MIB)
    host.incident()
    kept = tree["workers"][3]
    result = reclaim(host, inventory, tmp_path, {"exclude": ["Worker_TP3$"], "kill_tree": False})
    assert result["failed"] is True
    assert "GPU 3" in result["msg"] and str(kept) in result["msg"]
    assert [g["index"] for g in result["gpus"] if not g["verified"]] == [3]
    # independent: the excluded worker runs and holds GPU 3; every other worker is gone and its GPU free
    assert pid_alive(kept) and host.holders(3) == [kept]
    assert none_alive([w for w in tree["workers"] if w != kept])
    assert used(host) == [0, 0, 0, MIB, 0, 0, 0, 0]
    evidence = {s["pid"]: s for s in result["evidence"]["survivors"]}[kept]
    assert evidence["state"] == "sleeping"
    with open("/proc/%d/wchan" % kept) as handle:
        assert evidence["wchan"] == handle.read().strip()
    assert [p["pid"] for p in evidence["parents"]][0] == parent_pid(kept) == tree["reaper"]
    devices = {entry["pid"]: entry["devices"] for entry in result["evidence"]["device_holders"]}
    assert devices == host.device_holders() and str(host.state / "dev" / "nvidia3") in devices[kept]
    assert canaries.alive(), canaries.dead()


@SHARES_THE_UNTOUCHED_SERVER
def test_unmatched_holder_fails_loudly(untouched, inventory, tmp_path, canaries):
    host, tree = untouched_server(untouched, canaries)
    before = host.snapshot()
    result = reclaim(host, inventory, tmp_path, {"match": ["^nothing-like-this$"]})
    assert result["failed"] is True and result["changed"] is False
    assert "does not match `match`" in result["msg"]
    assert host.snapshot() == before and all(pid_alive(p) for p in members(tree)) and not untouched.gone()
    assert canaries.alive(), canaries.dead()


def test_check_mode_signals_nothing_and_diff_shows_memory(make_host, inventory, tmp_path, canaries):
    host = make_host()
    tree = serve(host, canaries, 8, mib=MIB)
    before = host.snapshot()
    result = reclaim(host, inventory, tmp_path, None, "--check", "--diff")
    assert host.snapshot() == before, "check mode changed the host"
    assert all(pid_alive(p) for p in members(tree))
    assert result["changed"] is True and result["verified"] is None and result["killed"] == [] and result["would_fail"] == []
    would = [w["pid"] for w in result["would_kill"]]
    assert set(would) == {tree["parent"], *tree["workers"]} and would[0] == tree["parent"]
    assert "GPU 0: 93029 MiB used, VLLM::Worker_TP0" in result["diff"]["before"]
    real = reclaim(host, inventory, tmp_path, None, "--diff")
    assert "GPU 7: 93029 MiB" in real["diff"]["before"] and "GPU 7: 0 MiB used, no holder" in real["diff"]["after"]
    assert used(host) == [0] * 8 and none_alive(members(tree))
    assert canaries.alive(), canaries.dead()


@pytest.mark.parametrize("args, option, value", [
    ({"gpus": ["9"]}, "gpus", "9"),
    ({"gpus": ["GPU-00000000-0000-0000-0000-000000000000"]}, "gpus", "GPU-00000000-0000-0000-0000-000000000000"),
    ({"gpus": ["zero"]}, "gpus", "zero"),
    ({"match": ["(unclosed"]}, "match", "(unclosed"),
    ({"exclude": ["[a-"]}, "exclude", "[a-"),
    ({"signals": ["TERMINATE"]}, "signals", "TERMINATE"),
    ({"signals": []}, "signals", "empty"),
    ({"grace": 0}, "grace", "0"),
    ({"timeout": -1}, "timeout", "-1"),
    ({"idle_threshold_mib": -5}, "idle_threshold_mib", "-5"),
    ({"signals": ["STOP"]}, "signals", "STOP"),
    ({"signals": ["TERM", "TSTP"]}, "signals", "TSTP"),
    ({"gpus": ["\u00b2"]}, "gpus", "\u00b2"),
    ({"gpus": ["\u0663"]}, "gpus", "\u0663"),
    ({"grace": 100000}, "grace", "100000"),
])
@SHARES_THE_UNTOUCHED_SERVER
def test_bad_input_kills_nothing(untouched, inventory, tmp_path, canaries, args, option, value):
    host, tree = untouched_server(untouched, canaries)
    before = host.snapshot()
    result = reclaim(host, inventory, tmp_path, args)
    assert result["failed"] is True and not result.get("changed")
    assert option in result["msg"] and value in result["msg"], result["msg"]
    assert host.snapshot() == before and all(pid_alive(p) for p in members(tree)) and not untouched.gone()
    assert canaries.alive(), canaries.dead()


def test_gpu_cleanup_playbook_summarises_the_fleet(make_host, inventory, canaries):
    healthy = make_host("gpu-node-01")
    broken = make_host("gpu-node-02")
    tree = serve(healthy, canaries, 8, mib=MIB)
    healthy.gpusim("incident")
    broken.gpusim("orphan", "--gpu", "1", "--mib", "2048")
    proc = run_playbook(REPO / "playbooks" / "gpu_cleanup.yml", inventory(healthy, broken), "-e", "gpu_reclaim_timeout=3 gpu_reclaim_grace=1")
    out = proc.stdout
    assert proc.returncode != 0, "a host failed, so the play must fail"
    assert used(healthy) == [0] * 8 and none_alive(tree["workers"]), "one host's failure does not stop the others"
    assert used(broken) == [0, 2048] + [0] * 6
    assert "gpu-node-01" in out and "651203 MiB freed" in out and "7 process" in out
    assert "gpu-node-02" in out and "GPU 1" in out and "no process" in out
    assert canaries.alive(), canaries.dead()


# ---- process trees that real hosts have (gpusim tree): what may be signalled, and what must not


def node(key, title, *children, **extra):
    return dict({"key": key, "title": title, "children": list(children)}, **extra)


def holds(gpu, mib, *flags):
    return [{"gpu": gpu, "mib": mib, "flags": list(flags)}]


def tree(host, root):
    return host.gpusim_json("tree", "--spec", json.dumps(root))


def test_ray_job_ends_the_holder_not_the_node(make_host, inventory, tmp_path, canaries):
    """raylet -> ray::JobSupervisor -> /bin/sh -c -> python eval.py (the holder), a ray::ServeReplica beside it."""
    host = make_host()
    pids = tree(host, node("raylet", "/usr/local/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet --node-manager-port=0",
                           node("supervisor", "ray::JobSupervisor",
                                node("shell", "/bin/sh -c python eval.py --shard 0", node("eval", "python eval.py --shard 0", hold=holds(0, 20000)),
                                     comm="sh")),
                           node("replica", "ray::ServeReplica:app:Model", hold=holds(1, 30000))))
    canaries.hold(host, 7)
    result = reclaim(host, inventory, tmp_path, {"gpus": ["0"]})
    assert result.get("verified") is True, result
    assert [k["pid"] for k in result["killed"]] == [pids["eval"]]
    assert not pid_alive(pids["eval"])
    assert all(pid_alive(pids[key]) for key in ("raylet", "supervisor", "shell", "replica"))
    assert used(host) == [0, 30000] + [0] * 5 + [2048]
    assert canaries.alive(), canaries.dead()


def test_ray_head_ends_the_gpu_actors_not_the_cluster(make_host, inventory, tmp_path, canaries):
    host = make_host()
    ray = "/usr/local/lib/python3.11/site-packages/ray"
    pids = tree(host, node("start", "/usr/bin/python3 /usr/local/bin/ray start --head --block",
                           node("gcs", ray + "/core/src/ray/gcs/gcs_server --gcs_server_port=6379"),
                           node("dashboard", "/usr/bin/python3 -u %s/dashboard/dashboard.py --host=127.0.0.1" % ray),
                           node("raylet", ray + "/core/src/ray/raylet/raylet --node-manager-port=0",
                                node("agent", "/usr/bin/python3 -u %s/dashboard/agent.py --node-ip-address=10.0.0.1" % ray),
                                node("w0", "ray::RayWorkerWrapper", hold=holds(0, 40000)),
                                node("w1", "ray::RayWorkerWrapper", hold=holds(1, 40000)),
                                node("idle", "ray::IDLE"),
                                node("cpu", "ray::OtherJobCpuActor.run"))))
    canaries.hold(host, 7)
    result = reclaim(host, inventory, tmp_path, {"gpus": ["0", "1"]})
    assert result.get("verified") is True, result
    assert sorted(k["pid"] for k in result["killed"]) == sorted([pids["w0"], pids["w1"]])
    assert all(pid_alive(pids[key]) for key in ("start", "gcs", "dashboard", "raylet", "agent", "idle", "cpu"))
    assert used(host)[:2] == [0, 0]
    assert canaries.alive(), canaries.dead()


def test_exclusions_match_the_program_not_the_arguments(make_host, inventory, tmp_path, canaries):
    host = make_host()
    health = tree(host, node("holder", "/usr/bin/python3 serve.py --health-cmd nvidia-smi", hold=holds(2, 9000)))
    server = tree(host, node("server", "/usr/bin/python3 /usr/local/bin/vllm serve --model /models/dcgm-tuned",
                             node("worker", "VLLM::Worker_TP0", hold=holds(3, 9000))))
    canaries.hold(host, 7)
    result = reclaim(host, inventory, tmp_path, {"gpus": ["2", "3"]})
    assert result.get("verified") is True, result
    assert {k["pid"] for k in result["killed"]} == {health["holder"], server["server"], server["worker"]}
    assert not any(pid_alive(p) for p in (health["holder"], server["server"], server["worker"]))
    assert used(host)[2:4] == [0, 0]
    assert canaries.alive(), canaries.dead()


def test_excluded_holder_above_the_threshold_fails_naming_it(make_host, inventory, tmp_path, canaries):
    host = make_host()
    pids = tree(host, node("dcgm", "/usr/bin/nv-hostengine -n --service-account nvidia-dcgm", hold=holds(3, 5000)))
    canaries.hold(host, 7)
    before = host.snapshot()
    result = reclaim(host, inventory, tmp_path, {"gpus": ["3"]})
    assert host.snapshot() == before and used(host)[3] == 5000
    assert result["failed"] is True and result["changed"] is False
    assert "GPU 3" in result["msg"] and str(pids["dcgm"]) in result["msg"] and "excluded" in result["msg"]
    assert pid_alive(pids["dcgm"])
    assert canaries.alive(), canaries.dead()


def test_mps_client_is_a_holder_and_keeps_its_tree_alive(make_host, inventory, tmp_path, canaries):
    """A worker listed only as an MPS client of GPU 1 holds GPU 1: reclaiming GPU 0 must not end it as a descendant."""
    host = make_host()
    pids = tree(host, node("server", "/usr/bin/python3 /usr/local/bin/vllm serve /models/m --tensor-parallel-size 2",
                           node("tp0", "VLLM::Worker_TP0", hold=holds(0, 800)),
                           node("tp1", "VLLM::Worker_TP1", hold=holds(1, 60000, "mps"))))
    assert host.status()["gpus"][1]["used_mib"] == 60000
    canaries.hold(host, 7)
    result = reclaim(host, inventory, tmp_path, {"gpus": ["0"]})
    assert result.get("verified") is True, result
    assert [k["pid"] for k in result["killed"]] == [pids["tp0"]]
    assert pid_alive(pids["tp1"]) and pid_alive(pids["server"])
    assert any("ended the holder only" in w for w in result.get("warnings", [])), result.get("warnings")
    alone = reclaim(host, inventory, tmp_path, {"gpus": ["1"]})
    assert alone.get("verified") is True, alone
    assert pids["tp1"] in {k["pid"] for k in alone["killed"]} and not pid_alive(pids["tp1"])
    assert used(host)[:2] == [0, 0]
    assert canaries.alive(), canaries.dead()


def test_timeout_bounds_the_whole_task(make_host, inventory, tmp_path, canaries):
    host = make_host()
    pids = tree(host, node("holder", "python3 stubborn.py", hold=holds(0, 10000), ignore_term=True))
    canaries.hold(host, 7)
    result = reclaim(host, inventory, tmp_path, {"gpus": ["0"], "grace": 20, "timeout": 3})
    assert result.get("verified") is True, result
    assert [(k["pid"], k["signal"]) for k in result["killed"]] == [(pids["holder"], "SIGKILL")]
    # the exact bound (timeout + settle) is the unit tests' (_reclaim/test_ladder.py, with an injected clock); here only
    # what a loaded machine cannot blur: SIGKILL came long before one grace of 20 s was over
    assert result["elapsed_s"] < 20, "grace 20 must not outlast timeout 3"
    assert not pid_alive(pids["holder"]) and used(host)[0] == 0
    assert canaries.alive(), canaries.dead()


def test_respawned_holder_is_ended_and_the_gpu_stays_free(make_host, inventory, tmp_path, canaries):
    """On SIGTERM the holder forks a child that allocates 0.3 s later, then exits."""
    host = make_host()
    pids = tree(host, node("holder", "python3 respawner.py", hold=holds(0, 10000), respawn={"delay": 0.3}))
    canaries.hold(host, 7)
    result = reclaim(host, inventory, tmp_path, {"gpus": ["0"], "settle": 1})
    assert result.get("verified") is True, result
    roles = {k["role"] for k in result["killed"]}
    assert pids["holder"] in {k["pid"] for k in result["killed"]} and "respawned" in roles, result["killed"]
    time.sleep(1)
    assert used(host)[0] == 0 and host.holders(0) == [] and not pid_alive(pids["holder"])
    assert canaries.alive(), canaries.dead()


def respawned_records(host):
    """(pid, start time) of every process the simulator recorded as a respawn (role tree_respawned)."""
    return [(record.pid, record.starttime) for record in host.records() if record.role == "tree_respawned"]


def test_holder_daemonized_as_its_worker_dies_fails_the_run_naming_it(make_host, inventory, tmp_path, canaries):
    """On SIGTERM the worker daemonizes a child (setsid, a second fork: in no process group or session of the tree, its
    parent gone before it holds anything) that takes GPU 0 0.3 s later, then exits. No lineage the run can prove leads
    to it, so it is never ended; the run must fail naming it and its worker, never verify. Then a plain holder on
    GPU 1 of the same host (no respawn) is still verified free at the first free reading."""
    host = make_host()
    worker = "python3 /opt/jobs/worker.py --rank 0"
    pids = tree(host, node("worker", worker, hold=holds(0, 40000), respawn={"delay": 0.3, "detach": True}))
    plain = tree(host, node("plain", "python3 /opt/jobs/eval.py --shard 1", hold=holds(1, 20000)))
    canaries.hold(host, 7)
    try:
        result = reclaim(host, inventory, tmp_path, {"gpus": ["0"]})
        alive = [pid for pid, start in respawned_records(host) if pid_alive(pid, start)]
        assert len(alive) == 1 and alive[0] != pids["worker"], (respawned_records(host), result["msg"])
        child = alive[0]
        assert wait_for(lambda: host.holders(0) == [child] and used(host)[0] == 40000, timeout=10), host.status()
        assert not pid_alive(pids["worker"]) and pid_alive(plain["plain"]) and used(host)[1] == 20000
        assert result["failed"] is True and result.get("verified") is False, result
        assert "pid %d" % child in result["msg"] and "PID %d" % pids["worker"] in result["msg"], result["msg"]
        assert child not in {k["pid"] for k in result["killed"]}, "a process no proven lineage leads to is never signalled"
        suspects = {c["pid"]: c for c in result["respawn_watch"]["candidates"]}
        assert suspects[child]["forked_by"] == pids["worker"], suspects
        again = reclaim(host, inventory, tmp_path, {"gpus": ["1"]})
        assert again.get("verified") is True, again["msg"]
        assert used(host)[1] == 0 and host.holders(1) == [] and not pid_alive(plain["plain"])
        recorded = {record.pid for record in host.records()}
        assert not recorded & {c["pid"] for c in again["respawn_watch"]["candidates"]}, "a plain holder leaves nothing to watch"
        assert pid_alive(child), "a run on GPU 1 leaves GPU 0's holder alone"
    finally:
        for pid, start in respawned_records(host):
            if pid_alive(pid, start):
                os.kill(pid, signal.SIGKILL)
    assert canaries.alive(), canaries.dead()


def test_driver_teardown_lag_is_waited_for(make_host, inventory, tmp_path, canaries):
    host = make_host()
    host.gpusim("teardown-lag", "--ms", "1500")
    tree_pids = serve(host, canaries, 2, mib=20000)
    result = reclaim(host, inventory, tmp_path)
    assert result.get("verified") is True, result
    assert result["elapsed_s"] >= 1.4, "the memory stays listed 1.5 s after the exits"
    assert {k["pid"] for k in result["killed"]} == {tree_pids["parent"], *tree_pids["workers"]}
    assert used(host)[:2] == [0, 0] and none_alive(members(tree_pids))
    short = make_host("gpu-node-02")
    short.gpusim("teardown-lag", "--ms", "5000")
    short.gpusim_json("vllm", "--tp", "1", "--mib", "20000")
    failed = reclaim(short, inventory, tmp_path, {"timeout": 2})
    assert failed["failed"] is True and "has not released its memory" in failed["msg"]
    assert canaries.alive(), canaries.dead()


def test_check_mode_predicts_zombies_orphans_and_left_alone_holders(make_host, inventory, tmp_path, canaries):
    host = make_host()
    stuck = host.gpusim_json("stuck", "--gpu", "2", "--mib", "5000")
    os.kill(stuck["holder"], signal.SIGKILL)  # ours (just started); its keeper never reaps it: a zombie that keeps the memory
    assert wait_for(lambda: host.status()["gpus"][2]["holders"] and host.status()["gpus"][2]["holders"][0]["state"] == "Z")
    host.gpusim_json("vllm", "--tp", "1", "--first-gpu", "0", "--mib", "20000")
    host.gpusim("orphan", "--gpu", "0", "--mib", "4096")
    kept = tree(host, node("kept", "python3 keep-me.py", hold=holds(1, 7000)))
    args = {"gpus": ["0", "1", "2"], "exclude": ["keep-me"]}
    canaries.hold(host, 7)
    before = host.snapshot()
    check = reclaim(host, inventory, tmp_path, args, "--check", "--diff")
    assert host.snapshot() == before, "check mode changed the host"
    fails = " | ".join(check["would_fail"])
    assert "GPU 0" in fails and "no process" in fails, fails
    assert "GPU 1" in fails and str(kept["kept"]) in fails, fails
    assert "GPU 2" in fails and "zombie" in fails, fails
    assert "GPU 1: 7000 MiB used, python3(pid %d)" % kept["kept"] in check["diff"]["after"], check["diff"]["after"]
    assert "GPU 0: 4096 MiB used, no holder" in check["diff"]["after"], check["diff"]["after"]
    real = reclaim(host, inventory, tmp_path, dict(args, timeout=3))
    assert real["failed"] is True and real["changed"] == check["changed"]
    assert pid_alive(kept["kept"]) and used(host)[:3] == [4096, 7000, 5000]
    assert canaries.alive(), canaries.dead()


def test_killed_counts_every_process_of_the_tree(make_host, inventory, tmp_path, canaries):
    host = make_host()
    tree_pids = serve(host, canaries, 8, engine_core=True, mib=1000)
    result = reclaim(host, inventory, tmp_path)
    assert result.get("verified") is True, result
    ended = {k["pid"]: k for k in result["killed"]}
    assert {tree_pids["parent"], tree_pids["engine_core"], *tree_pids["workers"]} <= set(ended)
    assert all(k["signal"] or k["ended"] == "exited after its launcher was signalled" for k in ended.values())
    assert "ended %d process(es)" % len(ended) in result["msg"]
    assert used(host) == [0] * 8 and none_alive(members(tree_pids))
    assert canaries.alive(), canaries.dead()


VLLM_MATCH = [r"^VLLM::", r"vllm\.entrypoints\.", r"(^|/)vllm\s+serve(\s|$)"]  # the role's vllm_server_reclaim_match


def colleague_job(host, canaries, gpu=3, mib=12000):
    """A colleague's offline job: a live `python3 batch_infer.py` whose child VLLM::Worker_TP0 holds ``gpu``."""
    job = host.spawn_tree({"key": "batch", "title": "python3 batch_infer.py --input prompts.jsonl",
                           "children": [{"key": "worker", "title": "VLLM::Worker_TP0", "hold": [{"gpu": gpu, "mib": mib}]}]})
    canaries.watch("the colleague's batch_infer.py", job["batch"])
    canaries.watch("the colleague's VLLM::Worker_TP0", job["worker"])
    assert parent_pid(job["worker"]) == job["batch"]
    return job


def test_orphans_only_ends_the_incidents_orphans_never_a_colleagues_vllm_job(make_host, inventory, tmp_path, canaries):
    """A colleague's VLLM::Worker_TP0 below its live batch_infer.py beside the incident's orphans: with orphans_only,
    check mode names it in would_fail and foreign; a real run ends the incident's orphans only and fails naming it."""
    host = make_host()
    tree = host.spawn_vllm(8, mib=20000)
    host.incident()
    job = colleague_job(host, canaries)
    before = host.snapshot()
    args = {"match": VLLM_MATCH, "orphans_only": True}
    check = reclaim(host, inventory, tmp_path, args, "--check")
    assert {k["pid"] for k in check["would_kill"]} == set(tree["workers"][1:]), check["would_kill"]
    assert len(check["would_fail"]) == 1, check["would_fail"]
    assert "GPU 3: pid %d (VLLM::Worker_TP0) holds 12000 MiB: not signalled: belongs to live PID %d (python3 batch_infer.py" % (
        job["worker"], job["batch"]) in check["would_fail"][0]
    (foreign,) = check["foreign"]
    assert (foreign["pid"], foreign["gpus"], foreign["parent"]["pid"]) == (job["worker"], [3], job["batch"]), foreign
    assert foreign["reason"].startswith("PID %d VLLM::Worker_TP0 on GPU 3 belongs to live PID %d (python3 batch_infer.py" % (
        job["worker"], job["batch"]))
    assert host.snapshot() == before
    result = reclaim(host, inventory, tmp_path, args)
    assert result["failed"] is True and result["verified"] is False
    assert {k["pid"] for k in result["killed"]} == set(tree["workers"][1:])
    assert none_alive(tree["workers"])
    assert host.holders(3) == [job["worker"]] and used(host) == [0, 0, 0, 12000, 0, 0, 0, 0]  # the simulator's reading
    assert "pid %d" % job["worker"] in result["msg"] and "batch_infer.py" in result["msg"], result["msg"]
    assert canaries.alive(), canaries.dead()


def test_orphans_only_takes_a_live_server_below_a_wrapper_only_as_its_owner(make_host, inventory, tmp_path, canaries):
    """A server below a live wrapper script is someone's job; given as owner (PID and start time) it is ended, whole."""
    host = make_host()
    tree = serve(host, canaries, 4, mib=20000)
    before = host.snapshot()
    created = psutil.Process(tree["parent"]).create_time()
    args = {"match": VLLM_MATCH, "orphans_only": True, "gpus": ["0", "1", "2", "3"]}
    for owner in (None, {"pid": tree["parent"], "create_time": created - 5}):  # none, or a reused PID's start time
        refused = reclaim(host, inventory, tmp_path, dict(args, **({"owner": owner} if owner else {})), "--check")
        assert refused["would_kill"] == [] and len(refused["would_fail"]) == 4, refused
        assert {f["pid"] for f in refused["foreign"]} == set(tree["workers"])
        assert {f["parent"]["pid"] for f in refused["foreign"]} == {tree["wrapper"]}
        assert {f["launcher"] for f in refused["foreign"]} == {tree["parent"]}
    assert host.snapshot() == before
    result = reclaim(host, inventory, tmp_path, dict(args, owner={"pid": tree["parent"], "create_time": created}))
    assert result.get("verified") is True, result
    assert {k["pid"] for k in result["killed"]} == {tree["parent"], *tree["workers"]} and result["foreign"] == []
    assert used(host)[:4] == [0] * 4 and none_alive(members(tree))
    assert canaries.alive(), canaries.dead()  # the wrapper, the sibling and the reaper among them


@SHARES_THE_UNTOUCHED_SERVER
def test_bad_owner_fails_naming_it_and_nothing_is_touched(untouched, inventory, tmp_path, canaries):
    host, tree = untouched_server(untouched, canaries)
    before = host.snapshot()
    result = reclaim(host, inventory, tmp_path, {"owner": {"pid": 1}, "orphans_only": True})
    assert result["failed"] is True and result.get("changed") is False
    assert "owner.pid: 1 is not the PID of a server" in result["msg"], result["msg"]
    assert host.snapshot() == before and all(pid_alive(p) for p in members(tree)) and not untouched.gone()
    assert canaries.alive(), canaries.dead()


SUPERVISE = "python3 /opt/jobs/supervise.py --restart always"
MODEL_JOB = "python3 /opt/jobs/serve_model.py --shard 0"


def supervised(host, canaries, **restart):
    """GPU 0 held by a job below a live supervisor that starts it again 0.1 s after it exits (once); the restarted
    process holds its memory 0.3 s after it started. The supervisor is a canary: this run never signals it."""
    pids = tree(host, node("supervisor", SUPERVISE, node("job", MODEL_JOB, hold=holds(0, 10000)),
                           restart_children=dict({"delay": 0.1, "limit": 1, "hold_delay": 0.3}, **restart)))
    canaries.watch("the supervisor above the job", pids["supervisor"])
    canaries.hold(host, 7)
    return pids


def respawned_child(parent, old):
    """The supervisor's child that is not ``old`` (its replacement), or None."""
    return next((child.pid for child in psutil.Process(parent).children() if child.pid != old), None)


def test_holder_respawned_by_its_parent_after_sigterm_is_caught_and_ended(make_host, inventory, tmp_path, canaries):
    host = make_host()
    pids = supervised(host, canaries)
    result = reclaim(host, inventory, tmp_path, {"gpus": ["0"]})
    assert result.get("verified") is True, result
    killed = {k["pid"]: k for k in result["killed"]}
    assert killed[pids["job"]]["signal"] == "SIGTERM"
    respawns = [pid for pid, k in killed.items() if k["role"] == "respawned"]
    assert len(respawns) == 1 and respawns[0] != pids["job"], result["killed"]
    time.sleep(1)  # the replacement would hold GPU 0 0.3 s after it started
    assert used(host)[0] == 0 and host.holders(0) == [], "the respawned job holds GPU 0"
    assert not pid_alive(pids["job"]) and not pid_alive(respawns[0])
    assert wait_for(lambda: respawned_child(pids["supervisor"], pids["job"]) is None), "the supervisor reaps what was ended"
    assert [p["pid"] for p in result["respawn_watch"]["parents"]] == [pids["supervisor"]]
    assert canaries.alive(), canaries.dead()


def test_respawn_that_the_run_may_not_end_is_never_a_success(make_host, inventory, tmp_path, canaries):
    """`match` takes the job, not what the supervisor starts in its place: the run fails naming both, and the
    simulator's own reading shows why (the replacement holds GPU 0)."""
    host = make_host()
    pids = supervised(host, canaries, title="python3 /opt/jobs/other_job.py")
    result = reclaim(host, inventory, tmp_path, {"gpus": ["0"], "match": ["serve_model"]})
    assert result["failed"] is True and result.get("verified") is False, result
    replacement = respawned_child(pids["supervisor"], pids["job"])
    assert replacement is not None and pid_alive(replacement)
    canaries.watch("the replacement this run may not end", replacement)
    assert "pid %d" % replacement in result["msg"] and "forked by PID %d" % pids["supervisor"] in result["msg"], result["msg"]
    assert wait_for(lambda: host.holders(0) == [replacement], timeout=10), host.holders(0)
    assert used(host)[0] == 10000 and not pid_alive(pids["job"])
    assert canaries.alive(), canaries.dead()


def timed_module_run(host, args, watched):
    """gpu_reclaim's module run as Ansible starts it on a host (python3 -m the module with its arguments file), timed
    by this test: (seconds from the last exit among ``watched``, as this test saw it polling /proc, to the module's
    return; the result)."""
    args_file = host.state.parent / "reclaim-args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=str(REPO / ".collections"), **host.environment())
    proc = subprocess.Popen([BIN / "python3", "-m", "ansible_collections.gpuops.fleet.plugins.modules.gpu_reclaim", str(args_file)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    alive = set(watched)
    last_exit = None
    while proc.poll() is None:
        gone = {pid for pid in alive if not pid_alive(pid)}
        if gone:
            last_exit, alive = time.monotonic(), alive - gone
        time.sleep(0.002)
    returned = time.monotonic()
    out, err = proc.communicate()
    assert not alive and last_exit is not None, "holders still alive: %s; %s" % (sorted(alive), err)
    return returned - last_exit, json.loads(out)


def test_nothing_that_can_respawn_means_no_fixed_wait(make_host, canaries):
    """The server's parent is the simulator's reaper (an adopter): nothing can respawn it. Timed here, from the slowest
    exit to the module's return: with settle auto, well under what a fixed settle of 3 s costs on an identical host.
    Generous on purpose (a loaded machine adds a second to a module's run): bench/bench_gpu_reclaim.py carries the
    tight figure, and the unit tests the exact rule (no window at all)."""
    gaps = {}
    for settle, name in (("auto", "gpu-node-01"), (3, "gpu-node-02")):
        host = make_host(name)
        server = host.spawn_vllm(4, mib=20000)
        canaries.hold(host, 7)
        gaps[settle], result = timed_module_run(host, {"gpus": ["0", "1", "2", "3"], "settle": settle}, members(server))
        assert result.get("verified") is True, result
        assert used(host)[:4] == [0] * 4 and none_alive(members(server))
    assert gaps[3] >= 3.0, gaps
    assert gaps["auto"] < gaps[3] - 1.5, "settle auto waited like a fixed window: %s" % gaps
    assert canaries.alive(), canaries.dead()


@SHARES_THE_UNTOUCHED_SERVER
def test_bad_settle_fails_naming_it_and_nothing_is_signalled(untouched, inventory, tmp_path, canaries):
    host, server = untouched_server(untouched, canaries)
    before = host.snapshot()
    result = reclaim(host, inventory, tmp_path, {"settle": "soon"})
    assert result["failed"] is True and result.get("changed") is False
    assert result["msg"].startswith("settle: 'soon' is neither auto nor a number of seconds"), result["msg"]
    assert host.snapshot() == before and all(pid_alive(p) for p in members(server)) and not untouched.gone()
    assert canaries.alive(), canaries.dead()
