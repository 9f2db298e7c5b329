# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container of a host process (_host/container.py): /proc/PID/cgroup files as docker, podman, containerd and CRI-O
write them (cgroup v1 and v2, systemd and cgroupfs drivers) in a fake /proc, the runtime's command line asked for the
name and image (a fake CLI: missing, failing, timing out, answering garbage), and the runtimes' own processes."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host import container as C

DOCKER_ID = "4f1c2a9e8b7d6c5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f"
PODMAN_ID = "1e030a3033f4c66d3f8c1ab292f8490c5dff37766b14782381b20143b1d85617"
K8S_ID = "89abcdef0123456789abcdef0123456789abcdef0123456789abcdef01234567"
POD_UID = "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"
POD_SLICE_UID = POD_UID.replace("-", "_")


def v1(path, unified="/"):
    """A cgroup v1 host's file (hybrid: the unified line last) with every hierarchy at ``path``."""
    controllers = ["hugetlb", "cpuset", "memory", "devices", "freezer", "net_cls,net_prio", "blkio", "perf_event", "pids",
                   "cpu,cpuacct"]
    lines = ["%d:%s:%s" % (12 - index, name, path) for index, name in enumerate(controllers)]
    return "\n".join(lines + ["2:rdma:/", "1:name=systemd:%s" % path, "0::%s" % unified]) + "\n"


def v2(path):
    return "0::%s\n" % path


# podman 4.3.1 with runc and the cgroupfs manager on a cgroup v1 host (Debian 12): read from /proc/HOSTPID/cgroup of
# `python3 -c 'import time; time.sleep(60)'` in a container, and of its conmon
PODMAN_V1_CGROUPFS = "".join("%d:%s:/libpod_parent/libpod-%s\n" % (number, name, PODMAN_ID) for number, name in [
    (9, "name=systemd"), (8, "pids"), (7, "blkio"), (6, "freezer"), (5, "devices"), (4, "memory"), (3, "cpuset"),
    (2, "cpuacct"), (1, "cpu"), (0, "")])
PODMAN_CONMON_V1_CGROUPFS = "9:name=systemd:/\n" + "".join("%d:%s:/libpod_parent/conmon\n" % (number, name) for number, name in [
    (8, "pids"), (7, "blkio"), (6, "freezer"), (5, "devices"), (4, "memory"), (3, "cpuset"), (2, "cpuacct"), (1, "cpu")]) + "0::/\n"

DOCKER = {"runtime": "docker", "container_id": DOCKER_ID, "pod_uid": None, "engine": "docker"}
PODMAN = {"runtime": "podman", "container_id": PODMAN_ID, "pod_uid": None, "engine": "podman"}


def k8s(engine):
    return {"runtime": "kubernetes", "container_id": K8S_ID, "pod_uid": POD_UID, "engine": engine}


