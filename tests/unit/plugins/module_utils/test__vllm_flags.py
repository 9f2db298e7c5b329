# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a vLLM command line says about how its engine runs: on a Ray cluster, or as one rank of a server across hosts."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._vllm_flags import download_dir, head_address, node_count, runs_on_ray, spans_hosts

SERVE = ["vllm", "serve", "zai-org/GLM-5-FP8", "--tensor-parallel-size", "8"]


@pytest.mark.parametrize("argv, ray", [
    (SERVE + ["--distributed-executor-backend", "ray"], True),
    (SERVE + ["--distributed-executor-backend=ray"], True),
    (SERVE + ["--distributed-executor-backend", "mp"], False),
    (SERVE + ["--distributed-executor-backend"], False),
    (SERVE + ["--served-model-name", "ray"], False),
    (SERVE, False),
])
def test_runs_on_ray(argv, ray):
    assert runs_on_ray(argv) is ray


@pytest.mark.parametrize("argv, said", [
    (SERVE + ["--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port", "29500"], "--nnodes 2, --node-rank 0"),
    (SERVE + ["--nnodes=2", "--node-rank=1", "--headless"], "--nnodes 2, --node-rank 1"),
    (SERVE + ["--nnodes", "4"], "--nnodes 4"),
    (SERVE + ["--data-parallel-size", "4", "--data-parallel-size-local", "2", "--data-parallel-address", "10.0.0.1"],
     "--data-parallel-size 4, --data-parallel-size-local 2"),
    (SERVE + ["-dp", "4", "-dpl", "2"], "--data-parallel-size 4, --data-parallel-size-local 2"),
    (SERVE + ["--headless"], "--headless"),
    (SERVE + ["--nnodes", "1"], None),
    (SERVE + ["--data-parallel-size", "4"], None),
    (SERVE + ["--data-parallel-size", "2", "--data-parallel-size-local", "2"], None),
    (SERVE + ["--nnodes", "two"], None),
    (SERVE, None),
])
def test_spans_hosts(argv, said):
    assert spans_hosts(argv) == said


@pytest.mark.parametrize("argv, nodes, head", [
    (["vllm", "serve", "m", "--nnodes", "3", "--master-addr", "10.0.0.1"], 3, "10.0.0.1"),
    (["vllm", "serve", "m", "--nnodes=2", "--master-addr=h0"], 2, "h0"),
    (["vllm", "serve", "m", "-dp", "8", "-dpl", "2", "-dpa", "h0"], 4, "h0"),
    (["vllm", "serve", "m", "--data-parallel-size", "4", "--data-parallel-size-local", "2", "--data-parallel-address", "h1"], 2, "h1"),
    (["vllm", "serve", "m", "--headless"], None, None),
    (["vllm", "serve", "m", "--nnodes", "1"], None, None),
])
def test_how_many_hosts_and_which_head(argv, nodes, head):
    assert node_count(argv) == nodes and head_address(argv) == head


@pytest.mark.parametrize("argv, found", [
    (["vllm", "serve", "m", "--download-dir", "/w"], "/w"),
    (["vllm", "serve", "m", "--download-dir=/x", "--download-dir", "/y"], "/y"),
    (["vllm", "serve", "m"], None),
])
def test_download_dir(argv, found):
    assert download_dir(argv) == found
