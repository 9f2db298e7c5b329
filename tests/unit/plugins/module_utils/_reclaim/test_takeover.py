# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the role may take over the server on the port (_reclaim/takeover.refusal), by how it was started."""

from __future__ import annotations

import typing as t

import json
import os

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host import container as C
from ansible_collections.gpuops.fleet.plugins.module_utils._host import listener as L
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim import takeover as T
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.containers import Runtimes
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.takeover import refusal

from ...fake_psutil import FakeClock, FakePsutil, Row

DOCKER_ID = "4f1c2a9e8b7d6c5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f"
PODMAN_ID = "1e030a3033f4c66d3f8c1ab292f8490c5dff37766b14782381b20143b1d85617"
K8S_ID = "89abcdef0123456789abcdef0123456789abcdef0123456789abcdef01234567"
POD_UID = "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"
VLLM = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--api-key", "sk-secret"]


def info(how: str, vllm: bool = True, **extra: t.Any) -> t.Dict[str, t.Any]:
    base = {"pid": 5000, "command": "vllm serve m --api-key ********", "started": "somehow", "vllm": vllm, "how": how,
            "unit": None, "container": None}
    base.update(extra)
    return base


def test_refusals_name_the_process_and_the_way_out():
    web = refusal(info(L.BY_HAND_SHELL, vllm=False, command="nginx: master process"), 8000)
    assert "PID 5000 (nginx: master process)" in web and "not a vLLM server" in web and "vllm_server_port" in web
    docker = {"runtime": "docker", "id": DOCKER_ID, "name": "vllm-llama", "image": "vllm/vllm-openai", "error": None}
    assert refusal(info(L.CONTAINER, container=docker), 8000) is None, "a docker container is stopped through its runtime"
    mute = refusal(info(L.CONTAINER, container=dict(docker, error="`docker inspect` exited 1: Cannot connect")), 8000)
    assert "could not be asked" in mute and "Cannot connect" in mute and "stop the container yourself" in mute
    pod = refusal(info(L.CONTAINER, container={"runtime": "kubernetes", "id": K8S_ID, "pod_uid": POD_UID, "error": None}), 8000)
    assert "kubelet" in pod and "PID 5000" in pod
    shell_in_box = refusal(info(L.CONTAINER, vllm=False, command="/bin/sh", container=docker), 8000)
    assert "not a vLLM server" in shell_in_box
    unit = refusal(info(L.UNIT, unit="vllm-old.service"), 8000)
    assert "vllm-old.service" in unit and "vllm_server_takeover_units=true" in unit
    assert refusal(info(L.UNIT, unit="vllm-old.service"), 8000, stop_units=True) is None
    for how in (L.BY_HAND_TMUX, L.BY_HAND_SCREEN, L.BY_HAND_SHELL, L.NOHUP, L.PARENT):
        assert refusal(info(how), 8000) is None


@pytest.mark.parametrize("backend", [["--distributed-executor-backend", "ray"], ["--distributed-executor-backend=ray"]])
def test_a_server_on_a_ray_cluster_is_refused_by_name_however_it_was_started(backend):
    for how in (L.BY_HAND_TMUX, L.BY_HAND_SHELL, L.NOHUP, L.UNIT):
        said = refusal(info(how, cmdline=VLLM + backend, unit="x.service"), 8000, stop_units=True)
        assert said is not None and "PID 5000" in said and "runs on a Ray cluster" in said and "ray stop" in said, said
        assert "--distributed-executor-backend mp" in said
    assert refusal(info(L.BY_HAND_SHELL, cmdline=VLLM + ["--distributed-executor-backend", "mp"]), 8000) is None
    assert refusal(info(L.BY_HAND_SHELL, cmdline=VLLM + ["--distributed-executor-backend"]), 8000) is None


def test_one_rank_of_a_server_across_hosts_is_refused_naming_its_flags():
    head = VLLM + ["--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port", "29500"]
    for how in (L.BY_HAND_TMUX, L.NOHUP, L.PARENT):
        said = refusal(info(how, cmdline=head), 8000)
        assert said is not None and "PID 5000" in said and "one rank of a server across hosts (--nnodes 2, --node-rank 0)" in said
        assert "stop it on every one of its nodes" in said
    data = VLLM + ["--data-parallel-size", "4", "--data-parallel-size-local", "2"]
    assert "--data-parallel-size 4, --data-parallel-size-local 2" in refusal(info(L.BY_HAND_SHELL, cmdline=data), 8000)
    assert refusal(info(L.BY_HAND_SHELL, cmdline=VLLM + ["--nnodes", "1"]), 8000) is None


