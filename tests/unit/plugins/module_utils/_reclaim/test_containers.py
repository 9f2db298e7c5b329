# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_reclaim and containers (_reclaim/containers.py): the targets set apart by container, the runtimes' command lines
(podman's and docker's stop, update and inspect), the refusals and their words, the stop and what is read after it."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import CliAnswer, ContainerRef, DOCKER, KUBERNETES, PODMAN
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim import containers as C
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.plan import Target
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import build_spec
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_runtime import (
    DOCKER_ID,
    FakeContainer,
    FakeRuntimeCli,
    K8S_ID,
    PODMAN_ID,
    POD_UID,
)

PODMAN_REF = ContainerRef(PODMAN, PODMAN_ID, engine=PODMAN)
DOCKER_REF = ContainerRef(DOCKER, DOCKER_ID, engine=DOCKER)
K8S_REF = ContainerRef(KUBERNETES, K8S_ID, POD_UID, "containerd")


def target(pid, name="python3", gpus=(), role="holder"):
    return Target(pid, 1000.0, name, [name], "root", role, 0, list(gpus))


def find(name):
    return "/opt/fake/bin/" + name


def podman_container(policy="always"):
    return FakeContainer("podman", PODMAN_ID, "vllm-llama", "localhost/gpuops-sim:test", 7153, policy)


def docker_container(policy="always"):
    return FakeContainer("docker", DOCKER_ID, "vllm-docker", "vllm/vllm-openai:v0.11.0", 8153, policy)


def held(ref, *targets):
    container = C.HeldContainer(ref)
    container.targets.extend(targets)
    return container


# ---- the command lines ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cli", ["/usr/bin/podman", "/usr/bin/docker"])
def test_stop_and_update_argv(cli):
    assert C.stop_argv(cli, 10, [PODMAN_ID]) == [cli, "stop", "-t", "10", PODMAN_ID]
    assert C.stop_argv(cli, 0, [PODMAN_ID, DOCKER_ID]) == [cli, "stop", "-t", "0", PODMAN_ID, DOCKER_ID]
    assert C.disable_restart_argv(cli, DOCKER_ID) == [cli, "update", "--restart=no", DOCKER_ID]


@pytest.mark.parametrize("grace, left, seconds", [(10.0, 58.0, 10), (0.2, 58.0, 1), (10.0, 3.5, 4), (10.0, -1.0, 0), (2.0, 2.0, 2)])
def test_the_stops_seconds_are_grace_within_the_time_left_rounded_up(grace, left, seconds):
    assert C.stop_seconds(grace, left) == seconds


@pytest.mark.parametrize("runtime, policy, words", [
    (DOCKER, "always", "dockerd starts it again"),
    (DOCKER, "unless-stopped", None),
    (DOCKER, "on-failure", None),
    (DOCKER, "no", None),
    (PODMAN, "always", "podman-restart.service"),
    (PODMAN, "unless-stopped", "podman-restart.service"),
    (PODMAN, "no", None),
    (PODMAN, None, None),
])
def test_when_a_runtime_starts_a_stopped_container_again(runtime, policy, words):
    said = C.starts_again(runtime, policy)
    assert said is None if words is None else words in said and policy in said


# ---- the targets set apart --------------------------------------------------------------------------------------------

def test_targets_in_containers_are_set_apart_by_container():
    refs = {10: PODMAN_REF, 11: PODMAN_REF, 20: DOCKER_REF}
    targets = [target(10, gpus=[0]), target(30, gpus=[1]), target(11, "VLLM::Worker_TP1", gpus=[2]), target(20, gpus=[3])]
    host, found = C.set_apart(targets, refs.get, None)
    assert [tg.pid for tg in host] == [30]
    assert [(container.ref, container.pids, container.gpus) for container in found] == [(PODMAN_REF, [10, 11], [0, 2]), (DOCKER_REF, [20], [3])]


def test_the_container_this_module_runs_in_is_the_host():
    refs = {10: PODMAN_REF, 20: DOCKER_REF}
    host, found = C.set_apart([target(10, gpus=[0]), target(20, gpus=[1])], refs.get, ContainerRef(PODMAN, PODMAN_ID))
    assert [tg.pid for tg in host] == [10] and [container.ref for container in found] == [DOCKER_REF]