CGROUPS = [
    # docker: systemd driver (v2, and v1 where every hierarchy names the scope), cgroupfs driver (v1: the unified line of
    # a hybrid host names no container, the v1 lines do; v2)
    ("docker v2 systemd", v2("/system.slice/docker-%s.scope" % DOCKER_ID), DOCKER),
    ("docker v1 systemd", v1("/system.slice/docker-%s.scope" % DOCKER_ID, "/system.slice/docker-%s.scope" % DOCKER_ID), DOCKER),
    ("docker v1 cgroupfs", v1("/docker/%s" % DOCKER_ID, "/system.slice/containerd.service"), DOCKER),
    ("docker v2 cgroupfs", v2("/docker/%s" % DOCKER_ID), DOCKER),
    ("docker, a container's own sub-cgroup", v2("/docker/%s/init.scope" % DOCKER_ID), DOCKER),
    ("docker rootless", v2("/user.slice/user-1000.slice/user@1000.service/user.slice/docker-%s.scope" % DOCKER_ID), DOCKER),
    # podman: rootful with systemd (v2, its payload's sub-cgroup), rootless, a pod's member, cgroupfs (v1, as read here)
    ("podman v2 systemd", v2("/machine.slice/libpod-%s.scope/container" % PODMAN_ID), PODMAN),
    ("podman v1 systemd", v1("/machine.slice/libpod-%s.scope" % PODMAN_ID, "/machine.slice/libpod-%s.scope" % PODMAN_ID), PODMAN),
    ("podman rootless", v2("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-%s.scope" % PODMAN_ID), PODMAN),
    ("podman pod member", v2("/machine.slice/machine-libpod_pod_%s.slice/libpod-%s.scope" % ("a" * 64, PODMAN_ID)), PODMAN),
    ("podman v1 cgroupfs", PODMAN_V1_CGROUPFS, PODMAN),
    ("podman v2 cgroupfs", v2("/libpod_parent/libpod-%s" % PODMAN_ID), PODMAN),
    # Kubernetes: systemd driver (burstable, besteffort, guaranteed; containerd, CRI-O, cri-dockerd), cgroupfs driver (v1)
    ("k8s burstable containerd v2",
     v2("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope" % (POD_SLICE_UID, K8S_ID)),
     k8s("containerd")),
    ("k8s besteffort crio v2",
     v2("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/crio-%s.scope" % (POD_SLICE_UID, K8S_ID)), k8s("crio")),
    ("k8s guaranteed containerd v2", v2("/kubepods.slice/kubepods-pod%s.slice/cri-containerd-%s.scope" % (POD_SLICE_UID, K8S_ID)),
     k8s("containerd")),
    ("k8s burstable cri-dockerd v1",
     v1("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/docker-%s.scope" % (POD_SLICE_UID, K8S_ID)), k8s("docker")),
    ("k8s burstable cgroupfs v1", v1("/kubepods/burstable/pod%s/%s" % (POD_UID, K8S_ID)), k8s("")),
    ("k8s besteffort cgroupfs v1", v1("/kubepods/besteffort/pod%s/%s" % (POD_UID, K8S_ID)), k8s("")),
    ("k8s guaranteed cgroupfs v1", v1("/kubepods/pod%s/%s" % (POD_UID, K8S_ID)), k8s("")),
    ("k8s in kind (kubelet's cgroup root)", v2("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
                                               "kubelet-kubepods-besteffort-pod%s.slice/cri-containerd-%s.scope" % (POD_SLICE_UID, K8S_ID)),
     k8s("containerd")),
    ("k8s static pod (UID without dashes)", v2("/kubepods/burstable/pod%s/%s" % ("0" * 31 + "e", K8S_ID)),
     dict(k8s(""), pod_uid="0" * 31 + "e")),
    ("k8s burstable crio cgroupfs v1", v1("/kubepods/burstable/pod%s/crio-%s" % (POD_UID, K8S_ID)), k8s("crio")),
    ("a CRI scope with no pod's cgroup above", v2("/kubepods.slice/kubepods-burstable.slice/cri-containerd-%s.scope" % K8S_ID),
     dict(k8s("containerd"), pod_uid=None)),
    # the outermost container wins: the one the host's runtime knows
    ("docker inside podman", v2("/libpod_parent/libpod-%s/docker/%s" % (PODMAN_ID, DOCKER_ID)), PODMAN),
]

NOT_CONTAINERS = [
    ("podman's conmon v2", v2("/machine.slice/libpod-conmon-%s.scope" % PODMAN_ID)),
    ("podman's conmon v1 cgroupfs", PODMAN_CONMON_V1_CGROUPFS),
    ("CRI-O's conmon", v2("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/crio-conmon-%s.scope"
                          % (POD_SLICE_UID, K8S_ID))),
    ("a pod's own cgroup", v2("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice" % POD_SLICE_UID)),
    ("the kubepods slice", v2("/kubepods.slice/kubepods-besteffort.slice")),
    ("a systemd service v2", v2("/system.slice/nvidia-persistenced.service")),
    ("a systemd service v1", v1("/system.slice/vllm-llama.service", "/system.slice/vllm-llama.service")),
    ("dockerd itself", v2("/system.slice/docker.service")),
    ("a user's session", v2("/user.slice/user-1000.slice/session-3.scope")),
    ("a user's manager", v2("/user.slice/user-1000.slice/user@1000.service/init.scope")),
    ("a short id is no container id", v2("/docker/4f1c2a9e8b7d")),
    ("a bare id below kubepods but no pod", v2("/kubepods/burstable/%s" % K8S_ID)),
    ("a unit named like docker", v2("/system.slice/docker-cleanup.service")),
    ("the root", v2("/")),
]


