# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which processes gpu_reclaim may end, on a fake process table: holders, launchers and their trees, never anything else."""

from __future__ import annotations

import types

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host import process_table as _process_table
from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import describe_process
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.plan import plan_targets
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_psutil import FakeClock, FakePsutil, host_rows, ME, Row, vllm_server
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils._reclaim.test_spec import spec

NEVER = {1, 50, 51, ME, 900, 901, 902}  # PID 1, the Ansible connection, this module, canary, look-alike, driver helper


@pytest.fixture(autouse=True)
def this_pid(monkeypatch):
    """protected_pids() asks os.getpid(); in the fake table this module is ME."""
    monkeypatch.setattr(_process_table, "os", types.SimpleNamespace(getpid=lambda: ME))


def fake(*extra):
    return FakePsutil(host_rows() + [row for rows in extra for row in rows], FakeClock())


def holders_of(psutil, gpu_of):
    """plan_targets' ``holders``: pid -> description with the selected GPUs it holds."""
    holders = {}
    for pid, gpu in gpu_of.items():
        holders.setdefault(pid, dict(describe_process(psutil, pid), gpus=[]))["gpus"].append(gpu)
    return holders


def plan(psutil, gpu_of, selected=range(8), other_holders=None, **options):
    return plan_targets(psutil, spec(**options), holders_of(psutil, gpu_of), set(selected), other_holders or {})


def roles(result):
    return [(tg.pid, tg.role, tg.depth) for tg in result.targets]


def test_incident_tree_is_taken_launcher_first():
    rows, workers = vllm_server(1000, range(8))
    result = plan(fake(rows), workers)
    assert roles(result)[:3] == [(1000, "launcher", 0), (1001, "descendant", 1), (1002, "descendant", 1)]
    assert sorted(roles(result)[3:]) == [(pid, "holder", 2) for pid in sorted(workers)]
    by_pid = {tg.pid: tg for tg in result.targets}
    assert by_pid[1013].gpus == [3] and by_pid[1013].name == "VLLM::Worker_TP3"
    assert by_pid[1000].gpus == [] and by_pid[1000].cmdline[:3] == ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert by_pid[1000].create_time == 1000.0 and by_pid[1000].username == "vllm"
    assert result.warnings == [] and result.left_alone == {}
    assert not NEVER & set(by_pid)


def test_launcher_is_the_highest_matching_ancestor_not_the_nearest():
    # VLLM::EngineCore matches the launcher patterns too, but the API server above it is the one that respawns
    rows, workers = vllm_server(1000, [0])
    result = plan(fake(rows), workers)
    assert result.targets[0].pid == 1000 and result.targets[0].role == "launcher"
    assert [tg.role for tg in result.targets].count("launcher") == 1


def test_launcher_above_a_plain_shell_is_found_and_the_shell_is_not_taken():
    rows = [Row(2000, 1, "bash", ["bash", "run.sh"]),
            Row(2001, 2000, "torchrun", ["/usr/bin/python3", "/usr/local/bin/torchrun", "--nproc-per-node", "2", "serve.py"]),
            Row(2010, 2001, "python3", ["/usr/bin/python3", "serve.py", "--rank", "0"]),
            Row(2011, 2001, "python3", ["/usr/bin/python3", "serve.py", "--rank", "1"])]
    result = plan(fake(rows), {2010: 0, 2011: 1})
    assert roles(result) == [(2001, "launcher", 0), (2010, "holder", 1), (2011, "holder", 1)]


@pytest.mark.parametrize("wrapper", [
    ["SCREEN", "-dmS", "llm", "python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"],
    ["bash", "-c", "python3 -m vllm.entrypoints.openai.api_server --model m; echo done"],
    ["tmux", "new", "-d", "vllm serve m"],
])
def test_wrapper_that_mentions_the_server_is_not_its_launcher(wrapper):
    """A screen/tmux/shell wrapper names the server in its arguments; its other children (a canary) must survive."""
    rows, workers = vllm_server(1000, range(2), parent=3000)
    rows += [Row(3000, 1, wrapper[0], wrapper), Row(3001, 3000, "sleep", ["sleep", "600"])]
    result = plan(fake(rows), workers)
    taken = {tg.pid for tg in result.targets}
    assert result.targets[0].pid == 1000 and result.targets[0].role == "launcher"
    assert not {3000, 3001} & taken