# ---- the runtimes' command lines --------------------------------------------------------------------------------------

def test_each_cli_is_found_once_and_inspect_reads_the_container():
    looked_up = []

    def finder(name):
        looked_up.append(name)
        return find(name)

    cli = FakeRuntimeCli([podman_container()])
    runtimes = C.Runtimes(finder, cli)
    state, error = runtimes.inspect(PODMAN, PODMAN_ID)
    assert error is None and (state.name, state.image, state.running, state.pid, state.restart_policy, state.restart_count) == (
        "vllm-llama", "localhost/gpuops-sim:test", True, 7153, "always", 0)
    runtimes.inspect(PODMAN, PODMAN_ID)
    assert looked_up == ["podman"]
    assert cli.calls[0] == (["/opt/fake/bin/podman", "inspect", "--type", "container", "--format", "json", PODMAN_ID], 5.0)


def test_inspect_of_a_missing_cli_or_an_unknown_container_says_why():
    state, error = C.Runtimes(lambda name: None, FakeRuntimeCli([])).inspect(DOCKER, DOCKER_ID)
    assert state is None and error == "docker is not installed here (not found on the PATH)"
    state, error = C.Runtimes(find, FakeRuntimeCli([])).inspect(PODMAN, PODMAN_ID)
    assert state is None and error == "podman inspect %s: exited 125: Error: no such container %s" % (PODMAN_ID[:12], PODMAN_ID)
    state, error = C.Runtimes(find, lambda argv, timeout: CliAnswer(None, "", timed_out=True)).inspect(PODMAN, PODMAN_ID)
    assert state is None and error.endswith("no answer within 5 s")


@pytest.mark.parametrize("restart_update", [True, False])
def test_whether_update_takes_restart_is_asked_once(restart_update):
    cli = FakeRuntimeCli([], restart_update={"podman": restart_update})
    runtimes = C.Runtimes(find, cli)
    assert runtimes.can_disable_restart(PODMAN) is restart_update and runtimes.can_disable_restart(PODMAN) is restart_update
    assert [argv for argv, _timeout in cli.calls] == [["/opt/fake/bin/podman", "update", "--help"]]


# ---- the refusals -----------------------------------------------------------------------------------------------------

def judged(spec_args, containers, cli=None, finder=find):
    cli = cli or FakeRuntimeCli([podman_container(), docker_container()])
    C.judge(containers, build_spec(spec_args), C.Runtimes(finder, cli))
    return cli


def test_refuse_names_the_container_and_the_option_to_set():
    container = held(PODMAN_REF, target(7153, gpus=[0]))
    judged({}, [container])
    assert container.refused == (
        "podman container vllm-llama (id %s, image localhost/gpuops-sim:test) holds GPU 0 through PID 7153 (python3): a container's "
        "processes are never signalled (its runtime owns them); set containers: stop to stop it through podman (podman stop), or "
        "stop it yourself" % PODMAN_ID[:12])
    assert container.entry() == {"runtime": "podman", "id": PODMAN_ID, "name": "vllm-llama", "image": "localhost/gpuops-sim:test",
                                 "gpus": [0], "pids": [7153], "restart_policy": "always"}


def test_an_unknown_name_is_said_by_the_id():
    container = held(DOCKER_REF, target(8153, gpus=[1]))
    judged({}, [container], finder=lambda name: None)
    assert container.refused.startswith("docker container %s (name unknown, image unknown) holds GPU 1 through PID 8153" % DOCKER_ID[:12])


@pytest.mark.parametrize("containers", ["refuse", "stop"])
def test_kubernetes_is_always_refused_naming_the_pod(containers):
    container = held(K8S_REF, target(9153, "VLLM::Worker_TP0", gpus=[2]))
    cli = judged({"containers": containers}, [container])
    assert container.refused.startswith("Kubernetes container %s of pod %s holds GPU 2 through PID 9153 (VLLM::Worker_TP0): the "
                                        "kubelet owns it" % (K8S_ID[:12], POD_UID))
    assert "delete or scale down the pod with UID %s" % POD_UID in container.refused
    assert container.entry()["pod_uid"] == POD_UID and cli.calls == [], "the kubelet's containers are not asked of a CLI"