def fake_proc(root, pid, cgroup):
    (root / str(pid)).mkdir()
    (root / str(pid) / "cgroup").write_text(cgroup)


@pytest.mark.parametrize("cgroup, expected", [case[1:] for case in CGROUPS], ids=[case[0] for case in CGROUPS])
def test_a_containers_cgroup_names_its_runtime_and_id(tmp_path, cgroup, expected):
    fake_proc(tmp_path, 4242, cgroup)
    assert C.container_of(4242, proc=str(tmp_path)) == C.ContainerRef(**expected)


@pytest.mark.parametrize("cgroup", [case[1] for case in NOT_CONTAINERS], ids=[case[0] for case in NOT_CONTAINERS])
def test_other_cgroups_are_no_container(tmp_path, cgroup):
    fake_proc(tmp_path, 4242, cgroup)
    assert C.container_of(4242, proc=str(tmp_path)) is None


def test_a_process_that_is_gone_or_unreadable_is_in_no_container(tmp_path):
    assert C.container_of(4242, proc=str(tmp_path)) is None
    fake_proc(tmp_path, 4343, "")
    assert C.container_of(4343, proc=str(tmp_path)) is None
    (tmp_path / "4444").mkdir()
    (tmp_path / "4444" / "cgroup").mkdir()  # reading it fails (EISDIR), as a file this user may not read would
    assert C.container_of(4444, proc=str(tmp_path)) is None


def test_this_process_is_read_from_the_real_proc():
    """Whatever this test runs in, its own cgroup file is read and judged without an error."""
    found = C.container_of(os.getpid())
    assert found is None or found.runtime in (C.DOCKER, C.PODMAN, C.KUBERNETES)


# ---- name and image, from the runtime's command line -------------------------------------------------------------

# `podman inspect --type container --format json ID` of the container above (podman 4.3.1), cut to what is read
PODMAN_INSPECT = json.dumps([{"Id": PODMAN_ID, "Created": "2026-12-02T17:15:44.643008803Z", "Name": "zealous_driscoll",
                              "ImageName": "localhost/gpuops-sim:test", "Image": "98aeca09d0b3" + "0" * 52,
                              "Config": {"Image": "localhost/gpuops-sim:test", "Cmd": ["python3", "-c", "import time; time.sleep(60)"]},
                              "State": {"Pid": 8899}}], indent=5)
# `docker inspect --type container ID`: Name with its slash, the image as given in Config.Image, its digest in Image
DOCKER_INSPECT = json.dumps([{"Id": DOCKER_ID, "Name": "/vllm-llama", "Image": "sha256:" + "b" * 64,
                              "Config": {"Image": "vllm/vllm-openai:v0.11.0", "Cmd": ["--model", "org/model"]},
                              "State": {"Pid": 4242}}], indent=4)


class FakeCli:
    """Stands for run_cli: records each command, answers from ``answers`` (argv[0] -> CliAnswer)."""

    def __init__(self, **answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv, timeout):
        self.calls.append((list(argv), timeout))
        return self.answers[os.path.basename(argv[0])]


@pytest.fixture
def host(tmp_path):
    """A fake /proc: 10 and 11 in the same podman container, 20 in a docker container, 30 in a Kubernetes pod, 40 a
    systemd service."""
    fake_proc(tmp_path, 10, PODMAN_V1_CGROUPFS)
    fake_proc(tmp_path, 11, v2("/libpod_parent/libpod-%s" % PODMAN_ID))
    fake_proc(tmp_path, 20, v2("/system.slice/docker-%s.scope" % DOCKER_ID))
    fake_proc(tmp_path, 30, v2("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope"
                               % (POD_SLICE_UID, K8S_ID)))
    fake_proc(tmp_path, 40, v2("/system.slice/vllm-llama.service"))
    return str(tmp_path)