def test_a_rank_of_a_server_across_as_many_hosts_as_the_group_is_taken_over():
    head = VLLM + ["--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port", "29500"]
    group = {"group": "glm5_a", "size": 2, "head": None}
    assert refusal(info(L.BY_HAND_TMUX, cmdline=head), 8000, across=group) is None
    wider = refusal(info(L.BY_HAND_TMUX, cmdline=VLLM + ["--nnodes", "3", "--node-rank", "0"]), 8000, across=group)
    assert "one rank of a server across 3 hosts (--nnodes 3, --node-rank 0), but vllm_server_nodes_group=glm5_a holds 2 hosts" in wider
    data = VLLM + ["--data-parallel-size", "4", "--data-parallel-size-local", "2", "--headless"]
    rank = refusal(info(L.NOHUP, cmdline=data), 8000, across=dict(group, head="10.0.0.1"))
    assert rank is None
    alone = refusal(info(L.NOHUP, cmdline=VLLM + ["--headless"]), 8000, across=dict(group, head="10.0.0.1"))
    assert alone.startswith("this host runs, as a headless rank joined to 10.0.0.1, the vLLM server PID 5000")
    assert "a server across hosts (--headless)" in alone


def test_the_headless_rank_to_take_over_is_the_one_joined_to_the_head():
    serve = ["vllm", "serve", "m", "--headless", "--nnodes", "2", "--node-rank", "1"]
    joined = ["--master-addr", "10.0.0.1", "--master-port", "29500"]
    rows = [Row(1, 0, "init"), Row(10, 1, "bash"), Row(11, 10, "vllm", serve + joined),
            Row(12, 11, "vllm", serve + joined),  # a child with its parent's words: not the rank
            Row(20, 1, "vllm", serve + ["--master-addr", "10.9.9.9", "--master-port", "29500"]),  # joined to another head
            Row(21, 1, "vllm", serve + ["--master-addr", "10.0.0.1", "--master-port", "29600"]),  # another server of that head
            Row(30, 1, "python3", ["python3", "train.py", "--headless"] + joined)]  # not vLLM-shaped
    psutil = FakePsutil(rows, FakeClock())

    def looks(_name, cmdline):
        return "serve" in cmdline

    assert T.find_rank(psutil, "10.0.0.1", 29500, looks) == 11
    assert T.find_rank(psutil, "10.0.0.1", 29600, looks) == 21
    assert T.find_rank(psutil, "10.0.0.2", 29500, looks) is None
    twice = FakePsutil(rows + [Row(40, 1, "vllm", serve + joined)], FakeClock())
    assert T.find_rank(twice, "10.0.0.1", 29500, looks) is None  # two candidates: none is taken over


def inspect_answer(cid, name, image, pid, policy):
    return C.CliAnswer(0, json.dumps([{"Id": cid, "Name": name, "ImageName": image, "State": {"Running": True, "Pid": pid},
                                      "HostConfig": {"RestartPolicy": {"Name": policy}}}]))


class Cli:
    """run_cli's stand-in: answers by the command's first word after the program; records each command."""

    def __init__(self, **answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv, timeout):
        self.calls.append(list(argv))
        return self.answers.get("%s %s" % (os.path.basename(argv[0]), argv[1]), C.CliAnswer(1, "", err="unexpected"))


def describe(monkeypatch, tmp_path, rows, listening, cgroups, cli, find=lambda name: "/usr/bin/" + name):
    """takeover.describe() of port 8000 on a fake host: ``rows`` its processes, ``listening`` the PID on the port,
    ``cgroups`` each PID's cgroup path (written as /proc/PID/cgroup under tmp_path)."""
    for pid, path in cgroups.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text("0::%s\n" % path)
    monkeypatch.setattr(T._listener, "listening_pid", lambda psutil, port: listening)
    psutil = FakePsutil(rows, FakeClock())
    looks = T.matches_any
    patterns = T.regexes("match", T.DEFAULT_MATCH)
    return T.describe(psutil, 8000, lambda name, cmdline: looks(patterns, name, cmdline), lambda name, cmdline: False,
                      proc_root=str(tmp_path), runtimes=Runtimes(find, cli))


