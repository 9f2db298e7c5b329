# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's container launch mode through real `ansible-playbook playbooks/restart_vllm.yml` runs with this machine's
root podman, on a simulated host.

The container's GPUs are CDI devices of a kind of this test's own (a spec written under /var/run/cdi, removed after):
each device says which of the simulated host's GPUs it is (GPUOPS_SIM_CDI_GPU_N, which the fake vLLM reads as a
container's visible GPUs) and mounts the host's state. The image is empty; the host's /usr, the repository and its
virtual environment are mounted read-only, so that the fake vLLM runs in it as it runs on the host. The container has
a PID namespace of its own where the simulator lists a process in another PID namespace under its host PID
(gpusim.api.pid_namespace), else it shares the host's (--pid host).

Outcomes are judged by independent readings: podman inspect, /proc, the simulator's own view of each GPU.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import typing as t
import uuid
from pathlib import Path

import psutil
import pytest

from ansible_run import BIN, REPO, RESTART, flat, recap, run_playbook
from containers import docker_daemon, docker_missing, imported_image, unique_tag
import gpusim.api
from gpusim.api import free_port, pid_alive, starttime, wait_for
from gpusim.spawn import FAKEVLLM_DIR
from inventories import inventory_for, role_host_vars, write_role_inventory
from readings import assert_server_owns_gpus, health, holders, listening_pid

PODMAN = shutil.which("podman")
ROLLOUT = REPO / "playbooks" / "rollout_vllm.yml"
# each test writes a spec of a kind of its own: two spec files that define the same device make it unresolvable
KIND = "gpuops-test-%s.example/gpu"
CDI_DIR = Path("/var/run/cdi")
# runc: crun fails on this machine's cgroups (v1 and v2 side by side); limits no higher than the machine grants
RUN_OPTIONS = ["--runtime", "runc", "--ulimit", "nofile=1024:20000", "--ulimit", "nproc=4096:4096"]
OWN_PID_NAMESPACE = hasattr(gpusim.api, "pid_namespace")
VENV = (REPO / ".venv").resolve()

pytestmark = pytest.mark.skipif(PODMAN is None or os.geteuid() != 0, reason="needs root's podman (Debian packages podman runc catatonit)")


def podman(*args: str, check: bool = True) -> "subprocess.CompletedProcess[str]":
    done = subprocess.run([str(PODMAN), *args], capture_output=True, text=True, timeout=120, check=False)
    if check and done.returncode != 0:
        raise AssertionError("podman %s exited %d: %s" % (" ".join(args), done.returncode, done.stderr.strip()))
    return done


def inspect(name: str) -> t.Optional[t.Dict[str, t.Any]]:
    done = podman("inspect", "--type", "container", name, check=False)
    return json.loads(done.stdout)[0] if done.returncode == 0 else None


@pytest.fixture
def empty_image() -> t.Iterator[str]:
    """An image with nothing in it, imported for the test and removed by its id after."""
    name = "localhost/gpuops-empty-%s:test" % uuid.uuid4().hex[:8]
    tar = subprocess.run(["tar", "-cf", "-", "-T", "/dev/null"], capture_output=True, check=True).stdout
    imported = subprocess.run([str(PODMAN), "import", "-", name], input=tar, capture_output=True, timeout=120, check=True)
    assert imported.stdout.strip()
    yield name
    # by its name: an empty image has the same id wherever it is imported, and another test may hold it under its own
    # name; podman removes the image itself with its last name
    podman("rmi", name, check=False)


@pytest.fixture
def cdi_spec(make_host: t.Callable[..., t.Any]) -> t.Iterator[t.Tuple[t.Any, Path]]:
    """A simulated host, and a CDI spec of a kind of its own (host.cdi_kind) whose device N is its GPU N (and mounts its
    state); removed after."""
    host = make_host("gpu-node-01")
    token = uuid.uuid4().hex[:8]
    host.cdi_kind = KIND % token
    spec = {
        "cdiVersion": "0.5.0",
        "kind": host.cdi_kind,
        "devices": [{"name": str(index), "containerEdits": {"env": ["GPUOPS_SIM_CDI_GPU_%d=%d" % (index, index)]}}
                    for index in range(8)],
        "containerEdits": {"mounts": [{"hostPath": str(host.state), "containerPath": str(host.state), "options": ["bind", "rw"]}]},
    }
    CDI_DIR.mkdir(parents=True, exist_ok=True)
    path = CDI_DIR / ("gpuops-test-%s.json" % token)
    path.write_text(json.dumps(spec))
    try:
        yield host, path
    finally:
        path.unlink()


