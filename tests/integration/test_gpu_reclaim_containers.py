# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_reclaim and gpu_cleanup.yml against real containers: root's podman (runc), a dockerd of the test's own, and a
process in a Kubernetes-shaped cgroup.

A container's process is registered with the simulated host as a GPU holder by its host PID (podman inspect's
State.Pid). Every outcome is judged by readings the module did not make: the runtime's own (inspect: State.Running,
State.Pid, RestartCount, the restart policy), the simulator's reading of the GPU, and PIDs with their start times. A
container signalled directly would be started again by its runtime (restart policy always): one that stays stopped with
its restart count unchanged was stopped through the runtime. The containers and images are removed by id at the end
(tests/support/containers.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_run import flat, REPO, RESTART, run_module, run_playbook
from containers import comm, Containers, descendants, docker_daemon, docker_missing, host_pid, imported_image, restart_count, unique_tag
from fake_container import in_cgroup
from gpusim.api import parent_pid, pid_alive, starttime, wait_for
from inventories import role_host_vars, write_role_inventory
from readings import health
from simhost import hosts_with_ports

MIB = 30000
CLEANUP = REPO / "playbooks" / "gpu_cleanup.yml"
SLEEPER = ["python3", "-c", "import time; time.sleep(600)"]
# A vLLM worker left to the container's init (podman run --init): a parent forks it and exits; it takes a worker's
# title; the container's main process lives on.
ORPHAN = """
import os, time
if os.fork() == 0:
    if os.fork() == 0:
        with open("/proc/self/comm", "w") as comm:
            comm.write("VLLM::Worker_TP0")
        time.sleep(600)
    os._exit(0)
time.sleep(600)
"""
POD_UID = "0b8c6d1e-58a3-4c1c-9f0e-2d4b5a6c7e8f"
K8S_ID = "4f" * 32


def reclaim(host, inventory, tmp_path, args, *extra):
    """One gpu_reclaim run on ``host`` through ansible-playbook; its full result."""
    return run_module("gpu_reclaim", inventory(host), tmp_path / "out", args, *extra)[host.name]


class Holder:
    """A running container whose main process holds ``mib`` on GPU 0 of ``host``, with what the runtime said of it at the
    start."""

    def __init__(self, made, host, *options, command=None, mib=MIB):
        self.made = made
        self.id = made.run(command or SLEEPER, *options)
        self.state = made.wait_running(self.id)
        self.name = self.state["Name"].lstrip("/")
        self.pid = host_pid(self.state)
        self.start = starttime(self.pid)
        self.monitor = parent_pid(self.pid)  # conmon, or containerd's shim
        self.monitor_start = starttime(self.monitor)
        if mib:
            host.record_alloc(self.pid, 0, mib)

    def now(self):
        return self.made.inspect(self.id)

    def untouched(self):
        """Still running as it started: the same main process (PID and start time), never restarted, its monitor alive."""
        state = self.now()
        return (state["State"]["Running"] is True and host_pid(state) == self.pid and pid_alive(self.pid, self.start)
                and restart_count(state) == restart_count(self.state) and pid_alive(self.monitor, self.monitor_start))

    def stays_stopped(self, seconds=3.0):
        """Not running ``seconds`` from now, its restart count as it was: no runtime started it again."""
        time.sleep(seconds)
        state = self.now()
        return state["State"]["Running"] is False and restart_count(state) == restart_count(self.state) and not pid_alive(self.pid, self.start)


def test_a_container_holder_is_refused_by_default_and_nothing_is_signalled(make_host, inventory, tmp_path, podman_containers):
    host = make_host()
    holder = Holder(podman_containers, host, "--restart=always")
    assert host.used_mib()[0] == MIB and host.holders(0) == [holder.pid]
    result = reclaim(host, inventory, tmp_path, {"gpus": ["0"], "grace": 1, "timeout": 20})
    assert result["failed"] is True and result["changed"] is False and result["killed"] == [], result
    (refused,) = result["containers_refused"]
    assert (refused["runtime"], refused["id"], refused["name"], refused["image"], refused["gpus"], refused["pids"], refused["restart_policy"]) == (
        "podman", holder.id, holder.name, podman_containers.image, [0], [holder.pid], "always")
    assert "podman container %s (id %s, image %s)" % (holder.name, holder.id[:12], podman_containers.image) in result["msg"]
    assert "set containers: stop" in result["msg"] and result["msg"].startswith("refused before signalling or stopping anything")
    assert result["evidence"]["survivors"][0]["container"]["id"] == holder.id
    time.sleep(1)  # a runtime applying a restart policy to a signalled container would have by now
    assert holder.untouched(), holder.now()["State"]
    assert host.used_mib()[0] == MIB and host.holders(0) == [holder.pid]
    # the facts table an operator reads names the holder's container
    table = run_playbook(REPO / "playbooks" / "gpu_facts.yml", inventory(host))
    assert table.returncode == 0 and "(pid %d, podman container %s)" % (holder.pid, holder.name) in flat(table.stdout), table.stdout[-2000:]


def test_stop_stops_a_restart_always_container_through_podman_and_it_stays_stopped(make_host, inventory, tmp_path, podman_containers):
    host = make_host()
    holder = Holder(podman_containers, host, "--restart=always")
    canary = Holder(podman_containers, host, "--restart=always", mib=0)  # another container, holding no GPU
    began = time.monotonic()
    result = reclaim(host, inventory, tmp_path, {"gpus": ["0"], "containers": "stop", "grace": 1, "timeout": 30})
    took = time.monotonic() - began
    assert result.get("failed") is not True and result["verified"] is True and result["changed"] is True, result["msg"]
    assert result["killed"] == [] and result["survivors"] == [] and result["respawn_watch"]["candidates"] == []
    (stopped,) = result["containers_stopped"]
    assert {key: stopped[key] for key in ("runtime", "id", "name", "pids", "gpus", "stopped", "running_after", "error", "restart_policy",
                                          "restart_policy_after")} == {
        "runtime": "podman", "id": holder.id, "name": holder.name, "pids": [holder.pid], "gpus": [0], "stopped": True,
        "running_after": False, "error": None, "restart_policy": "always", "restart_policy_after": "always"}
    assert "podman-restart.service" in stopped["starts_again"]
    assert [w for w in result["warnings"] if holder.name in w and "stays stopped until its runtime starts it again" in w], result["warnings"]
    assert holder.stays_stopped(), holder.now()["State"]
    assert host.used_mib()[0] == 0 and host.holders(0) == [], "the simulator's own reading: GPU 0 is free"
    assert canary.untouched(), "another container and its conmon are never signalled"
    print("gpu_reclaim containers=stop through ansible-playbook: %.1f s (module %.2f s, the stop %.2f s)" % (
        took, result["elapsed_s"], stopped["seconds_to_stop"]))
    again = reclaim(host, inventory, tmp_path, {"gpus": ["0"], "containers": "stop", "grace": 1, "timeout": 30})
    assert again["changed"] is False and again["verified"] is True and again["containers_stopped"] == []


def test_check_mode_predicts_the_stop_and_changes_nothing(make_host, inventory, tmp_path, podman_containers):
    host = make_host()
    holder = Holder(podman_containers, host, "--restart=always")
    result = reclaim(host, inventory, tmp_path, {"gpus": ["0"], "containers": "stop", "grace": 1, "timeout": 20}, "--check")
    assert result.get("failed") is not True and result["changed"] is True and result["verified"] is None, result["msg"]
    assert result["would_kill"] == [] and result["would_fail"] == [] and result["containers_refused"] == []
    assert result["would_stop_containers"] == [{"runtime": "podman", "id": holder.id, "name": holder.name, "image": podman_containers.image,
                                                "gpus": [0], "pids": [holder.pid], "restart_policy": "always"}]
    assert result["gpus"][0]["processes_would_remain"] == [] and result["gpus"][0]["predicted_memory_used_mib_after"] == 0
    time.sleep(1)
    assert holder.untouched() and host.used_mib()[0] == MIB


def orphan_of(holder):
    """The VLLM::Worker_TP0 the container's main process left to its init (podman-init), by its host PID."""
    def adopted():
        return [pid for pid in descendants(holder.pid) if comm(pid) == "VLLM::Worker_TP" and parent_pid(pid) == holder.pid]

    assert wait_for(lambda: bool(adopted()), timeout=10), descendants(holder.pid)
    return adopted()[0]


def summary(out, host):
    """The summary task's lines for ``host``, whitespace made one space."""
    section = re.search(r"TASK \[Summarise every host\](.*?)(?=TASK \[|PLAY RECAP|$)", flat(out))
    items = [item.replace("''", "'") for item in re.findall(r"'((?:[^']|'')*)'", section.group(1) if section else "")]
    return [item for item in items if item.startswith(host + ": ")]


def test_gpu_cleanup_refuses_a_container_by_default_and_stops_it_when_asked(make_host, inventory, podman_containers):
    """The orphan of a server that died inside a container still running (its init, podman-init, adopted it): gpu_cleanup.yml
    takes it for an orphan, and by default refuses its container, naming it; gpu_cleanup_stop_containers=true stops it."""
    host = make_host()
    holder = Holder(podman_containers, host, "--init", "--restart=always", command=["python3", "-c", ORPHAN], mib=0)
    assert comm(holder.pid) == "podman-init", "podman run --init runs catatonit as the container's PID 1"
    orphan = orphan_of(holder)
    orphan_start = starttime(orphan)
    host.record_alloc(orphan, 0, MIB)
    inv = inventory(host)
    fast = ("-e", "gpu_reclaim_grace=1 gpu_reclaim_timeout=30")
    assert host.used_mib()[0] == MIB and host.holders(0) == [orphan], (host.holders(0), holder.now()["State"])

    refused = run_playbook(CLEANUP, inv, *fast)
    # what the GPU and the container were after the run, should the run have found nothing to refuse
    after = (host.holders(0), pid_alive(orphan, orphan_start), holder.now()["State"], restart_count(holder.now()))
    assert refused.returncode != 0, (refused.stdout[-3000:], after)
    lines = summary(refused.stdout, host.name)
    expected = ("%s: refused podman container %s (image %s) on GPU 0, PID %d: a container's processes are never signalled; -e "
                "gpu_cleanup_stop_containers=true stops it through podman" % (host.name, holder.name, podman_containers.image, orphan))
    assert expected in lines, lines
    assert holder.untouched() and pid_alive(orphan, orphan_start) and host.used_mib()[0] == MIB

    bad = run_playbook(CLEANUP, inv, "-e", "gpu_cleanup_stop_containers=maybe", *fast)
    assert bad.returncode != 0 and "gpu_cleanup_stop_containers must be true or false, not \"maybe\"" in flat(bad.stdout), bad.stdout[-3000:]
    assert holder.untouched() and pid_alive(orphan, orphan_start)

    stopped = run_playbook(CLEANUP, inv, "-e", "gpu_cleanup_stop_containers=true", *fast)
    assert stopped.returncode == 0, stopped.stdout[-4000:]
    lines = summary(stopped.stdout, host.name)
    assert [line for line in lines if line.startswith("%s: stopped podman container %s (image %s) on GPU 0 in " % (
        host.name, holder.name, podman_containers.image)) and "restart policy always" in line], lines
    assert holder.stays_stopped() and not pid_alive(orphan, orphan_start)
    assert host.used_mib()[0] == 0 and host.holders(0) == []


def test_the_role_never_stops_a_container_it_does_not_manage(make_host, tmp_path, podman_containers):
    """A vLLM server in a container holds the GPU the role's server is configured on: the preflight refuses, naming the
    container, even with vllm_server_reclaim_all_holders=true (which lets the stop end every other holder)."""
    node = hosts_with_ports(make_host, "gpu-node-01")[0]
    holder = Holder(podman_containers, node, "--restart=always")
    inventory = write_role_inventory(tmp_path / "inventory.json", {node.name: role_host_vars(node, node.port, vllm_server_gpus=[0])},
                                     vllm_server_tensor_parallel_size=1)
    run = run_playbook(RESTART, inventory, "-e", "vllm_server_reclaim_all_holders=true")
    text = flat(run.stdout)
    assert run.returncode != 0 and "nothing was stopped" in text, text[-3000:]
    assert "The role never stops a container it does not manage (podman container %s on GPU 0)" % holder.name in text, text[-3000:]
    assert "Set vllm_server_reclaim_all_holders=true" not in text
    assert holder.untouched() and node.used_mib()[0] == MIB and health(node.port) == -1


@pytest.fixture(name="kubepods")
def kubepods_fixture():
    """A process in the cgroup of a Kubernetes pod's container (systemd driver, containerd), made for the test and
    removed at its end (tests/support/fake_container.py in_cgroup); the process is ended at the end too."""
    if os.geteuid() != 0:
        pytest.skip("making a cgroup needs root")
    name = "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/cri-containerd-%s.scope" % (
        POD_UID.replace("-", "_"), K8S_ID)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # pylint: disable=consider-using-with
    try:
        with in_cgroup([proc.pid], name):
            yield proc.pid
    finally:
        proc.kill()
        proc.wait(10)


def test_a_kubernetes_container_is_refused_naming_its_pod(make_host, inventory, tmp_path, kubepods):
    host = make_host()
    start = starttime(kubepods)
    host.record_alloc(kubepods, 0, MIB)
    result = reclaim(host, inventory, tmp_path, {"gpus": ["0"], "containers": "stop", "grace": 1, "timeout": 20})
    assert result["failed"] is True and result["changed"] is False and result["killed"] == [], result
    (refused,) = result["containers_refused"]
    assert (refused["runtime"], refused["id"], refused["pod_uid"], refused["pids"]) == ("kubernetes", K8S_ID, POD_UID, [kubepods])
    assert "Kubernetes container %s of pod %s" % (K8S_ID[:12], POD_UID) in result["msg"] and "kubelet" in result["msg"]
    assert pid_alive(kubepods, start) and host.used_mib()[0] == MIB


def test_docker_stop_and_disable_restart_through_a_daemon_of_the_tests_own(make_host, tmp_path):
    """docker's stop path, and container_restart: disable (docker update --restart=no), with dockerd started for the test."""
    reason = docker_missing()
    if reason:
        pytest.skip(reason)
    host = make_host()
    with docker_daemon(Path("/tmp") / ("gpuops-docker-%d" % os.getpid())) as docker, \
            imported_image(docker, unique_tag()) as image, Containers(docker, image) as made:
        holder = Holder(made, host, "--restart=always")
        assert holder.now()["HostConfig"]["RestartPolicy"]["Name"] == "always"
        inventory = tmp_path / "inventory.json"
        inventory.write_text(json.dumps({"all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
            "hosts": {host.name: {"gpuops_fleet_environment": dict(host.environment(), DOCKER_HOST=docker.argv[2])}}}}))
        args = {"gpus": ["0"], "containers": "stop", "container_restart": "disable", "grace": 1, "timeout": 30}
        result = run_module("gpu_reclaim", inventory, tmp_path / "out", args)[host.name]
        assert result.get("failed") is not True and result["verified"] is True and result["changed"] is True, result["msg"]
        (stopped,) = result["containers_stopped"]
        assert (stopped["runtime"], stopped["id"], stopped["name"], stopped["image"], stopped["restart_policy"], stopped["restart_policy_after"],
                stopped["starts_again"]) == ("docker", holder.id, holder.name, image, "always", "no", None)
        assert not [w for w in result["warnings"] if holder.name in w], result["warnings"]
        assert holder.stays_stopped(2.0) and holder.now()["HostConfig"]["RestartPolicy"]["Name"] == "no"
        assert host.used_mib()[0] == 0 and host.holders(0) == []