def find(name):
    return "/usr/bin/" + name


def test_name_and_image_come_from_the_runtimes_inspect(host):
    cli = FakeCli(podman=C.CliAnswer(0, PODMAN_INSPECT), docker=C.CliAnswer(0, DOCKER_INSPECT))
    reader = C.ContainerReader(find, cli, timeout=2.5, proc=host)
    assert reader.describe(10) == {"runtime": "podman", "id": PODMAN_ID, "name": "zealous_driscoll", "image": "localhost/gpuops-sim:test"}
    assert reader.describe(20) == {"runtime": "docker", "id": DOCKER_ID, "name": "vllm-llama", "image": "vllm/vllm-openai:v0.11.0"}
    assert cli.calls == [(["/usr/bin/podman", "inspect", "--type", "container", "--format", "json", PODMAN_ID], 2.5),
                         (["/usr/bin/docker", "inspect", "--type", "container", DOCKER_ID], 2.5)]


def test_each_container_is_asked_once_per_reader(host):
    cli = FakeCli(podman=C.CliAnswer(0, PODMAN_INSPECT))
    reader = C.ContainerReader(find, cli, proc=host)
    assert reader.describe(10) == reader.describe(11) == reader.describe(10)
    assert len(cli.calls) == 1
    C.ContainerReader(find, cli, proc=host).describe(11)
    assert len(cli.calls) == 2, "a new reader (the next module run) asks again"


def test_kubernetes_gives_the_pod_uid_and_asks_no_cli(host):
    cli = FakeCli()
    got = C.ContainerReader(find, cli, proc=host).describe(30)
    assert got == {"runtime": "kubernetes", "id": K8S_ID, "name": None, "image": None, "pod_uid": POD_UID}
    assert cli.calls == []


def test_a_process_in_no_container_is_none_and_asks_nothing(host):
    cli = FakeCli()
    looked_up = []
    reader = C.ContainerReader(looked_up.append, cli, proc=host)
    assert reader.describe(40) is None and reader.describe(99) is None
    assert cli.calls == [] and looked_up == []


def test_a_missing_cli_leaves_name_and_image_none(host):
    cli = FakeCli()
    looked_up = []

    def missing(name):
        looked_up.append(name)

    reader = C.ContainerReader(missing, cli, proc=host)
    assert reader.describe(10) == {"runtime": "podman", "id": PODMAN_ID, "name": None, "image": None}
    assert reader.describe(20)["name"] is None and reader.describe(20)["id"] == DOCKER_ID
    assert cli.calls == [] and looked_up == ["podman", "docker"], "each command is looked up once"


@pytest.mark.parametrize("answer", [
    C.CliAnswer(125, "[]"),  # podman: no such container (rootless podman's, asked as root)
    C.CliAnswer(1, DOCKER_INSPECT),  # a failure, whatever it printed
    C.CliAnswer(None, ""),  # could not be started
    C.CliAnswer(0, "Error: not json\n"),
    C.CliAnswer(0, ""),
    C.CliAnswer(0, "[]"),
    C.CliAnswer(0, json.dumps({"Id": DOCKER_ID, "Name": "/vllm"})),  # not a list
    C.CliAnswer(0, json.dumps([{"Id": DOCKER_ID, "Name": "/a"}, {"Id": DOCKER_ID, "Name": "/b"}])),
    C.CliAnswer(0, json.dumps([{"Id": "c" * 64, "Name": "/another", "Config": {"Image": "x"}}])),  # another container
    C.CliAnswer(0, json.dumps(["vllm"])),
])
def test_a_failing_or_garbage_answer_leaves_name_and_image_none(host, answer):
    reader = C.ContainerReader(find, FakeCli(docker=answer), proc=host)
    assert reader.describe(20) == {"runtime": "docker", "id": DOCKER_ID, "name": None, "image": None}