def host_volumes() -> t.List[str]:
    """Read-only mounts that let the empty image run the fake vLLM as the host runs it: /usr, the repository, its venv."""
    volumes = ["/usr:/usr:ro", "/lib:/lib:ro", "/lib64:/lib64:ro", "/bin:/bin:ro", "%s:%s:ro" % (REPO, REPO)]
    for path in (VENV, Path(sys.base_prefix).resolve()):
        if not str(path).startswith(("/usr/", str(REPO) + "/")):
            volumes.append("%s:%s:ro" % (path, path))
    return volumes


def container_inventory(tmp_path: Path, host: t.Any, image: str, **extra: t.Any) -> t.Tuple[Path, str]:
    """The inventory of one simulated host whose server runs in a container of ``image`` on GPUs 2 and 5; its name."""
    host.port = free_port()
    name = "gpuops-ctr-%s" % uuid.uuid4().hex[:8]
    volumes = host_volumes()
    variables = {
        "vllm_server_launch_mode": "container",
        "vllm_server_name": name,
        "vllm_server_container_name": name,
        "vllm_server_container_image": image,
        "vllm_server_container_runtime": "podman",
        "vllm_server_container_cdi_kind": host.cdi_kind,
        "vllm_server_container_volumes": volumes,
        "vllm_server_container_run_options": RUN_OPTIONS + ([] if OWN_PID_NAMESPACE else ["--pid", "host"]),
        "vllm_server_tensor_parallel_size": 2,
        "vllm_server_gpus": [2, 5],
        "vllm_server_env": {"NCCL_PROTO": "LL", "HF_TOKEN": "hf_secret_value"},
    }
    variables.update(extra)
    return inventory_for(tmp_path, [host], {host.name: variables}), name


