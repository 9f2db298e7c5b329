# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The metrics endpoint (module_utils/_watch, docs/watch.md) as a real process on a simulated host, scraped over real
HTTP, judged against the simulator's own state (MiB per GPU, holder PIDs) and the fake vLLM's own records (its log
and request counts): a server of ours, an orphan left by a killed server, someone else's job, a
vLLM in a podman container, memory held by no process, a lost GPU, and an engine that dies behind a live /health."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import psutil
import pytest

from gpusim.api import FakeVllm, wait_for
from fake_container import in_cgroup, podman_cgroup, write_fake_podman
from ansible_run import REPO
from simhost import free_port

from ansible_collections.gpuops.fleet.plugins.module_utils._http.prometheus import parse

SERVE = "ansible_collections.gpuops.fleet.plugins.module_utils._watch.serve"
INTERVAL = 6.0
CTR_ID = "5d1e0f2a9b3c4d6e8f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e"


def scrape(port: int) -> t.Dict[t.Tuple[str, t.FrozenSet[t.Tuple[str, str]]], float]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", "/metrics")
        answer = connection.getresponse()
        text = answer.read().decode()
    finally:
        connection.close()
    assert answer.status == 200, text
    assert answer.getheader("Content-Type").startswith("text/plain; version=0.0.4")
    return {(name, frozenset(labels.items())): number for name, found in parse(text).items() for labels, number in found}


def value(samples, name: str, **labels: t.Any) -> float:
    want = {k: str(v) for k, v in labels.items()}
    found = [v for (n, ls), v in samples.items() if n == name and want.items() <= dict(ls).items()]
    assert len(found) == 1, "%s %s: %d samples" % (name, labels, len(found))
    return found[0]


def series(samples, name: str, **labels: t.Any) -> t.List[t.Tuple[t.Dict[str, str], float]]:
    want = {k: str(v) for k, v in labels.items()}
    return [(dict(ls), v) for (n, ls), v in samples.items() if n == name and want.items() <= dict(ls).items()]