@pytest.mark.parametrize("item, expected", [
    ({"Name": 7, "Config": {"Image": ["x"]}}, (None, None)),
    ({"Name": "/", "Config": "x"}, (None, None)),
    ({"Name": "vllm", "ImageName": "", "Config": {"Image": "vllm/vllm-openai:latest"}}, ("vllm", "vllm/vllm-openai:latest")),
    ({}, (None, None)),
])
def test_odd_fields_of_the_right_container_are_none(item, expected):
    state = C.parse_container(json.dumps([dict(item, Id=DOCKER_ID)]), DOCKER_ID)
    assert state is not None and (state.name, state.image) == expected


def test_a_runtime_that_times_out_is_not_asked_again(tmp_path):
    fake_proc(tmp_path, 20, v2("/system.slice/docker-%s.scope" % DOCKER_ID))
    other = "d" * 64
    fake_proc(tmp_path, 21, v2("/system.slice/docker-%s.scope" % other))
    cli = FakeCli(docker=C.CliAnswer(None, "", timed_out=True))
    reader = C.ContainerReader(find, cli, proc=str(tmp_path))
    assert reader.describe(20)["name"] is None and reader.describe(21) == {"runtime": "docker", "id": other, "name": None, "image": None}
    assert len(cli.calls) == 1


def write_cli(folder, name, script):
    path = folder / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_run_cli_runs_a_real_command_and_kills_one_that_hangs(tmp_path):
    answer = write_cli(tmp_path, "docker", "echo \"$@\"; exit 3\n")
    assert C.run_cli([answer, "inspect", "x y"], 5.0) == C.CliAnswer(3, "inspect x y\n")
    hangs = write_cli(tmp_path, "podman", "echo started > %s/started; exec sleep 30\n" % tmp_path)
    began = time.monotonic()
    assert C.run_cli([hangs, "inspect"], 0.5) == C.CliAnswer(None, "", timed_out=True)
    assert time.monotonic() - began < 10 and (tmp_path / "started").exists()
    missing = C.run_cli([str(tmp_path / "missing")], 5.0)
    assert missing._replace(err="") == C.CliAnswer(None, "") and "No such file" in missing.err
    complains = write_cli(tmp_path, "runc", "echo out; echo 'Error: no such container' >&2; exit 125\n")
    assert C.run_cli([complains], 5.0) == C.CliAnswer(125, "out\n", err="Error: no such container\n")