def test_stop_refuses_what_its_runtime_cannot_stop():
    missing_cli = held(DOCKER_REF, target(8153, gpus=[1]))
    judged({"containers": "stop"}, [missing_cli], finder=lambda name: None)
    assert "containers: stop, but docker cannot stop it: docker is not installed here" in missing_cli.refused
    rootless = held(PODMAN_REF, target(7153, gpus=[0]))
    judged({"containers": "stop"}, [rootless], cli=FakeRuntimeCli([]))
    assert "podman cannot stop it: podman inspect %s: exited 125" % PODMAN_ID[:12] in rootless.refused
    assert "podman knows the containers of the user it runs as only" in rootless.refused


def test_stop_is_not_refused_when_the_runtime_knows_the_container():
    containers = [held(PODMAN_REF, target(7153, gpus=[0])), held(DOCKER_REF, target(8153, gpus=[1]))]
    judged({"containers": "stop"}, containers)
    assert [container.refused for container in containers] == [None, None]


@pytest.mark.parametrize("policy, refused", [("always", True), ("unless-stopped", True), ("no", False)])
def test_disable_refuses_a_podman_whose_update_has_no_restart(policy, refused):
    container = held(PODMAN_REF, target(7153, gpus=[0]))
    cli = FakeRuntimeCli([podman_container(policy)], restart_update={"podman": False})
    judged({"containers": "stop", "container_restart": "disable"}, [container], cli)
    assert (container.refused is not None) is refused
    if refused:
        assert "container_restart: disable, but this podman cannot change a container's restart policy" in container.refused
        assert "which is %s: set container_restart: keep" % policy in container.refused


# ---- the stop ---------------------------------------------------------------------------------------------------------

class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        self.now += 0.5
        return self.now


def test_one_stop_per_runtime_for_all_its_containers_then_each_is_read_again():
    second = FakeContainer("podman", "c" * 64, "vllm-b", "localhost/gpuops-sim:test", 7160)
    stopped = []
    cli = FakeRuntimeCli([podman_container(), second, docker_container()], on_stop=lambda container: stopped.append(container.id))
    containers = [held(PODMAN_REF, target(7153, gpus=[0])), held(DOCKER_REF, target(8153, gpus=[1])),
                  held(ContainerRef(PODMAN, "c" * 64), target(7160, gpus=[2]))]
    runtimes = C.Runtimes(find, cli)
    C.stop(containers, runtimes, 3, Clock())
    assert cli.commands("stop") == [["/opt/fake/bin/docker", "stop", "-t", "3", DOCKER_ID],
                                    ["/opt/fake/bin/podman", "stop", "-t", "3", PODMAN_ID, "c" * 64]]
    assert [timeout for argv, timeout in cli.calls if argv[1] == "stop"] == [3 + C.STOP_SLACK_S] * 2
    assert sorted(stopped) == sorted([PODMAN_ID, DOCKER_ID, "c" * 64])
    for container in containers:
        assert container.stopped and container.stop_error is None and container.after.running is False and container.stopped_s == 0.5
    entry = containers[0].stopped_entry()
    assert {key: entry[key] for key in ("stopped", "running_after", "error", "restart_policy_after", "restart_policy_error")} == {
        "stopped": True, "running_after": False, "error": None, "restart_policy_after": "always", "restart_policy_error": None}
    assert "podman-restart.service" in entry["starts_again"]


def test_a_container_that_still_runs_after_its_stop_has_the_error():
    cli = FakeRuntimeCli([podman_container()])
    cli.stop_fails.add(PODMAN_ID)
    container = held(PODMAN_REF, target(7153, gpus=[0]))
    C.stop([container], C.Runtimes(find, cli), 1, Clock())
    assert container.stop_error == "podman stop -t 1 %s: exited 125: Error: timed out waiting for %s to stop; it still runs" % (
        PODMAN_ID[:12], PODMAN_ID)
    assert container.stopped_entry()["stopped"] is False and container.stopped_entry()["running_after"] is True