def test_a_server_in_a_container_on_the_hosts_network_is_taken_over_by_its_runtime(monkeypatch, tmp_path):
    rows = [Row(1, 0, "systemd"), Row(300, 1, "python3", VLLM), Row(301, 300, "VLLM::EngineCore")]
    cli = Cli(**{"podman inspect": inspect_answer(PODMAN_ID, "hand-vllm", "localhost/vllm:v1", 300, "always")})
    found = describe(monkeypatch, tmp_path, rows, 300, {300: "/libpod_parent/libpod-%s" % PODMAN_ID}, cli)
    assert (found["pid"], found["how"], found["vllm"], found["takeover"], found["refusal"], found["tree"]) == (300, L.CONTAINER, True, True, None, [301])
    box = found["container"]
    assert (box["runtime"], box["id"], box["name"], box["image"], box["restart_policy"], box["port_held_by"], box["error"]) == (
        "podman", PODMAN_ID, "hand-vllm", "localhost/vllm:v1", "always", None, None)
    assert "podman-restart.service" in box["starts_again"]
    assert found["started"] == "in the podman container hand-vllm (image localhost/vllm:v1, id %s)" % PODMAN_ID[:12]
    assert "sk-secret" not in found["command"] and "--api-key ********" in found["command"]


def test_a_published_port_held_by_conmon_names_the_container_and_its_server(monkeypatch, tmp_path):
    """conmon holds the port (-p 8000:8000): the server is the container's vLLM process below its init, and conmon is
    only named as the port's holder."""
    conmon = ["/usr/bin/conmon", "--api-version", "1", "-c", PODMAN_ID, "-u", PODMAN_ID, "-n", "hand-vllm"]
    rows = [Row(1, 0, "systemd"), Row(200, 1, "conmon", conmon), Row(201, 200, "catatonit", ["/run/podman-init", "--"]),
            Row(202, 201, "python3", VLLM, create_time=1234.5), Row(203, 202, "VLLM::EngineCore")]
    cli = Cli(**{"podman inspect": inspect_answer(PODMAN_ID, "hand-vllm", "localhost/vllm:v1", 201, "no")})
    found = describe(monkeypatch, tmp_path, rows, 200, {}, cli)
    assert (found["pid"], found["create_time"], found["name"], found["tree"], found["takeover"]) == (202, 1234.5, "python3", [203], True)
    assert found["container"]["port_held_by"] == {"pid": 200, "name": "conmon"} and found["container"]["starts_again"] is None
    assert found["started"].endswith(", its port held by conmon PID 200")
    assert [call[1] for call in cli.calls] == ["inspect"], "conmon names its container: docker is not asked"


def test_docker_proxy_asks_docker_which_container_publishes_the_port(monkeypatch, tmp_path):
    proxy = ["/usr/bin/docker-proxy", "-proto", "tcp", "-host-ip", "0.0.0.0", "-host-port", "8000", "-container-ip", "172.17.0.2"]
    rows = [Row(1, 0, "systemd"), Row(100, 1, "dockerd"), Row(200, 100, "docker-proxy", proxy), Row(300, 1, "python3", VLLM)]
    cli = Cli(**{"docker ps": C.CliAnswer(0, DOCKER_ID + "\n"),
                 "docker inspect": inspect_answer(DOCKER_ID, "/vllm-llama", "vllm/vllm-openai:v0.11.0", 300, "always")})
    found = describe(monkeypatch, tmp_path, rows, 200, {}, cli)
    assert found["pid"] == 300 and found["container"]["id"] == DOCKER_ID and found["container"]["name"] == "vllm-llama"
    assert "dockerd starts it again" in found["container"]["starts_again"] and found["refusal"] is None
    assert cli.calls[0] == ["/usr/bin/docker", "ps", "--quiet", "--no-trunc", "--filter", "publish=8000"]


def test_docker_proxy_of_an_unknown_container_stays_a_non_vllm_listener(monkeypatch, tmp_path):
    """docker names two containers (or none): the proxy is the listener, and it is not vLLM: refused, never stopped."""
    rows = [Row(1, 0, "systemd"), Row(200, 1, "docker-proxy", ["/usr/bin/docker-proxy", "-host-port", "8000"])]
    cli = Cli(**{"docker ps": C.CliAnswer(0, DOCKER_ID + "\n" + "a" * 64 + "\n")})
    found = describe(monkeypatch, tmp_path, rows, 200, {}, cli)
    assert found["container"] is None and found["takeover"] is False and "not a vLLM server" in found["refusal"]