def test_container_launch_idempotent_drift_and_stop(cdi_spec, empty_image, tmp_path):
    host, _spec = cdi_spec
    inventory, name = container_inventory(tmp_path, host, empty_image)
    try:
        run = run_playbook(RESTART, inventory)
        assert run.returncode == 0, run.stdout[-6000:]
        first = inspect(name)
        assert first is not None and first["State"]["Running"], first
        main_pid = first["State"]["Pid"]
        host_pidns = os.readlink("/proc/self/ns/pid")
        assert (os.readlink("/proc/%d/ns/pid" % main_pid) != host_pidns) == OWN_PID_NAMESPACE
        labels = first["Config"]["Labels"]
        assert labels["gpuops.fleet.managed-by"] == "gpuops.fleet.vllm_server" and len(labels["gpuops.fleet.config-hash"]) == 64
        assert first["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
        # the secret is in the 0600 environment file, never on the runtime's command line
        assert "hf_secret_value" not in " ".join(first["Config"].get("CreateCommand") or []) and "hf_secret_value" not in run.stdout
        env_file = Path(host.state) / "role" / ("%s.env" % name)
        assert env_file.stat().st_mode & 0o777 == 0o600
        environ = Path("/proc/%d/environ" % main_pid).read_bytes().split(b"\0")
        assert b"NCCL_PROTO=LL" in environ and b"CUDA_VISIBLE_DEVICES=0,1" in environ and b"HF_TOKEN=hf_secret_value" in environ
        held = holders(host)
        assert held[2] and held[5] and not any(held[i] for i in (0, 1, 3, 4, 6, 7)), held
        assert set(held[2] + held[5]) <= set(_tree(main_pid)), held
        # its compile cache: the host's directory, mounted at its own path (the container's own view, through /proc)
        cache = Path(host.state) / "caches" / "vllm"
        assert ("VLLM_CACHE_ROOT=%s" % cache).encode() in environ and cache.is_dir()
        assert str(cache) in [mount["Destination"] for mount in first["Mounts"]], first["Mounts"]
        # its start-up, read from the container's own output: it compiled into that cache
        assert re.search(r"start-up [0-9.]+ s: weights [^:]*, compile: compiled", flat(run.stdout)), flat(run.stdout)[-3000:]
        (cache / "canary").write_text("compiled\n")
        assert Path("/proc/%d/root%s/canary" % (main_pid, cache)).read_text() == "compiled\n"

        again = run_playbook(RESTART, inventory, "-e", "vllm_server_state=started")
        assert again.returncode == 0, again.stdout[-4000:]
        assert recap(again.stdout)[host.name]["changed"] == 0, again.stdout[-3000:]

        # the fleet report reads the container's record through podman: its server runs, and its workers are its own
        report = run_playbook(REPO / "playbooks" / "gpu_report.yml", inventory, "-e", "gpu_report_dir=%s" % (tmp_path / "report"))
        assert report.returncode == 0, report.stdout[-3000:]
        (seen,) = json.loads((tmp_path / "report" / "report.json").read_text())["hosts"]
        (server,) = seen["servers"]
        assert (server["running"], server["pid"], server["error"], server["container"]["name"]) == (True, main_pid, None, name), server
        owners = {holder["pid"]: holder["owner"] for gpu in seen["gpus"] if gpu["index"] in (2, 5) for holder in gpu["holders"]}
        assert owners and set(owners.values()) == {"server"}, owners
        same = inspect(name)
        assert same is not None and same["Id"] == first["Id"] and same["State"]["Pid"] == main_pid

        # check mode previews the drift and touches nothing
        preview = run_playbook(RESTART, inventory, "--check", "-e", "vllm_server_state=started",
                               "-e", json.dumps({"vllm_server_env_overrides": {"NCCL_PROTO": "LL128"}}))
        assert preview.returncode == 0, preview.stdout[-4000:]
        said = flat(preview.stdout)
        assert "%s: CHECK MODE: would be restarted (its configuration changed)" % host.name in said, said[-3000:]
        assert "nothing was changed" in said
        same = inspect(name)
        assert same is not None and same["Id"] == first["Id"] and same["State"]["Pid"] == main_pid and pid_alive(main_pid)

        drift = run_playbook(RESTART, inventory, "-e", "vllm_server_state=started", "-e", json.dumps({"vllm_server_env_overrides": {"NCCL_PROTO": "LL128"}}))
        assert drift.returncode == 0, drift.stdout[-4000:]
        replaced = inspect(name)
        assert replaced is not None and replaced["Id"] != first["Id"] and replaced["State"]["Running"]
        assert replaced["Config"]["Labels"]["gpuops.fleet.config-hash"] != labels["gpuops.fleet.config-hash"]
        assert not pid_alive(main_pid)
        assert b"NCCL_PROTO=LL128" in Path("/proc/%d/environ" % replaced["State"]["Pid"]).read_bytes().split(b"\0")
        # the replaced container keeps the same compile cache (its own running server's place)
        assert Path("/proc/%d/root%s/canary" % (replaced["State"]["Pid"], cache)).read_text() == "compiled\n"
        # and loaded its graphs from it (NCCL is not in the compile cache's key), as the new container's output says
        assert re.search(r"start-up [0-9.]+ s: weights [^:]*, compile: cache hit", flat(drift.stdout)), flat(drift.stdout)[-3000:]

        stop = run_playbook(RESTART, inventory, "-e", "vllm_server_state=stopped")
        assert stop.returncode == 0, stop.stdout[-4000:]
        assert inspect(name) is None
        assert not any(holders(host)[i] for i in range(8)), holders(host)
        assert (cache / "canary").read_text() == "compiled\n", "the role's stop removed the cache"
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)


def _tree(pid: int) -> t.List[int]:
    """``pid`` and its descendants, from /proc."""
    try:
        proc = psutil.Process(pid)
        return [pid] + [child.pid for child in proc.children(recursive=True)]
    except psutil.Error:
        return []