def test_reparented_workers_are_ended_alone():
    # the incident after the broken cleanup: the API server SIGKILLed, its workers adopted by PID 1
    rows, workers = vllm_server(1000, range(8), engine_core=False, parent=1)
    survivors = [row for row in rows if row.pid in workers]
    for row in survivors:
        row.ppid = 1
    result = plan(fake(survivors), workers)
    assert sorted(tg.pid for tg in result.targets) == sorted(workers)
    assert not NEVER & {tg.pid for tg in result.targets}


def test_holder_without_launcher_is_ended_alone():
    rows = [Row(3000, 1, "bash", ["bash"]), Row(3001, 3000, "python3", ["python3", "notebook_cell.py"]),
            Row(3002, 3000, "python3", ["python3", "sibling.py"])]
    result = plan(fake(rows), {3001: 0})
    assert roles(result) == [(3001, "holder", 0)]


def test_kill_tree_false_ends_the_holders_only():
    rows, workers = vllm_server(1000, range(2))
    result = plan(fake(rows), workers, kill_tree=False)
    assert roles(result) == [(1010, "holder", 0), (1011, "holder", 0)]


def test_second_server_outside_the_selection_is_not_touched():
    first, first_workers = vllm_server(1000, range(4))
    second, second_workers = vllm_server(5000, range(4, 8))
    psutil = fake(first, second)
    result = plan(psutil, first_workers, selected=range(4), other_holders={pid: [gpu] for pid, gpu in second_workers.items()})
    pids = {tg.pid for tg in result.targets}
    assert pids == {1000, 1001, 1002} | set(first_workers)
    assert result.warnings == []


def test_raylet_is_a_cluster_daemon_never_a_launcher():
    # one Ray cluster serving GPUs 0-3 and 4-7: ending the raylet would take the other half too
    rows = [Row(6000, 1, "raylet", ["/usr/local/lib/ray/core/src/ray/raylet/raylet", "--node-manager-port=0"])]
    rows += [Row(6010 + gpu, 6000, "ray::RayWorkerWrapper", ["ray::RayWorkerWrapper"]) for gpu in range(8)]
    psutil = fake(rows)
    result = plan(psutil, {6010 + gpu: gpu for gpu in range(4)}, selected=range(4),
                  other_holders={6010 + gpu: [gpu] for gpu in range(4, 8)})
    assert roles(result) == [(6010 + gpu, "holder", 0) for gpu in range(4)]
    assert result.warnings == []


def test_tree_holding_a_gpu_outside_the_selection_is_not_taken():
    # one torchrun job whose workers hold GPUs 0-3 and 4-7: ending torchrun would take the other half too
    rows = [Row(6000, 1, "torchrun", ["/usr/bin/python3", "/usr/local/bin/torchrun", "--nproc-per-node", "8", "train.py"])]
    rows += [Row(6010 + gpu, 6000, "python3", ["/usr/bin/python3", "train.py", "--rank", str(gpu)]) for gpu in range(8)]
    psutil = fake(rows)
    result = plan(psutil, {6010 + gpu: gpu for gpu in range(4)}, selected=range(4),
                  other_holders={6010 + gpu: [gpu] for gpu in range(4, 8)})
    assert roles(result) == [(6010 + gpu, "holder", 0) for gpu in range(4)]
    assert result.warnings, "the operator must be told why the launcher was left"
    assert "pid 6010 (python3)" in result.warnings[0] and "6014, 6015, 6016, 6017" in result.warnings[0]
    assert "ended the holder only" in result.warnings[0]


def test_tree_holding_a_selected_gpu_through_an_excluded_process_is_not_taken():
    # TP1 is excluded (never signalled); ending its EngineCore and API server would end it all the same
    rows, workers = vllm_server(1000, range(2))
    result = plan(fake(rows), workers, exclude=["Worker_TP1$"])
    assert result.left_alone == {1011: "matches `exclude`"}
    assert roles(result) == [(1010, "holder", 0)]
    assert "1011" in result.warnings[0] and "ended the holder only" in result.warnings[0]