def test_a_container_whose_runtime_is_missing_or_kubernetes_is_refused(monkeypatch, tmp_path):
    rows = [Row(1, 0, "systemd"), Row(300, 1, "python3", VLLM)]
    found = describe(monkeypatch, tmp_path, rows, 300, {300: "/system.slice/docker-%s.scope" % DOCKER_ID}, Cli(), find=lambda name: None)
    assert found["takeover"] is False and found["container"]["error"] == "docker is not installed here (not found on the PATH)"
    assert "docker is not installed here" in found["refusal"]
    pod = "/kubepods.slice/kubepods-pod%s.slice/cri-containerd-%s.scope" % (POD_UID.replace("-", "_"), K8S_ID)
    (tmp_path / "300" / "cgroup").write_text("0::%s\n" % pod)
    found = describe(monkeypatch, tmp_path, rows, 300, {}, Cli())
    assert found["takeover"] is False and found["container"]["pod_uid"] == POD_UID and "kubelet" in found["refusal"]


def behind(monkeypatch, rows, cli, find=lambda name: "/usr/bin/" + name):
    """served_behind() on a fake host: a function of (port, name, command line) of the process on the port."""
    return T.served_behind(FakePsutil(rows, FakeClock()), Runtimes(find, cli))


def test_served_behind_a_published_port_is_the_process_the_takeover_would_take(monkeypatch):
    """For the preflight's API-key check: behind conmon (or docker-proxy) the server is the container's vLLM process
    below its init; any other listener is its own server (None)."""
    conmon = ["/usr/bin/conmon", "--api-version", "1", "-c", PODMAN_ID, "-u", PODMAN_ID, "-n", "hand-vllm"]
    rows = [Row(1, 0, "systemd"), Row(200, 1, "conmon", conmon), Row(201, 200, "catatonit", ["/run/podman-init", "--"]),
            Row(202, 201, "python3", VLLM), Row(203, 202, "VLLM::EngineCore")]
    cli = Cli(**{"podman inspect": inspect_answer(PODMAN_ID, "hand-vllm", "localhost/vllm:v1", 201, "no")})
    served = behind(monkeypatch, rows, cli)
    assert served(8000, "conmon", conmon) == 202
    assert served(8000, "python3", VLLM) is None and [call[1] for call in cli.calls] == ["inspect"], "a server is not asked about"
    proxy = ["/usr/bin/docker-proxy", "-proto", "tcp", "-host-port", "8000"]
    rows = [Row(1, 0, "systemd"), Row(200, 1, "docker-proxy", proxy), Row(300, 1, "python3", VLLM)]
    cli = Cli(**{"docker ps": C.CliAnswer(0, DOCKER_ID + "\n"),
                 "docker inspect": inspect_answer(DOCKER_ID, "/vllm-llama", "vllm/vllm-openai:v0.11.0", 300, "always")})
    assert behind(monkeypatch, rows, cli)(8000, "docker-proxy", proxy) == 300


@pytest.mark.parametrize("case", ["unnamed", "runtime missing", "inspect fails", "main process gone"])
def test_served_behind_a_publisher_whose_server_cannot_be_read_is_an_error_naming_it(monkeypatch, case):
    """The API-key check must not read the runtime's process in the server's place (it never has a key): a publisher
    whose container's server cannot be found raises ListenerError naming the port and the runtime's process."""
    conmon = ["/usr/bin/conmon", "-c", PODMAN_ID]
    rows = [Row(1, 0, "systemd"), Row(200, 1, "conmon", conmon)]
    find = (lambda name: None) if case == "runtime missing" else (lambda name: "/usr/bin/" + name)
    answers = {"podman inspect": inspect_answer(PODMAN_ID, "hand-vllm", "img", 4321, "no")}
    if case == "inspect fails":
        answers = {"podman inspect": C.CliAnswer(125, "", err="Error: no such container")}
    argv = ["/usr/bin/conmon", "--api-version", "1"] if case == "unnamed" else conmon
    served = behind(monkeypatch, rows, Cli(**answers), find)
    with pytest.raises(L.ListenerError) as raised:
        served(8123, "conmon", argv)
    text = str(raised.value)
    assert "port 8123 is held by conmon" in text
    expected = {"unnamed": "does not name", "runtime missing": "not installed", "inspect fails": "no such container",
                "main process gone": "PID 4321"}[case]
    assert expected in text, text
