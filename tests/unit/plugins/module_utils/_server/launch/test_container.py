# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container launch backend: the runtime's argv for podman and docker (pure), the environment file, inspect's
answer read, and status, launch and stop against a fake runtime (its calls logged, a real `sleep` as each running
container's main process): a container that runs this configuration is left alone, another one is refused, the stop
stops then removes it, check mode runs nothing."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import typing as t

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import CliAnswer, parse_container
from ansible_collections.gpuops.fleet.plugins.module_utils._server.decision import reason
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import container
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.container import ContainerSpec
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.process import LaunchSpec, ServerError, Target
from ansible_collections.gpuops.fleet.plugins.module_utils._server.status import taken_over

psutil = pytest.importorskip("psutil")

SECRET = "hf_do_not_show"
COMMAND = ["vllm", "serve", "m", "--port", "8000"]


def spec(**changes: t.Any) -> ContainerSpec:
    base = ContainerSpec(name="gpuops-vllm-8000", image="registry.example/vllm:1", gpus=[1, 3], env_file="/state/vllm-8000.env",
                         volumes=["/var/cache/vllm:/root/.cache/huggingface"], run_options=["--shm-size", "16g"])
    return base._replace(**changes)


def test_podman_argv_names_cdi_devices_env_file_labels_and_the_host_network():
    argv = container.run_argv("/usr/bin/podman", "podman", spec(), COMMAND, "h1", "vllm-8000")
    assert argv[:5] == ["/usr/bin/podman", "run", "-d", "--name", "gpuops-vllm-8000"]
    assert argv[argv.index("--env-file") + 1] == "/state/vllm-8000.env"
    assert ["--device", "nvidia.com/gpu=1", "--device", "nvidia.com/gpu=3"] == argv[argv.index("--device"):argv.index("--device") + 4]
    assert "--ipc=host" in argv and argv[argv.index("--network") + 1] == "host" and "-p" not in argv
    assert argv[argv.index("--restart") + 1] == "unless-stopped"
    labels = [argv[i + 1] for i, word in enumerate(argv) if word == "--label"]
    assert labels == ["gpuops.fleet.config-hash=h1", "gpuops.fleet.managed-by=gpuops.fleet.vllm_server", "gpuops.fleet.server=vllm-8000"]
    assert argv[argv.index("-v") + 1] == "/var/cache/vllm:/root/.cache/huggingface"
    # the extra options come before the image, the server's argv after it, word for word
    image = argv.index("registry.example/vllm:1")
    assert argv[image - 2:image] == ["--shm-size", "16g"] and argv[image + 1:] == COMMAND


def test_docker_argv_takes_gpus_as_one_csv_field_and_publishes_the_port_off_the_host_network():
    argv = container.run_argv("/usr/bin/docker", "docker", spec(network="bridge", port=8000, restart="no"), COMMAND, "h1", "s")
    assert argv[argv.index("--gpus") + 1] == '"device=1,3"' and "--device" not in argv
    assert argv[argv.index("--network") + 1] == "bridge" and argv[argv.index("-p") + 1] == "8000:8000"
    assert argv[argv.index("--restart") + 1] == "no"


def test_a_kind_of_its_own_and_no_gpus():
    assert container.gpu_args("podman", [0], "gpuops-test.example/gpu") == ["--device", "gpuops-test.example/gpu=0"]
    assert container.gpu_args("podman", []) == [] and container.gpu_args("docker", []) == []


def test_the_environment_file_holds_the_values_verbatim_and_refuses_a_line_it_cannot_carry():
    text = container.env_file_text("vllm-8000", {"HF_TOKEN": SECRET, "NCCL_PROTO": "LL", "SPACES": ' a "b" $c ', "N": 3})
    lines = text.splitlines()
    assert lines[0] == "# Ansible managed" and "vllm-8000" in lines[1]
    assert lines[-4:] == ["HF_TOKEN=%s" % SECRET, "N=3", "NCCL_PROTO=LL", 'SPACES= a "b" $c ']
    with pytest.raises(ServerError) as raised:
        container.env_file_text("s", {"HF_TOKEN": "x\ny"})
    assert "HF_TOKEN" in str(raised.value) and "x\ny" not in str(raised.value)
    with pytest.raises(ServerError, match="A=B"):
        container.env_file_text("s", {"A=B": "1"})


@pytest.mark.parametrize("changes, option", [
    ({"name": "-rm"}, "container.name=\"-rm\""),
    ({"runtime": "lxc"}, "container.runtime=\"lxc\""),
    ({"restart": "sometimes"}, "container.restart=\"sometimes\""),
    ({"cdi_kind": "gpu"}, "container.cdi_kind=\"gpu\""),
    ({"network": "--privileged"}, "container.network=\"--privileged\""),
])
def test_a_bad_spec_is_named_with_its_value(changes, option):
    with pytest.raises(ServerError) as raised:
        container.check_spec(spec(**changes))
    assert option in str(raised.value)
    container.check_spec(spec(restart="on-failure:3"))


def _inspect_json(runtime: str, running: bool = True, pid: int = 4242, hash_: str = "h1", restarts: int = 0, code: int = 0) -> str:
    item: t.Dict[str, t.Any] = {
        "Id": "a" * 64, "Name": "/gpuops-vllm-8000" if runtime == "docker" else "gpuops-vllm-8000",
        "State": {"Status": "running" if running else "exited", "Running": running, "Pid": pid if running else 0, "ExitCode": code},
        "Config": {"Image": "registry.example/vllm:1", "Labels": {container.HASH_LABEL: hash_, container.MARKER_LABEL: container.MARKER}},
        "HostConfig": {"RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0}},
        "RestartCount": restarts,
    }
    if runtime == "podman":
        item["State"]["ConmonPid"] = 4241
        item["ImageName"] = "registry.example/vllm:1"
    return json.dumps([item])


def _described(text: str) -> t.Optional[t.Dict[str, t.Any]]:
    state = parse_container(text)
    return None if state is None else container.described(state)


@pytest.mark.parametrize("runtime", ["podman", "docker"])
def test_inspect_answers_are_read_alike(runtime):
    found = _described(_inspect_json(runtime, restarts=2))
    assert found is not None
    assert (found["name"], found["running"], found["pid"], found["config_hash"], found["restart_policy"], found["restart_count"]) == (
        "gpuops-vllm-8000", True, 4242, "h1", "unless-stopped", 2)
    assert found["marker"] == container.MARKER and found["image"] == "registry.example/vllm:1"
    stopped = _described(_inspect_json(runtime, running=False, code=137))
    assert stopped is not None and stopped["pid"] is None and stopped["exit_code"] == 137
    assert "last exit code 137" in container.crash_loop(stopped) and container.crash_loop(found).startswith("container gpuops-vllm-8000: 2 restart(s)")
    assert found["conmon_pid"] == (4241 if runtime == "podman" else None) and found["id"] == "a" * 64 and found["status"] == "running"
    assert _described("[]") is None and _described("not json") is None


# ---- the backend against a fake runtime -----------------------------------------------------------------------------

class FakeRuntime:
    """A runtime's command line, as the backend runs it (_host/container.py run_cli: ``use`` puts this fake in its
    place): inspect, run -d, stop, rm, logs; and the module's get_bin_path and check_mode. A running container's main
    process is a real `sleep`."""

    def __init__(self, check_mode: bool = False, installed: t.Sequence[str] = ("podman",)) -> None:
        self.check_mode = check_mode
        self.installed = list(installed)
        self.calls: t.List[t.List[str]] = []
        self.containers: t.Dict[str, t.Dict[str, t.Any]] = {}
        self.warnings: t.List[str] = []

    def warn(self, warning: str) -> None:
        self.warnings.append(warning)

    def get_bin_path(self, name: str, required: bool = False) -> t.Optional[str]:
        if name in self.installed:
            return "/fake/" + name
        if required:
            raise AssertionError("%s is not installed" % name)
        return None

    def use(self, monkeypatch: pytest.MonkeyPatch) -> "FakeRuntime":
        """Run the backend's runtime commands here from now on."""
        monkeypatch.setattr(container, "run_cli", self.cli)
        return self

    def cli(self, argv: t.Sequence[str], timeout: t.Optional[float]) -> CliAnswer:
        assert timeout is None, "the backend's commands run to their end"
        rc, out, err = self.run_command(argv)
        return CliAnswer(rc, out, err=err)

    def run_command(self, argv: t.Sequence[str]) -> t.Tuple[int, str, str]:
        argv = list(argv)
        self.calls.append(argv)
        verb, args = argv[1], argv[2:]
        if verb == "inspect":
            found = self.containers.get(args[-1])
            if found is None:
                return 125, "[]", "Error: no such container %s" % args[-1]
            return 0, self._json(found), ""
        if verb == "run":
            name = args[args.index("--name") + 1]
            labels = dict(args[i + 1].split("=", 1) for i, word in enumerate(args) if word == "--label")
            proc = subprocess.Popen(["sleep", "60"])
            self.containers[name] = {"id": ("%064x" % proc.pid), "proc": proc, "labels": labels, "argv": argv,
                                     "restart": args[args.index("--restart") + 1]}
            return 0, self.containers[name]["id"] + "\n", ""
        if verb == "stop":
            self._end(self.containers.get(args[-1]))
            return 0, args[-1], ""
        if verb == "rm":
            self._end(self.containers.pop(args[-1], None))
            return 0, args[-1], ""
        if verb == "logs":
            return 0, "line 1\nline 2\n", ""
        return 1, "", "unknown verb %s" % verb

    @staticmethod
    def _end(found: t.Optional[t.Dict[str, t.Any]]) -> None:
        if found is not None and found["proc"].poll() is None:
            found["proc"].terminate()
            found["proc"].wait()

    @staticmethod
    def _json(found: t.Mapping[str, t.Any]) -> str:
        running = found["proc"].poll() is None
        return json.dumps([{"Id": found["id"], "Name": found["argv"][found["argv"].index("--name") + 1],
                            "State": {"Running": running, "Pid": found["proc"].pid if running else 0, "Status": "running" if running else "exited",
                                      "ExitCode": 0 if running else found["proc"].returncode},
                            "Config": {"Labels": found["labels"]},
                            "HostConfig": {"RestartPolicy": {"Name": found["restart"]}}, "RestartCount": 0}])

    def end_all(self) -> None:
        for found in self.containers.values():
            self._end(found)

    def mutating(self) -> t.List[t.List[str]]:
        return [call for call in self.calls if call[1] in ("run", "stop", "rm")]


@pytest.fixture
def runtime(monkeypatch):
    fake = FakeRuntime().use(monkeypatch)
    try:
        yield fake
    finally:
        fake.end_all()


def target(tmp_path, config_hash="h1", **changes):
    options = spec(env_file=str(tmp_path / "state" / "vllm-8000.env"), **changes)._asdict()
    return Target(str(tmp_path / "state" / "vllm-8000.json"), None, config_hash, options)


def launch_spec():
    return LaunchSpec(argv=COMMAND + ["--api-key", "sk-1"], env={"HF_TOKEN": SECRET, "CUDA_VISIBLE_DEVICES": "0,1"},
                      shown_argv=COMMAND + ["--api-key", "********"], metadata={"name": "vllm-8000"})


def test_launch_writes_the_env_file_and_record_privately_and_no_secret_reaches_the_argv(runtime, tmp_path):
    result = container.launch(runtime, psutil, target(tmp_path), launch_spec())
    assert result["changed"] and result["launched"] and result["running"] and result["config_matches"]
    run = runtime.mutating()[0]
    assert run[1] == "run" and not any(SECRET in word for word in run)
    assert not any(SECRET in word for word in result["run_argv"]) and "sk-1" not in result["run_argv"]
    env_file = tmp_path / "state" / "vllm-8000.env"
    assert stat.S_IMODE(os.stat(env_file).st_mode) == 0o600 and "HF_TOKEN=%s\n" % SECRET in env_file.read_text()
    record_path = tmp_path / "state" / "vllm-8000.json"
    record = json.loads(record_path.read_text())
    assert stat.S_IMODE(os.stat(record_path).st_mode) == 0o600 and SECRET not in record_path.read_text()
    assert (record["mode"], record["runtime"], record["container_name"], record["config_hash"]) == ("container", "podman", "gpuops-vllm-8000", "h1")
    main = runtime.containers["gpuops-vllm-8000"]["proc"].pid
    assert result["pid"] == main and record["container_id"] == result["container_id"]
    assert container.main_process(runtime, psutil, str(record_path))[0] == main


def test_a_matching_healthy_container_is_left_alone_and_a_drift_replaces_it(runtime, tmp_path):
    container.launch(runtime, psutil, target(tmp_path), launch_spec())
    calls = len(runtime.mutating())
    again = container.launch(runtime, psutil, target(tmp_path), launch_spec())
    assert not again["changed"] and len(runtime.mutating()) == calls
    reading = container.status(runtime, psutil, target(tmp_path))
    assert reading["running"] and reading["config_matches"] is True and reading["container"]["restart_policy"] == "unless-stopped"
    assert reason("started", False, dict(reading, healthy=True)) == ""
    drifted = container.status(runtime, psutil, target(tmp_path, config_hash="h2"))
    assert drifted["config_matches"] is False and reason("started", False, dict(drifted, healthy=True)) == "its configuration changed"
    with pytest.raises(ServerError, match="another configuration"):
        container.launch(runtime, psutil, target(tmp_path, config_hash="h2"), launch_spec())


def test_the_stop_stops_with_the_timeout_then_removes_the_container_and_its_record(runtime, tmp_path):
    container.launch(runtime, psutil, target(tmp_path), launch_spec())
    main = runtime.containers["gpuops-vllm-8000"]["proc"]
    stopped = container.stop(runtime, psutil, target(tmp_path), stop_timeout=12)
    assert stopped["changed"] and not stopped["running"] and main.poll() is not None
    assert [call[1:] for call in runtime.mutating()[1:]] == [["stop", "-t", "12", "gpuops-vllm-8000"], ["rm", "-f", "gpuops-vllm-8000"]]
    assert [entry["pid"] for entry in stopped["stopped"]] == [main.pid]
    assert not (tmp_path / "state" / "vllm-8000.json").exists() and "gpuops-vllm-8000" not in runtime.containers
    nothing = container.stop(runtime, psutil, target(tmp_path))
    assert not nothing["changed"] and "nothing to stop" in nothing["msg"]


def test_the_runtime_gets_home_and_variables_expanded_as_run_command_expanded_them(runtime, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", "/home/ops")
    monkeypatch.setenv("MODELS", "/srv/models")
    container.launch(runtime, psutil, target(tmp_path, volumes=["~/.cache/hf:/root/.cache/hf", "$MODELS:/models"]), launch_spec())
    run = runtime.mutating()[0]
    assert [run[i + 1] for i, word in enumerate(run) if word == "-v"] == ["/home/ops/.cache/hf:/root/.cache/hf", "/srv/models:/models"]


def test_a_secret_run_option_is_masked_where_the_command_is_shown(runtime, tmp_path):
    options = ["--annotation", "x=1", "--hf-token", "hf_in_options"]
    result = container.launch(runtime, psutil, target(tmp_path, run_options=options), launch_spec())
    assert "hf_in_options" not in " ".join(result["run_argv"]) and "hf_in_options" not in (tmp_path / "state" / "vllm-8000.json").read_text()
    assert "hf_in_options" in runtime.mutating()[0]  # the runtime itself gets the word as given


def test_a_container_of_the_name_without_the_role_marker_is_never_touched(runtime, tmp_path):
    container.launch(runtime, psutil, target(tmp_path), launch_spec())
    runtime.containers["gpuops-vllm-8000"]["labels"].pop(container.MARKER_LABEL)
    calls = len(runtime.mutating())
    for step in (lambda: container.stop(runtime, psutil, target(tmp_path)),
                 lambda: container.launch(runtime, psutil, target(tmp_path, config_hash="h2"), launch_spec())):
        with pytest.raises(ServerError, match="is not this role's"):
            step()
    assert len(runtime.mutating()) == calls and runtime.containers["gpuops-vllm-8000"]["proc"].poll() is None


def test_check_mode_previews_and_runs_nothing(tmp_path, monkeypatch):
    fake = FakeRuntime(check_mode=True).use(monkeypatch)
    preview = container.launch(fake, psutil, target(tmp_path), launch_spec())
    assert preview["changed"] and preview["msg"].startswith("would launch podman run -d") and not fake.mutating()
    assert not (tmp_path / "state").exists()
    live = FakeRuntime().use(monkeypatch)
    try:
        container.launch(live, psutil, target(tmp_path), launch_spec())
        live.check_mode = True
        calls = len(live.mutating())
        preview = container.stop(live, psutil, target(tmp_path))
        assert preview["msg"].startswith("would stop and remove container gpuops-vllm-8000") and len(live.mutating()) == calls
        assert live.containers["gpuops-vllm-8000"]["proc"].poll() is None
    finally:
        live.end_all()


def test_the_runtime_is_podman_first_then_docker_or_the_one_asked_for():
    assert container.find_runtime(FakeRuntime(installed=("docker", "podman")), None) == ("podman", "/fake/podman")
    assert container.find_runtime(FakeRuntime(installed=("docker",)), None) == ("docker", "/fake/docker")
    assert container.find_runtime(FakeRuntime(installed=("docker", "podman")), None, "docker") == ("docker", "/fake/docker")
    assert container.find_runtime(FakeRuntime(installed=("docker", "podman")), "docker") == ("docker", "/fake/docker")
    assert container.find_runtime(FakeRuntime(installed=()), None) == (None, None)


def test_launch_without_any_runtime_says_so(tmp_path):
    with pytest.raises(ServerError, match="neither podman nor docker"):
        container.launch(FakeRuntime(installed=()), psutil, target(tmp_path), launch_spec())


def test_the_container_own_listener_is_not_taken_over_and_another_container_is():
    reading = {"mode": "container", "running": True, "pid": 10, "container_id": "b" * 64, "container": {"conmon_pid": 9}}
    inside = {"pid": 11, "how": "container", "container": {"runtime": "podman", "id": "b" * 64}, "name": "python3"}
    assert taken_over(inside, reading) is None
    assert taken_over({"pid": 9, "how": "process", "name": "conmon"}, reading) is None
    assert taken_over({"pid": 7, "how": "process", "name": "docker-proxy"}, reading) is None
    other = {"pid": 12, "how": "container", "container": {"runtime": "podman", "id": "c" * 64}, "name": "python3", "refusal": None}
    assert taken_over(other, reading) == other
    assert taken_over(inside, dict(reading, running=False)) == inside