def test_holder_also_holding_a_gpu_outside_the_selection_is_left_alone():
    rows, workers = vllm_server(1000, [0, 1])
    result = plan(fake(rows), workers, selected=[0, 1], other_holders={1011: [5, 6]})
    assert 1011 not in {tg.pid for tg in result.targets}
    assert result.left_alone[1011] == "also holds GPU 5, 6, outside `gpus`"


def test_match_selects_holders():
    rows, workers = vllm_server(1000, [0])
    other = [Row(3001, 1, "python3", ["python3", "train.py"])]
    result = plan(fake(rows, other), {**workers, 3001: 1}, match=["^VLLM::"])
    assert 3001 not in {tg.pid for tg in result.targets}
    assert result.left_alone == {3001: "does not match `match`"}
    assert 1010 in {tg.pid for tg in result.targets}


@pytest.mark.parametrize("pid", [1, ME, 51])
def test_protected_holder_is_never_a_target(pid):
    result = plan(fake(), {pid: 0})
    assert result.targets == []
    assert result.left_alone[pid].startswith("protected")


def test_driver_helper_holding_memory_is_never_a_target():
    result = plan(fake(), {902: 0})
    assert result.targets == [] and result.left_alone == {902: "a driver helper or GPU monitor (always excluded)"}


def test_search_for_the_launcher_stops_at_an_excluded_ancestor():
    rows, workers = vllm_server(1000, [0])
    result = plan(fake(rows), workers, exclude=["api_server"])
    pids = {tg.pid for tg in result.targets}
    assert 1000 not in pids and 1002 not in pids
    assert result.targets[0].pid == 1001 and result.targets[0].role == "launcher"


def test_search_for_the_launcher_stops_at_this_modules_ancestors():
    # a launcher run in the foreground of the Ansible connection: the connection must survive
    rows = [Row(51, 50, "torchrun", ["torchrun", "serve.py"]), Row(ME, 51, "python3", ["python3"]),
            Row(4000, 51, "python3", ["python3", "serve.py"])]
    psutil = fake()
    psutil.table.update((row.pid, row) for row in rows)
    result = plan(psutil, {4000: 0})
    assert roles(result) == [(4000, "holder", 0)]


def test_excluded_and_protected_descendants_are_not_taken():
    rows, workers = vllm_server(1000, [0])
    rows.append(Row(1003, 1000, "nvidia-smi", ["nvidia-smi", "-l", "1"]))
    rows.append(Row(1004, 1003, "cat", ["cat"]))  # below an excluded process: not reached either
    result = plan(fake(rows), workers)
    pids = {tg.pid for tg in result.targets}
    assert 1000 in pids and 1003 not in pids and 1004 not in pids


def test_holder_gone_before_planning_is_still_listed_alone():
    rows, workers = vllm_server(1000, [0, 1])
    psutil = fake(rows)
    holders = holders_of(psutil, workers)
    del psutil.table[1010]
    result = plan_targets(psutil, spec(), holders, {0, 1}, {})
    by_pid = {tg.pid: tg for tg in result.targets}
    assert by_pid[1010].role == "holder"  # the ladder then finds it gone and signals nothing
    assert by_pid[1000].role == "launcher" and 1011 in by_pid


def test_ray_job_climb_stops_at_the_shell():
    """raylet -> ray::JobSupervisor -> /bin/sh -c -> python eval.py (the holder), a ray::ServeReplica beside it."""
    rows = [Row(7000, 1, "raylet", ["/usr/lib/ray/raylet", "--node-manager-port=0"]),
            Row(7001, 7000, "ray::JobSupervisor", ["ray::JobSupervisor"]),
            Row(7002, 7001, "sh", ["/bin/sh", "-c", "python eval.py"]),
            Row(7003, 7002, "python", ["python", "eval.py"]),
            Row(7004, 7000, "ray::ServeReplica", ["ray::ServeReplica"])]
    result = plan(fake(rows), {7003: 0})
    assert roles(result) == [(7003, "holder", 0)]