def test_a_published_port_held_by_conmon_is_the_container_own(cdi_spec, empty_image, tmp_path):
    """On podman's bridge network the port is published (-p) and held on the host by the container's conmon: a drift,
    which reads the port's holder under the lock, replaces the container instead of refusing that holder."""
    host, _spec = cdi_spec
    inventory, name = container_inventory(tmp_path, host, empty_image, vllm_server_container_network="bridge",
                                          vllm_server_args=["--host", "0.0.0.0"])
    try:
        run = run_playbook(RESTART, inventory)
        assert run.returncode == 0, run.stdout[-6000:]
        first = inspect(name)
        assert first is not None and first["State"]["Running"] and first["HostConfig"]["NetworkMode"] == "bridge"
        assert first["HostConfig"]["PortBindings"]["%d/tcp" % host.port][0]["HostPort"] == str(host.port)
        listeners = {c.pid for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN and c.laddr.port == host.port}
        assert listeners == {first["State"]["ConmonPid"]}, (listeners, first["State"])

        drift = run_playbook(RESTART, inventory, "-e", json.dumps({"vllm_server_env_overrides": {"NCCL_PROTO": "LL128"}}))
        assert drift.returncode == 0, drift.stdout[-6000:]
        replaced = inspect(name)
        assert replaced is not None and replaced["Id"] != first["Id"] and replaced["State"]["Running"]

        stop = run_playbook(RESTART, inventory, "-e", "vllm_server_state=stopped")
        assert stop.returncode == 0, stop.stdout[-4000:]
        assert inspect(name) is None and not any(holders(host)[i] for i in range(8)), holders(host)
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)


def start_by_hand(host: t.Any, image: str, name: str, *args: str) -> None:
    """`podman run -d --restart=always -p PORT:PORT` of a fake vLLM server (TP=2, GPUs 0 and 1, ``args`` added), as
    someone would start it by hand, on a free port (host.port); returns once it answers /health."""
    host.port = free_port()
    argv = [str(BIN / "python3"), str(FAKEVLLM_DIR / "bin" / "vllm"), "serve", "zai-org/GLM-5-GGUF", "--host", "0.0.0.0",
            "--port", str(host.port), "--tensor-parallel-size", "2", *args]
    options = ["--name", name, "--restart=always", "-p", "%d:%d" % (host.port, host.port), "-e", "GPUOPS_SIM_STATE=%s" % host.state]
    options += ["--device", "%s=0" % host.cdi_kind, "--device", "%s=1" % host.cdi_kind]
    options += [word for volume in host_volumes() for word in ("-v", volume)] + RUN_OPTIONS
    options += [] if OWN_PID_NAMESPACE else ["--pid", "host"]
    podman("run", "-d", *options, image, *argv)
    assert wait_for(lambda: health(host.port) == 200, 60, 0.2), podman("logs", name, check=False).stdout[-2000:]


def test_a_container_started_by_hand_on_the_port_is_taken_over_through_podman(cdi_spec, empty_image, tmp_path):
    """`podman run -d --restart=always -p PORT:PORT ...` of a vLLM server by hand, on the inventory's port and GPUs; the
    role runs in its process mode. A configuration without an API key is refused (the container's server requires one),
    stopping nothing; --check names the container and changes nothing; the run stops the container through
    podman (never signalling it: its restart policy would start it again), keeps it, stopped, and launches its own server;
    a rerun leaves that alone."""
    host, _spec = cdi_spec
    hand = "hand-vllm-%s" % uuid.uuid4().hex[:8]
    try:
        start_by_hand(host, empty_image, hand, "--api-key", "sk-hand-secret")
        inventory = inventory_for(tmp_path, [host], vllm_server_tensor_parallel_size=2, vllm_server_env={"VLLM_API_KEY": "sk-role-key"})
        first = inspect(hand)
        assert first is not None and listening_pid(host.port) == first["State"]["ConmonPid"], "conmon holds the published port"
        tree = {pid: starttime(pid) for pid in _tree(first["State"]["Pid"])}
        held = holders(host)
        assert held[0] and held[1] and set(held[0] + held[1]) <= set(tree), (held, tree)

        # a configuration without a key of its own is refused before anything stops: the key is on the command line of
        # the container's server, not on conmon's, which holds the published port
        opened = run_playbook(RESTART, inventory, "-e", json.dumps({"vllm_server_env": {}}))
        said = flat(opened.stdout)
        assert opened.returncode != 0 and "nothing was stopped" in said, said[-4000:]
        assert "(PID %d) requires an API key (--api-key on its command line)" % first["State"]["Pid"] in said, said[-4000:]
        assert "sk-hand-secret" not in said
        kept = inspect(hand)
        assert kept is not None and kept["State"]["Running"] and kept["State"]["Pid"] == first["State"]["Pid"]
        assert all(pid_alive(pid, start) for pid, start in tree.items())

        preview = run_playbook(RESTART, inventory, "--check")
        said = flat(preview.stdout)
        assert preview.returncode == 0, said[-4000:]
        assert "would take over PID" in said and "in the podman container %s (image %s" % (hand, empty_image) in said, said[-3000:]
        assert "would stop its podman container through podman and keep it, stopped" in said and "sk-hand-secret" not in said
        same = inspect(hand)
        assert same is not None and same["State"]["Running"] and same["State"]["Pid"] == first["State"]["Pid"]
        assert all(pid_alive(pid, start) for pid, start in tree.items())

        run = run_playbook(RESTART, inventory)
        text = flat(run.stdout)
        assert run.returncode == 0, text[-6000:]
        after = inspect(hand)
        assert after is not None and not after["State"]["Running"], "the container is kept, stopped"
        assert [pid for pid, start in tree.items() if pid_alive(pid, start)] == []
        server, _workers = assert_server_owns_gpus(host, [0, 1], 2)
        assert server not in tree and "libpod" not in Path("/proc/%s/cgroup" % server).read_text(), "the role's server runs on the host"
        assert "taken over: PID" in text and "started in the podman container %s" % hand in text, text[-4000:]
        assert "its container stopped through podman" in text and "podman-restart.service" in text, text[-4000:]
        assert "sk-hand-secret" not in text and "--api-key ********" in text
        # its restart policy did not start it again: the runtime was asked to stop it, nothing signalled it
        assert not wait_for(lambda: (inspect(hand) or {}).get("State", {}).get("Running"), 3, 0.5)
        assert (inspect(hand) or {}).get("RestartCount", 0) == first.get("RestartCount", 0)

        again = run_playbook(RESTART, inventory, "-e", "vllm_server_state=started")
        assert again.returncode == 0 and recap(again.stdout)[host.name]["changed"] == 0, again.stdout[-3000:]
        assert pid_alive(server) and health(host.port) == 200
    finally:
        podman("rm", "-f", "-t", "0", hand, check=False)


