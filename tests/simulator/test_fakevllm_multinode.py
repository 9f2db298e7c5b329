# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fake vLLM across two simulated hosts, in both of vLLM's shapes: the head serves only once the other rank joined
over TCP, answers 503 once it is gone, and a headless node that loses its head keeps its workers and GPUs and joins the
next head."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest
from gpusim_helpers import FakeServers, SimHost, host_with_servers, is_running, wait_for

from gpusim.api import FAKE_VLLM, free_port

NODES = ("--nnodes", "2", "--master-addr", "127.0.0.1")


@pytest.fixture
def second(tmp_path: Path, nvml_lib: Path) -> Iterator[FakeServers]:  # pylint: disable=unused-argument
    """A second simulated host (its own GPUs) and the servers started on it, all stopped and cleaned up by record."""
    with host_with_servers(tmp_path / "second", gpus=8) as servers:
        yield servers


def used_mib(host: SimHost) -> List[int]:
    """Memory per GPU by the simulator's own reading."""
    return [gpu["used_mib"] for gpu in host.gpusim_json("status", "--json")["gpus"]]


def worker_pids(host: SimHost) -> List[int]:
    return [record.pid for record in host.records() if record.role == "worker" and is_running(record.pid)]


def generates(server) -> int:
    status, _body = server.request("POST", "/v1/completions", {"model": "org/model", "prompt": "x", "max_tokens": 1})
    return status


def shapes(rendezvous: int) -> List[Tuple[str, Tuple[str, ...], Tuple[str, ...]]]:
    nodes = NODES + ("--master-port", str(rendezvous), "--tensor-parallel-size", "2")
    data = ("--data-parallel-size", "2", "--data-parallel-size-local", "1", "--data-parallel-address", "127.0.0.1",
            "--data-parallel-rpc-port", str(rendezvous))
    return [("nodes", nodes + ("--node-rank", "0"), nodes + ("--node-rank", "1", "--headless")),
            ("data-parallel", data, data + ("--headless", "--data-parallel-start-rank", "1"))]


@pytest.mark.parametrize("shape", ["nodes", "data-parallel"])
def test_head_serves_once_the_other_rank_joined_and_503_once_it_is_gone(
        simhost: SimHost, servers: FakeServers, second: FakeServers, shape: str) -> None:
    _name, head_args, headless_args = dict((s[0], s) for s in shapes(free_port()))[shape]
    head = servers.start(gpus="0", args=head_args)
    assert wait_for(lambda: used_mib(simhost)[0] > 0, timeout=20), head.log_text()  # its own worker holds its GPU
    assert head.health() == 0, "the head listened before the other rank joined"  # nothing listens yet
    headless = second.start(gpus="0", args=headless_args)
    head.wait_ready(timeout=30)
    assert generates(head) == 200
    assert headless.health() == 0  # a headless node serves no API
    assert used_mib(second.host)[0] > 0 and len(worker_pids(second.host)) == 1
    assert "rank 1 joined" in head.log_text()

    headless.stop(signal.SIGKILL, timeout=15)  # the other node's server dies at once (its workers with it: cleanup)
    assert wait_for(lambda: head.health() == 503, timeout=20), head.log_text()
    assert generates(head) == 503 and "rank 1 is gone" in head.log_text()


def test_a_headless_node_that_loses_its_head_keeps_its_workers_and_joins_the_next_one(
        simhost: SimHost, servers: FakeServers, second: FakeServers) -> None:
    _name, head_args, headless_args = shapes(free_port())[0]
    headless = second.start(gpus="0", args=headless_args)  # first: it waits for its head, holding its GPU
    assert wait_for(lambda: used_mib(second.host)[0] > 0 and "waiting for the head" in headless.log_text(), timeout=20)
    workers = worker_pids(second.host)
    head = servers.start(gpus="0", args=head_args)
    head.wait_ready(timeout=30)
    head.stop(signal.SIGKILL, timeout=15)
    assert wait_for(lambda: "lost the head" in headless.log_text(), timeout=20), headless.log_text()
    assert headless.proc is not None and headless.proc.poll() is None
    assert worker_pids(second.host) == workers and used_mib(second.host)[0] > 0  # its GPU stays held (vLLM #32136)
    simhost.gpusim("cleanup")  # the killed head's orphaned worker, by record: GPU 0 free for the next head
    again = servers.start(gpus="0", args=head_args)
    again.wait_ready(timeout=30)
    assert generates(again) == 200 and worker_pids(second.host) == workers


@pytest.mark.parametrize("args, needle", [
    (NODES + ("--master-port", "9", "--tensor-parallel-size", "3"), "must be a multiple of --nnodes"),
    (NODES + ("--tensor-parallel-size", "2"), "--master-port is required"),
    (("--headless",), "--headless needs --nnodes > 1"),
    (("--data-parallel-size", "3", "--data-parallel-size-local", "2", "--data-parallel-address", "127.0.0.1",
      "--data-parallel-rpc-port", "9"), "must be a multiple of --data-parallel-size-local"),
])
def test_a_shape_vllm_refuses_exits_2_naming_the_flag(args: Tuple[str, ...], needle: str) -> None:
    done = subprocess.run([sys.executable, str(FAKE_VLLM), "serve", "m", *args],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2 and needle in done.stderr, done.stderr


def test_a_head_whose_api_port_is_taken_once_its_ranks_joined_exits_1(
        simhost: SimHost, servers: FakeServers, second: FakeServers) -> None:
    _name, head_args, headless_args = shapes(free_port())[0]
    with socket.create_server(("127.0.0.1", 0)) as taken:
        head = servers.start(gpus="0", port=taken.getsockname()[1], args=head_args)
        second.start(gpus="0", args=headless_args)
        assert head.proc is not None and head.proc.wait(timeout=30) == 1, head.log_text()
    assert "error while attempting to bind on address" in head.log_text()
    assert wait_for(lambda: not worker_pids(simhost), timeout=20)  # its own workers ended with it