def test_a_real_cli_on_the_path_answers_the_reader(host, tmp_path, monkeypatch):
    """The default reader: the command found on the PATH and run by run_cli (a script that prints what podman would)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "inspect.json").write_text(PODMAN_INSPECT)
    write_cli(bin_dir, "podman", '[ "$6" = "%s" ] && cat %s/inspect.json\n' % (PODMAN_ID, tmp_path))
    write_cli(bin_dir, "docker", "exec sleep 30\n")
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ.get("PATH", ""))
    reader = C.ContainerReader(timeout=0.5, proc=host)
    assert reader.describe(10)["name"] == "zealous_driscoll" and reader.describe(10)["image"] == "localhost/gpuops-sim:test"
    assert reader.describe(20) == {"runtime": "docker", "id": DOCKER_ID, "name": None, "image": None}


# ---- the runtimes' own processes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, cmdline", [
    ("conmon", ["/usr/bin/conmon", "--api-version", "1", "-c", PODMAN_ID, "-u", PODMAN_ID, "-r", "/usr/bin/runc"]),
    ("podman", ["podman", "run", "--rm", "-it", "vllm/vllm-openai"]),
    ("podman", ["/usr/bin/podman", "--root", "/var/lib/containers/storage", "container", "cleanup", PODMAN_ID]),
    ("runc", ["runc", "--root", "/run/runc", "start", PODMAN_ID]),
    ("runc:[2:INIT]", ["runc", "init"]),
    ("crun", ["/usr/bin/crun", "create", "--bundle", "/run/x", PODMAN_ID]),
    ("containerd", ["/usr/bin/containerd"]),
    ("containerd-shim", ["/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-id", DOCKER_ID, "-address",
                         "/run/containerd/containerd.sock"]),
    ("dockerd", ["/usr/bin/dockerd", "-H", "fd://", "--containerd=/run/containerd/containerd.sock"]),
    ("docker-proxy", ["/usr/bin/docker-proxy", "-proto", "tcp", "-host-ip", "0.0.0.0", "-host-port", "8000"]),
    ("docker", ["docker", "run", "--gpus", "all", "vllm/vllm-openai"]),
    ("crio", ["/usr/bin/crio"]),
    ("conmonrs", ["/usr/bin/conmonrs", "--runtime", "/usr/bin/crun"]),
    ("catatonit", ["/usr/libexec/podman/catatonit", "-P"]),
    ("podman-init", ["/run/podman-init", "--", "python3", "-c", "import time; time.sleep(30)"]),  # podman run --init, as read here
    ("docker-init", ["/sbin/docker-init", "--", "vllm", "serve", "org/model"]),
    (None, ["/usr/bin/containerd-shim-runc-v2", "-id", DOCKER_ID]),
])
def test_a_runtimes_own_process_is_told_by_its_program(name, cmdline):
    assert C.is_runtime_process(name, cmdline)


@pytest.mark.parametrize("name, cmdline", [
    ("python3", ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "org/model"]),
    ("VLLM::Worker_TP0", ["VLLM::Worker_TP0"]),
    ("python3", ["python3", "-c", "import time; time.sleep(60)"]),  # the container's payload, PID 1 inside or not
    ("bash", ["/bin/bash", "/opt/run.sh", "podman", "run", "vllm"]),  # names a runtime in its arguments only
    ("vllm", ["vllm", "serve", "org/model", "--served-model-name", "dockerd"]),
    ("podman-exporter", ["/usr/bin/prometheus-podman-exporter"]),
    ("containerd-expo", ["/usr/bin/containerd-exporter"]),
    ("crictl", ["crictl", "ps"]),
    ("tini", ["/usr/bin/tini", "--", "vllm", "serve"]),  # an image's own init, not the runtime's
    (None, None),
    ("", []),
])
def test_other_processes_are_not_the_runtimes(name, cmdline):
    assert not C.is_runtime_process(name, cmdline)


@pytest.mark.parametrize("cmdline, expected", [
    (["/usr/bin/conmon", "--api-version", "1", "-c", PODMAN_ID, "-u", PODMAN_ID], PODMAN_ID),
    (["/usr/bin/conmon", "--cid", PODMAN_ID], PODMAN_ID),
    (["/usr/bin/conmon", "--cid=" + PODMAN_ID], PODMAN_ID),
    (["/usr/bin/conmon", "-c", PODMAN_ID[:12]], None),  # a short id is not what conmon is given
    (["/usr/bin/conmon", "-c"], None),
    (["/usr/bin/conmon", "-u", PODMAN_ID], None),  # -u is the session's id, not the container's
])
def test_conmon_names_the_container_it_monitors(cmdline, expected):
    assert C.conmon_container_id(cmdline) == expected


# ---- the runtimes' client: one command found once, run within its timeout, one inspect answer ------------------------

# `podman inspect` of a container the role launched, cut to every field read (podman 4.3: no slash in Name, ImageName)
PODMAN_FULL = json.dumps([{"Id": PODMAN_ID, "Name": "gpuops-vllm-8000", "ImageName": "registry.example/vllm:1",
                           "State": {"Status": "running", "Running": True, "Pid": 4242, "ConmonPid": 4241, "ExitCode": 0},
                           "Config": {"Image": "registry.example/vllm:1", "Labels": {"gpuops.fleet.server": "vllm-8000"}},
                           "HostConfig": {"RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0}},
                           "RestartCount": 2}])
# `docker inspect` of a stopped one: Name with its slash, the image in Config.Image only, no ConmonPid, Pid 0
DOCKER_FULL = json.dumps([{"Id": DOCKER_ID, "Name": "/vllm-llama", "Image": "sha256:" + "b" * 64,
                           "State": {"Status": "exited", "Running": False, "Pid": 0, "ExitCode": 137},
                           "Config": {"Image": "vllm/vllm-openai:v0.11.0", "Labels": None},
                           "HostConfig": {"RestartPolicy": {"Name": "", "MaximumRetryCount": 0}},
                           "RestartCount": 0}])


def test_the_client_reads_podmans_inspect_with_every_field():
    cli = FakeCli(podman=C.CliAnswer(0, PODMAN_FULL))
    state, answer = C.RuntimeClient(find, cli).inspect(C.PODMAN, PODMAN_ID)
    assert state == C.ContainerState(name="gpuops-vllm-8000", image="registry.example/vllm:1", running=True, pid=4242,
                                     restart_policy="unless-stopped", restart_count=2, id=PODMAN_ID, status="running", exit_code=0,
                                     conmon_pid=4241, labels={"gpuops.fleet.server": "vllm-8000"})
    assert answer == C.CliAnswer(0, PODMAN_FULL)
    assert cli.calls == [(["/usr/bin/podman", "inspect", "--type", "container", "--format", "json", PODMAN_ID], C.INSPECT_TIMEOUT_S)]


def test_the_client_reads_dockers_inspect_alike():
    cli = FakeCli(docker=C.CliAnswer(0, DOCKER_FULL))
    state, _answer = C.RuntimeClient(find, cli).inspect(C.DOCKER, DOCKER_ID, timeout=None)
    assert state == C.ContainerState(name="vllm-llama", image="vllm/vllm-openai:v0.11.0", running=False, pid=0, restart_policy="no",
                                     restart_count=0, id=DOCKER_ID, status="exited", exit_code=137, conmon_pid=None, labels={})
    assert cli.calls == [(["/usr/bin/docker", "inspect", "--type", "container", DOCKER_ID], None)]


def test_the_client_asks_by_name_without_checking_the_id_and_by_id_with():
    cli = FakeCli(podman=C.CliAnswer(0, PODMAN_FULL))
    client = C.RuntimeClient(find, cli)
    assert client.inspect(C.PODMAN, "gpuops-vllm-8000").state.id == PODMAN_ID
    assert client.inspect(C.PODMAN, "c" * 64).state is None, "an answer about another container is no answer"


def test_a_missing_runtime_is_looked_up_once_and_asks_nothing():
    looked_up = []

    def missing(name):
        looked_up.append(name)

    cli = FakeCli()
    client = C.RuntimeClient(missing, cli)
    assert client.inspect(C.DOCKER, DOCKER_ID) == C.Inspected(None, None) == client.inspect(C.DOCKER, DOCKER_ID)
    assert client.cli(C.KUBERNETES) is None and looked_up == ["docker"] and cli.calls == []


def test_a_timeout_is_no_state_and_says_so():
    cli = FakeCli(podman=C.CliAnswer(None, "", timed_out=True))
    client = C.RuntimeClient(find, cli)
    state, answer = client.inspect(C.PODMAN, PODMAN_ID, timeout=2.5)
    assert state is None and answer.timed_out and C.failure(answer, 2.5) == "no answer within 2.5 s"
    client.forget(C.PODMAN)
    assert client.inspect(C.PODMAN, PODMAN_ID) == C.Inspected(None, None) and len(cli.calls) == 1


@pytest.mark.parametrize("answer, said", [
    (C.CliAnswer(None, "", err="[Errno 2] No such file or directory: 'podman'"), "could not be run: [Errno 2] No such file or directory: 'podman'"),
    (C.CliAnswer(125, "", err="Error: first\nError: no such container x\n"), "exited 125: Error: no such container x"),
    (C.CliAnswer(1, ""), "exited 1"),
    (C.CliAnswer(0, "[]"), "an answer that is not this container"),
])
def test_failure_says_why_in_words(answer, said):
    assert C.failure(answer, 5.0) == said


def test_the_client_runs_a_real_missing_command_and_one_without_a_timeout(tmp_path):
    client = C.RuntimeClient(lambda name: str(tmp_path / name))
    state, answer = client.inspect(C.PODMAN, PODMAN_ID)
    assert state is None and answer.rc is None and "No such file" in answer.err
    slow = write_cli(tmp_path, "docker", "sleep 0.2; echo done\n")
    assert client.run([slow], None) == C.CliAnswer(0, "done\n")