def test_a_failed_launch_after_a_takeover_says_how_to_start_the_container_again(cdi_spec, empty_image, tmp_path):
    """The container started by hand is stopped through podman, then the new server fails at its start: the run fails,
    undoes its own launch (the GPUs are free), leaves the container kept and stopped, and says how to start it again;
    the command it names does."""
    host, _spec = cdi_spec
    hand = "hand-vllm-%s" % uuid.uuid4().hex[:8]
    try:
        start_by_hand(host, empty_image, hand)
        inventory = inventory_for(tmp_path, [host], vllm_server_tensor_parallel_size=2,
                                  vllm_server_env={"GPUOPS_SIM_FAIL_AT_START": "1"})
        first = inspect(hand)
        assert first is not None and first["State"]["Running"]
        tree = {pid: starttime(pid) for pid in _tree(first["State"]["Pid"])}

        run = run_playbook(RESTART, inventory)
        said = flat(run.stdout)
        assert run.returncode != 0 and "was stopped and GPU 0, 1 verified free" in said, said[-5000:]
        assert "the server taken over (PID %d, started in the podman container %s" % (first["State"]["Pid"], hand) in said, said[-5000:]
        assert "stays stopped, this run does not start it again: start its container again with `podman start %s`" % hand in said
        kept = inspect(hand)
        assert kept is not None and not kept["State"]["Running"], "kept, stopped"
        assert [pid for pid, start in tree.items() if pid_alive(pid, start)] == []
        assert not any(holders(host)[index] for index in range(8)), holders(host)

        # the command the failure names brings the server back on its GPUs
        podman("start", hand)
        assert wait_for(lambda: health(host.port) == 200, 60, 0.2), podman("logs", hand, check=False).stdout[-2000:]
        again = inspect(hand)
        assert again is not None and again["State"]["Running"]
        held = holders(host)
        assert held[0] and held[1] and set(held[0] + held[1]) <= set(_tree(again["State"]["Pid"])), held
    finally:
        podman("rm", "-f", "-t", "0", hand, check=False)