def test_ray_head_is_never_a_launcher_even_under_a_launcher_pattern():
    rows = [Row(8000, 1, "ray", ["/usr/bin/python3", "/usr/local/bin/ray", "start", "--head", "--block"]),
            Row(8001, 8000, "gcs_server", ["/usr/lib/ray/gcs_server"]),
            Row(8002, 8000, "raylet", ["/usr/lib/ray/raylet"]),
            Row(8010, 8002, "ray::RayWorkerWrapper", ["ray::RayWorkerWrapper"]),
            Row(8011, 8002, "ray::IDLE", ["ray::IDLE"])]
    # even a user who calls every ray:: process a launcher does not get the cluster: raylet stops the climb
    result = plan(fake(rows), {8010: 0}, launcher_patterns=["^ray::", "raylet", "ray start"])
    assert roles(result) == [(8010, "holder", 0)]


def test_launcher_chain_must_be_unbroken():
    # vllm serve -> bash wrapper -> VLLM::Worker_TP0: the wrapper breaks the chain, so vllm serve is not taken
    rows = [Row(9000, 1, "vllm", ["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "m"]),
            Row(9001, 9000, "bash", ["bash", "-c", "run-worker"]),
            Row(9002, 9001, "VLLM::Worker_TP0", ["VLLM::Worker_TP0"])]
    result = plan(fake(rows), {9002: 0})
    assert roles(result) == [(9002, "holder", 0)]


def test_holder_without_launcher_takes_its_own_children():
    rows = [Row(9100, 1, "python3", ["python3", "train.py"]),
            Row(9101, 9100, "python3", ["python3", "-c", "from multiprocessing.spawn import spawn_main"])]
    result = plan(fake(rows), {9100: 0})
    assert roles(result) == [(9100, "holder", 0), (9101, "descendant", 1)]


@pytest.mark.parametrize("cmdline, excluded", [
    (["/usr/bin/python3", "serve.py", "--health-cmd", "nvidia-smi"], False),
    (["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "--model", "/models/dcgm-tuned"], False),
    (["/usr/bin/nvidia-smi", "-l", "1"], True),
    (["/usr/bin/nv-hostengine", "-n"], True),
    (["/usr/bin/dcgm-exporter"], True),
    (["nvidia-cuda-mps-server"], True),
])
def test_builtin_exclusions_match_the_program(cmdline, excluded):
    rows = [Row(9200, 1, cmdline[0].rsplit("/", 1)[-1][:15], cmdline)]
    result = plan(fake(rows), {9200: 0})
    assert (9200 in result.left_alone) is excluded
    assert (9200 in {tg.pid for tg in result.targets}) is not excluded


def test_a_runtimes_process_in_a_holders_tree_is_kept_with_what_it_runs():
    """`podman run` in the foreground passes a signal on to its container: never signalled, its subtree not walked."""
    rows = [Row(4000, 1, "python3", ["python3", "job.py"]),
            Row(4001, 4000, "podman", ["podman", "run", "--rm", "localhost/tool"]),
            Row(4002, 4001, "python3", ["python3", "tool-helper.py"]),
            Row(4003, 4000, "bash", ["bash", "collect.sh"])]
    result = plan(fake(rows), {4000: 0})
    assert roles(result) == [(4000, "holder", 0), (4003, "descendant", 1)]


def test_the_climb_stops_at_a_container_monitor():
    """A vLLM server that a container monitor (conmon) runs is the top of its chain: conmon is never its launcher."""
    rows, workers = vllm_server(1000, [0], parent=990)
    rows.append(Row(990, 1, "conmon", ["/usr/bin/conmon", "--api-version", "1", "-c", "a" * 64, "-r", "/usr/sbin/runc"]))
    result = plan(fake(rows), workers, launcher_patterns=[r"^(\S*/)?python[0-9.]*\s", "^VLLM::", "conmon"])
    assert result.targets[0].pid == 1000 and 990 not in {tg.pid for tg in result.targets}


def test_a_runtimes_process_that_holds_a_gpu_is_left_alone_saying_why():
    rows = [Row(990, 1, "conmon", ["/usr/bin/conmon", "-c", "a" * 64])]
    result = plan(fake(rows), {990: 0})
    assert result.targets == [] and result.left_alone == {990: "a container runtime's own process (always excluded)"}
    assert result.on_purpose == {990: "exclude"}