class Exporter:
    def __init__(self, host, state_dir: Path, log: Path, path_first: t.Optional[Path] = None) -> None:
        self.port = free_port()
        env = host.process_env()
        if path_first is not None:
            env["PATH"] = os.pathsep.join([str(path_first), env["PATH"]])
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / ".collections"), env.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen([sys.executable, "-m", SERVE, "--listen", "127.0.0.1", "--port", str(self.port),
                                      "--interval", str(INTERVAL), "--host", host.name, "--state-dir", str(state_dir),
                                      "--generate-timeout", "5"],
                                     env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        self.log = log
        assert wait_for(lambda: "serving" in log.read_text() or self.proc.poll() is not None, timeout=30), log.read_text()
        assert self.proc.poll() is None, log.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture
def exporter():
    started: t.List[Exporter] = []

    def start(host, state_dir: Path, log: Path, path_first: t.Optional[Path] = None) -> Exporter:
        found = Exporter(host, state_dir, log, path_first)
        started.append(found)
        return found

    yield start
    for one in started:
        one.stop()


def write_record(state_dir: Path, server: FakeVllm, name: str) -> None:
    """The role's record of a server it launched (process mode), as _server/launch/process.py writes it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    record = {"pid": server.pid, "create_time": psutil.Process(server.pid).create_time(), "config_hash": "h" * 64,
              "argv": server.argv, "env_keys": [], "log_file": str(server.log), "launched_at": time.time(),
              "metadata": {"name": name, "model": server.model, "port": server.port, "gpus": [0, 1]}, "last_good": None}
    (state_dir / (name + ".json")).write_text(json.dumps(record))
    os.chmod(state_dir / (name + ".json"), 0o600)


def dead_lines(server: FakeVllm) -> int:
    return server.log_text().count("EngineDeadError")


def test_holders_servers_and_a_dead_engine(make_host, tmp_path, exporter):
    host = make_host("gpu-node-01")
    state_dir = tmp_path / "state"
    # GPUs 0-1: our server (its record in the state folder); its engine dies after one generation request, /health lives on
    server = FakeVllm(host, tmp_path / "server.log", gpus="0,1", args=["--api-key", "sk-watch-canary"],
                      env={"GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS": "1"}).start()
    stack = contextlib.ExitStack()
    try:
        server.wait_ready()
        write_record(state_dir, server, "vllm-main")
        # GPUs 2-3: a TP=2 server killed by the incident's cleanup: its second worker is left holding GPU 3, an orphan
        tree = host.gpusim_json("vllm", "--tp", "2", "--first-gpu", "2", "--mib", "5000")
        host.gpusim("incident", "--parent", str(tree["parent"]))
        # GPU 4: someone's job under a live shell; GPU 6: memory of no process; GPU 7: lost. (A PID of another namespace
        # is left out here: with one on the host, NVML's PIDs are not trusted for holders without an NVIDIA device file
        # open, as the fake vLLM's workers are; that class is unit-tested in test_metrics.py.)
        job = host.spawn_tree({"key": "shell", "title": "bash run-training.sh",
                               "children": [{"key": "job", "title": "python3 train.py", "hold": [{"gpu": 4, "mib": 3000}]}]})["job"]
        # GPU 5: a vLLM in a podman container, below its conmon, in the cgroup podman makes (podman: a stand-in that answers
        # `podman inspect` for it)
        ctr = host.spawn_tree({"key": "conmon", "title": "/usr/bin/conmon --api-version 1 -c %s -n vllm-qwen" % CTR_ID, "comm": "conmon",
                               "children": [{"key": "ctr", "title": "python3 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B",
                                             "hold": [{"gpu": 5, "mib": 20000}]}]})["ctr"]
        stack.enter_context(in_cgroup([ctr], podman_cgroup(CTR_ID)))
        podman_bin = write_fake_podman(tmp_path / "podman-bin", CTR_ID, "vllm-qwen", "docker.io/vllm/vllm-openai:v0.11.0").parent
        host.orphan(6, 4096)
        host.lose_gpu(7)
        assert wait_for(lambda: len(host.holders(3)) == 1 and host.holders(2) == [] and host.holders(4) == [job]
                        and host.holders(5) == [ctr], timeout=60)
        orphan = host.holders(3)[0]
        assert orphan == tree["workers"][1]

        watch = exporter(host, state_dir, tmp_path / "watch.log", podman_bin)
        first = scrape(watch.port)
        sim = {g["index"]: g for g in host.status()["gpus"]}
        nvml = {g["index"]: g for g in host.nvml_gpus()}
        assert value(first, "gpuops_watch_reading_ok", host=host.name) == 1
        assert value(first, "gpuops_gpus", host=host.name) == 8
        for index in range(7):
            assert value(first, "gpuops_gpu_memory_used_mib", gpu=index) == nvml[index]["used_mib"], index
            assert value(first, "gpuops_gpu_memory_total_mib", gpu=index) == nvml[index]["total_mib"]
            assert value(first, "gpuops_gpu_lost", gpu=index) == 0
        assert value(first, "gpuops_gpu_lost", gpu=7) == 1
        # by class, against the simulator's holders and allocations
        for index in (0, 1):
            assert series(first, "gpuops_gpu_holder_memory_mib", gpu=index) == []
            assert value(first, "gpuops_gpu_memory_by_class_mib", gpu=index, **{"class": "server"}) == sum(
                h["used_mib"] for h in sim[index]["holders"]) > 0
            assert value(first, "gpuops_gpu_memory_by_class_mib", gpu=index, **{"class": "orphan"}) == 0
        assert value(first, "gpuops_gpu_memory_by_class_mib", gpu=3, **{"class": "orphan"}) == 5000
        ((labels, mib),) = series(first, "gpuops_gpu_holder_memory_mib", gpu=3)
        assert labels["class"] == "orphan" and int(labels["pid"]) == orphan and mib == 5000
        assert labels["name"].startswith("VLLM::Worker_TP")
        ((labels, mib),) = series(first, "gpuops_gpu_holder_memory_mib", gpu=4)
        assert labels["class"] == "foreign" and int(labels["pid"]) == job and mib == 3000
        assert labels["name"] == psutil.Process(job).name()
        ((labels, mib),) = series(first, "gpuops_gpu_holder_memory_mib", gpu=5)
        assert labels["class"] == "container" and int(labels["pid"]) == ctr and mib == 20000
        assert value(first, "gpuops_gpu_memory_by_class_mib", gpu=6, **{"class": "none"}) == 4096
        for index in range(7):  # every class of every GPU is a series, and only where the simulator has memory is it > 0
            total = sum(value(first, "gpuops_gpu_memory_by_class_mib", gpu=index, **{"class": c})
                        for c in ("server", "orphan", "foreign", "container", "none"))
            assert total == sum(h["used_mib"] for h in sim[index]["holders"]) + sim[index]["orphan_mib"], index
        assert series(first, "gpuops_gpu_holder_memory_mib", **{"class": "server"}) == []
        # the server: up, healthy, generating (one completion, with its key: the fake counted one success)
        ids = {"host": host.name, "server": "vllm-main"}
        assert value(first, "gpuops_server_up", **ids) == 1 and value(first, "gpuops_server_health", **ids) == 1
        assert value(first, "gpuops_server_generates", **ids) == 1
        assert value(first, "gpuops_server_startups_total", **ids) == 1
        assert value(first, "gpuops_server_start_time_seconds", **ids) == pytest.approx(psutil.Process(server.pid).create_time(), abs=0.01)
        (info, _one), = series(first, "gpuops_server_info", **ids)
        assert int(info["pid"]) == server.pid and info["port"] == str(server.port) and info["mode"] == "process"
        assert server.counter("vllm:request_success_total") == 1
        assert value(first, "gpuops_watch_reading_duration_seconds", host=host.name) > 0

        # a scrape within the interval reuses the answer: the server got no request, and the engine (dead after one) is
        # still shown generating
        second = scrape(watch.port)
        assert value(second, "gpuops_server_generates", **ids) == 1 and dead_lines(server) == 0
        assert server.counter("vllm:request_success_total") == 1
        assert value(second, "gpuops_server_generation_age_seconds", **ids) > 0

        # after the interval: one more completion, which the dead engine refuses; /health still says 200
        time.sleep(INTERVAL)
        third = scrape(watch.port)
        assert dead_lines(server) == 1 and server.counter("vllm:request_success_total") == 1
        assert server.health() == 200
        assert (value(third, "gpuops_server_up", **ids), value(third, "gpuops_server_health", **ids),
                value(third, "gpuops_server_generates", **ids)) == (1, 1, 0)
        assert "sk-watch-canary" not in (tmp_path / "watch.log").read_text()

        # the server killed: down, not healthy, no completion sent
        server.stop()
        fourth = scrape(watch.port)
        assert (value(fourth, "gpuops_server_up", **ids), value(fourth, "gpuops_server_health", **ids),
                value(fourth, "gpuops_server_generates", **ids)) == (0, 0, 0)
        assert series(fourth, "gpuops_server_start_time_seconds", **ids) == []
        assert watch.proc.poll() is None
    finally:
        stack.close()
        server.stop()