def test_a_rollout_to_a_bad_image_rolls_back_to_the_image_that_was_good(cdi_spec, empty_image, tmp_path):
    """The container mode's rollback runs the container as the last known-good configuration ran it: a canary whose new
    image cannot start is rolled back to the previous image, not relaunched with the new one."""
    host, _spec = cdi_spec
    load = {"vllm_server_benchmark_input_len": 16, "vllm_server_benchmark_output_len": 16, "vllm_server_benchmark_num_requests": 2,
            "vllm_server_benchmark_concurrency": 1, "vllm_server_benchmark_warmup_requests": 1, "vllm_server_benchmark_repeats": 2,
            "vllm_rollout_results_dir": str(tmp_path / "results")}
    inventory, name = container_inventory(tmp_path, host, empty_image, **load)
    missing = "localhost/gpuops-missing-%s:test" % uuid.uuid4().hex[:8]
    try:
        first = run_playbook(RESTART, inventory)
        assert first.returncode == 0, first.stdout[-4000:]
        good = inspect(name)
        assert good is not None and good["ImageName"] == empty_image

        run = run_playbook(ROLLOUT, inventory, "-e", "vllm_server_container_image=%s" % missing, timeout=600)
        text = flat(run.stdout)
        assert run.returncode != 0 and "rollout halted" in text, text[-4000:]
        back = inspect(name)
        assert back is not None and back["State"]["Running"] and back["Id"] != good["Id"], back
        assert back["ImageName"] == empty_image, "the rollback ran %s, not the last known-good image" % back["ImageName"]
        assert back["Config"]["Labels"]["gpuops.fleet.config-hash"] == good["Config"]["Labels"]["gpuops.fleet.config-hash"]
        report = json.loads((tmp_path / "results" / "report.json").read_text())
        assert report["rollbacks"][0]["status"] == "ok", report["rollbacks"]
        held = holders(host)
        assert held[2] and held[5] and set(held[2] + held[5]) <= set(_tree(back["State"]["Pid"])), held
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)


def test_a_docker_container_on_the_hosts_network_is_taken_over_through_docker(make_host, tmp_path):
    """`docker run -d --restart=always --network host ...` of a vLLM server by hand, with a dockerd of the test's own
    (reached through DOCKER_HOST, which the inventory's gpuops_fleet_environment gives the role's reading and stop): the
    role finds the container by its cgroup, stops it through docker and keeps it, and says dockerd starts an `always`
    container again when it starts."""
    reason = docker_missing()
    if reason:
        pytest.skip(reason)
    host = make_host("gpu-node-02")
    host.port = free_port()
    hand = "hand-docker-%s" % uuid.uuid4().hex[:8]
    with docker_daemon(Path("/tmp") / ("gpuops-dk-%d" % os.getpid())) as docker, imported_image(docker, unique_tag()) as image:
        entry = role_host_vars(host, host.port)
        entry["gpuops_fleet_environment"] = dict(entry["gpuops_fleet_environment"], DOCKER_HOST=docker.argv[2])
        inventory = write_role_inventory(tmp_path / "inventory.json", {host.name: entry}, vllm_server_tensor_parallel_size=2)
        mounts = [word for volume in host_volumes() + ["%s:%s" % (host.state, host.state)] for word in ("-v", volume)]
        try:
            docker("run", "-d", "--name", hand, "--restart=always", "--network", "host", "-e", "GPUOPS_SIM_STATE=%s" % host.state,
                   "-e", "CUDA_VISIBLE_DEVICES=0,1", *mounts, image, str(BIN / "python3"), str(FAKEVLLM_DIR / "bin" / "vllm"), "serve",
                   "zai-org/GLM-5-GGUF", "--port", str(host.port), "--tensor-parallel-size", "2")
            assert wait_for(lambda: health(host.port) == 200, 60, 0.2), docker("logs", hand, check=False).stdout[-2000:]
            first = docker.inspect(hand)
            tree = {pid: starttime(pid) for pid in _tree(first["State"]["Pid"])}
            assert listening_pid(host.port) in tree and set(holders(host)[0] + holders(host)[1]) <= set(tree)

            run = run_playbook(RESTART, inventory)
            text = flat(run.stdout)
            assert run.returncode == 0, text[-6000:]
            after = docker.inspect(hand)
            assert after["State"]["Running"] is False and after["RestartCount"] == first["RestartCount"], after["State"]
            assert [pid for pid, start in tree.items() if pid_alive(pid, start)] == []
            server, _workers = assert_server_owns_gpus(host, [0, 1], 2)
            assert server not in tree
            assert "started in the docker container %s" % hand in text and "its container stopped through docker" in text, text[-4000:]
            assert "dockerd starts it again when it starts" in text, text[-4000:]
        finally:
            docker("rm", "-f", hand, check=False)
