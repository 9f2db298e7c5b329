# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Someone else's vLLM is not an orphan: real `ansible-playbook playbooks/restart_vllm.yml` runs next to a colleague's job.

A colleague's offline job (`python3 batch_infer.py` with a child `VLLM::Worker_TP0` on GPU 3) holds a GPU of a server
on GPUs 0-7 and looks vLLM-shaped: a forced restart's preflight names it and refuses before anything is stopped;
`vllm_server_reclaim_all_holders=true` still ends every holder. Outcomes are judged by the simulator's own reading,
PID liveness with start times, the role's record file and /health, never by the role's summary.
"""

from __future__ import annotations

import typing as t

from ansible_run import flat, RESTART, run_playbook
from gpusim.api import parent_pid, pid_alive, starttime
from inventories import role_host_vars, write_role_inventory
from readings import assert_server_owns_gpus, health, holders, record, server_pid
from simhost import hosts_with_ports

WORKER_MIB = 20000
JOB_MIB = 12000


def inventory_for(tmp_path, host, **group_vars):
    """A server on GPUs 0-7 (TP 8) whose workers hold WORKER_MIB each, so a colleague's job fits next to one."""
    env = {"GPUOPS_SIM_STATE": str(host.state), "GPUOPS_SIM_WORKER_MIB": str(WORKER_MIB)}
    entries = {host.name: role_host_vars(host, host.port, vllm_server_host_env=env)}
    return write_role_inventory(tmp_path / "inventory.json", entries, vllm_server_tensor_parallel_size=8, **group_vars)


def colleague_job(host, gpu: int = 3) -> t.Dict[str, int]:
    """A live `python3 batch_infer.py` whose child `VLLM::Worker_TP0` holds ``gpu`` (ended by the host's cleanup)."""
    job = host.spawn_tree({"key": "batch", "title": "python3 batch_infer.py --input prompts.jsonl",
                           "children": [{"key": "worker", "title": "VLLM::Worker_TP0", "hold": [{"gpu": gpu, "mib": JOB_MIB}]}]})
    assert parent_pid(job["worker"]) == job["batch"] and job["worker"] in holders(host)[gpu]
    return job


def alive(started: t.Mapping[int, t.Optional[int]]) -> t.List[int]:
    """Of these PIDs (with their start times), the ones still the same running process."""
    return [pid for pid, start in started.items() if pid_alive(pid, start)]


def refused(run, job) -> str:
    """The run failed in the preflight, naming the colleague's worker, its batch_infer.py, and the way out."""
    text = flat(run.stdout)
    assert run.returncode != 0, text[-3000:]
    assert "nothing was stopped" in text, text[-3000:]
    assert "pid %d (VLLM::Worker_TP0)" % job["worker"] in text and "live PID %d (python3 batch_infer.py" % job["batch"] in text, text[-3000:]
    assert "vllm_server_reclaim_all_holders" in text, text[-3000:]
    return text


def test_forced_restart_refuses_a_colleagues_vllm_job_and_the_server_keeps_running(make_host, tmp_path, canaries):
    node = hosts_with_ports(make_host, "gpu-node-01")[0]
    inventory = inventory_for(tmp_path, node)
    first = run_playbook(RESTART, inventory)
    assert first.returncode == 0, flat(first.stdout)[-3000:]
    server, workers = assert_server_owns_gpus(node, range(8), 8)
    job = colleague_job(node)
    watched = {pid: starttime(pid) for pid in [server, *workers, job["batch"], job["worker"]]}

    refused(run_playbook(RESTART, inventory), job)
    assert alive(watched) == list(watched), "stopped anyway: %s" % sorted(set(watched) - set(alive(watched)))
    assert server_pid(node) == server and record(node)["pid"] == server and health(node.port) == 200
    assert set(holders(node)[3]) == {workers[3], job["worker"]}
    assert [g["used_mib"] for g in node.status()["gpus"]] == [WORKER_MIB] * 3 + [WORKER_MIB + JOB_MIB] + [WORKER_MIB] * 4

    # the way out the message names: every holder of the server's GPUs is ended, the colleague's worker too
    forced = run_playbook(RESTART, inventory, "-e", "vllm_server_reclaim_all_holders=true")
    assert forced.returncode == 0, flat(forced.stdout)[-3000:]
    assert not pid_alive(job["worker"], watched[job["worker"]]) and not pid_alive(server, watched[server])
    assert pid_alive(job["batch"], watched[job["batch"]]), "batch_infer.py holds no GPU: not a holder, not ended"
    new_server, _new_workers = assert_server_owns_gpus(node, range(8), 8)
    assert new_server != server
    assert canaries.alive(), canaries.dead()


def test_the_issues_shape_incident_orphans_and_a_colleagues_job_nothing_is_stopped(make_host, tmp_path, canaries):
    """The incident's orphans on GPUs 1-7 and a colleague's job on GPU 3, before the first restart: the preflight would end
    the orphans but refuses for the colleague's worker, so nothing at all is stopped and no server is started."""
    node = hosts_with_ports(make_host, "gpu-node-01")[0]
    old = node.gpusim_json("vllm", "--tp", "8", "--mib", str(WORKER_MIB))
    node.gpusim("incident")
    job = colleague_job(node)
    watched = {pid: starttime(pid) for pid in [*old["workers"][1:], job["batch"], job["worker"]]}
    before = node.snapshot()
    inventory = inventory_for(tmp_path, node)

    check = run_playbook(RESTART, inventory, "--check")
    assert check.returncode != 0 and "pid %d (VLLM::Worker_TP0)" % job["worker"] in flat(check.stdout), flat(check.stdout)[-3000:]

    refused(run_playbook(RESTART, inventory), job)
    assert alive(watched) == list(watched), "stopped anyway: %s" % sorted(set(watched) - set(alive(watched)))
    assert node.snapshot() == before
    assert not (node.state / "role" / ("vllm-%d.json" % node.port)).exists()
    assert canaries.alive(), canaries.dead()


def test_stopping_ones_own_server_leaves_a_colleagues_job_alone_and_names_it(make_host, tmp_path):
    """vllm_server_state=stopped with a colleague's vLLM job on one of the server's GPUs: the server stops, its GPUs but the
    colleague's are freed, the colleague's job keeps running, and the summary names it as left alone."""
    node = hosts_with_ports(make_host, "gpu-node-01")[0]
    inventory = inventory_for(tmp_path, node)
    assert run_playbook(RESTART, inventory).returncode == 0
    server, workers = assert_server_owns_gpus(node, range(8), 8)
    job = colleague_job(node)
    watched = {pid: starttime(pid) for pid in [job["batch"], job["worker"]]}

    stop = run_playbook(RESTART, inventory, "-e", "vllm_server_state=stopped")
    text = flat(stop.stdout)
    assert stop.returncode == 0, text[-3000:]
    assert not pid_alive(server) and not any(pid_alive(w) for w in workers)
    assert alive(watched) == list(watched), "the colleague's job was ended"
    assert holders(node)[3] == [job["worker"]]
    assert [g["used_mib"] for g in node.status()["gpus"]] == [0] * 3 + [JOB_MIB] + [0] * 4
    assert "left alone (not this server" in text and "GPU 3 held by a job left alone" in text and "PID %d" % job["worker"] in text, text[-3000:]
    assert not (node.state / "role" / ("vllm-%d.json" % node.port)).exists()