def test_disable_sets_the_policy_to_no_and_reads_it_again():
    cli = FakeRuntimeCli([docker_container(), podman_container("no")])
    containers = [held(DOCKER_REF, target(8153, gpus=[1])), held(PODMAN_REF, target(7153, gpus=[0]))]
    runtimes = C.Runtimes(find, cli)
    C.judge(containers, build_spec({"containers": "stop", "container_restart": "disable"}), runtimes)
    C.stop(containers, runtimes, 1, Clock())
    C.disable_restart(containers, runtimes)
    assert cli.commands("update") == [["/opt/fake/bin/docker", "update", "--help"], ["/opt/fake/bin/docker", "update", "--restart=no", DOCKER_ID]]
    assert [(c.restart_policy, c.after.restart_policy, c.policy_error) for c in containers] == [("always", "no", None), ("no", "no", None)]
    assert containers[0].stopped_entry()["starts_again"] is None


def test_a_policy_that_could_not_be_changed_is_an_error():
    cli = FakeRuntimeCli([podman_container()], restart_update={"podman": False})
    container = held(PODMAN_REF, target(7153, gpus=[0]))
    runtimes = C.Runtimes(find, cli)
    C.stop([container], runtimes, 1, Clock())
    C.disable_restart([container], runtimes)
    assert container.policy_error == "podman update --restart=no %s: exited 125: Error: unknown command update --restart=no %s" % (
        PODMAN_ID[:12], PODMAN_ID)


def test_a_container_its_runtime_started_again_is_named():
    cli = FakeRuntimeCli([docker_container()])
    container = held(DOCKER_REF, target(8153, gpus=[1]))
    runtimes = C.Runtimes(find, cli)
    C.judge([container], build_spec({"containers": "stop"}), runtimes)
    C.stop([container], runtimes, 1, Clock())
    assert container.stop_error is None and C.may_restart([container]) and C.running_again([container], runtimes) == []
    cli.containers[DOCKER_ID].running, cli.containers[DOCKER_ID].restart_count = True, 1  # dockerd applies its policy
    again = C.running_again([container], runtimes)
    assert again == [(container, (
        "docker started docker container vllm-docker (id %s, image vllm/vllm-openai:v0.11.0) again after its stop (restart policy "
        "always, restart count 0 -> 1): stop it yourself, and set container_restart: disable" % DOCKER_ID[:12]))]
    assert container.stopped_entry()["running_after"] is True and container.stopped_entry()["stopped"] is False


def test_only_restart_policies_that_act_on_exit_may_restart():
    container = held(PODMAN_REF, target(7153, gpus=[0]))
    C.judge([container], build_spec({"containers": "stop"}), C.Runtimes(find, FakeRuntimeCli([podman_container("no")])))
    container.stopped = True
    assert not C.may_restart([container])


def test_inspect_asks_once_more_after_a_failure_and_not_after_a_timeout(monkeypatch):
    """podman 4.3 now and then says "container not known" of a live container while another podman command runs: one
    more answer is asked for; a runtime that did not answer in time is not asked again."""
    cid = "1e030a3033f4c66d3f8c1ab292f8490c5dff37766b14782381b20143b1d85617"
    good = CliAnswer(0, '[{"Id": "%s", "Name": "vllm", "State": {"Running": true, "Pid": 42}}]' % cid)
    answers = [CliAnswer(125, "", err="Error: container not known"), good]
    calls = []
    slept = []
    monkeypatch.setattr(C.time, "sleep", slept.append)

    def run(argv, timeout):
        calls.append(argv)
        return answers.pop(0)

    state, error = C.Runtimes(lambda name: "/usr/bin/" + name, run).inspect("podman", cid)
    assert error is None and state.pid == 42 and len(calls) == 2 and slept == [C.INSPECT_RETRY_S]
    answers[:] = [CliAnswer(None, "", timed_out=True)]
    state, error = C.Runtimes(lambda name: "/usr/bin/" + name, run).inspect("podman", cid)
    assert state is None and "no answer within" in error and len(calls) == 3
