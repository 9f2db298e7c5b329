# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The subset of vLLM's engine and server flags the fake understands; other flags are accepted."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
import os
from typing import Callable, List, Mapping, Optional, Tuple

from vllm._lora import DEFAULT_MAX_LORAS, missing, parse_lora_modules

DEFAULT_MAX_MODEL_LEN = 32768
DEFAULT_BLOCK_SIZE = 16
KV_CACHE_SEQUENCES = 8  # without --num-gpu-blocks-override the KV cache holds this many --max-model-len sequences


@dataclass(frozen=True)
class ServerArgs:  # pylint: disable=too-many-instance-attributes
    model: str
    tensor_parallel_size: int
    gpu_memory_utilization: float
    host: str
    port: Optional[int]
    served_model_names: List[str]
    max_model_len: int
    # keys a client must present as `Authorization: Bearer KEY` on /v1/*: --api-key, else VLLM_API_KEY (as vLLM)
    api_keys: Tuple[str, ...] = ()
    block_size: int = DEFAULT_BLOCK_SIZE  # tokens per KV-cache block
    enable_prefix_caching: bool = True  # vLLM V1's default
    num_gpu_blocks_override: Optional[int] = None
    # one server across hosts (_multinode.py): its shape, this node's place in it, and where its head is
    nodes: Optional["NodeArgs"] = None
    # what vLLM's torch.compile cache key covers besides the model, sizes and length (_startup.py)
    pipeline_parallel_size: int = 1
    dtype: str = "auto"
    compilation_config: str = ""
    enforce_eager: bool = False
    # LoRA (_lora.py): --enable-lora, --max-loras, --lora-modules' (name, path) pairs loaded at start
    enable_lora: bool = False
    max_loras: int = DEFAULT_MAX_LORAS
    lora_modules: Tuple[Tuple[str, str], ...] = ()

    @property
    def local_workers(self) -> int:
        """The workers this node runs: all of them on one host, else this node's share."""
        return self.nodes.local_workers if self.nodes is not None else self.tensor_parallel_size

    @property
    def num_gpu_blocks(self) -> int:
        """KV-cache blocks: --num-gpu-blocks-override, else room for KV_CACHE_SEQUENCES full-length sequences."""
        if self.num_gpu_blocks_override is not None:
            return self.num_gpu_blocks_override
        return KV_CACHE_SEQUENCES * -(-self.max_model_len // self.block_size)


@dataclass(frozen=True)
class NodeArgs:
    """A node of a server that spans hosts, in either of vLLM's two shapes: one engine across hosts (--nnodes,
    --node-rank, --master-addr, --master-port: tensor x pipeline parallel, each node a share of the workers) or data
    parallel across hosts (--data-parallel-size, -size-local, -address, -rpc-port, -start-rank: each node its local
    replicas of tensor_parallel_size workers). ``rank`` is what a headless node joins the head with (its node rank, or
    its first data-parallel rank); ``peers`` are the ranks the head waits for."""

    shape: str  # "nodes" or "data-parallel"
    head: bool
    rank: int
    address: str
    port: int
    local_workers: int
    peers: Tuple[int, ...]


def _parser(prog: str, positional_model: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, allow_abbrev=False)
    if positional_model:
        parser.add_argument("model_tag", nargs="?")
    parser.add_argument("--model", default=None)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    # Loopback by default: the simulator never listens beyond this machine unless told to.
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--max-model-len", type=int, default=DEFAULT_MAX_MODEL_LEN)
    parser.add_argument("--api-key", nargs="+", action="append", default=None)
    parser.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE)
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--num-gpu-blocks-override", type=int, default=None)
    parser.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--compilation-config", "-O", default="")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--headless", action="store_true")
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, default=None)
    parser.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    parser.add_argument("--data-parallel-size-local", "-dpl", type=int, default=None)
    parser.add_argument("--data-parallel-address", "-dpa", default=None)
    parser.add_argument("--data-parallel-rpc-port", "-dpp", type=int, default=None)
    parser.add_argument("--data-parallel-start-rank", "-dpr", type=int, default=0)
    parser.add_argument("--enable-lora", action="store_true")
    parser.add_argument("--max-loras", type=int, default=DEFAULT_MAX_LORAS)
    parser.add_argument("--lora-modules", nargs="+", default=None)
    return parser


def lora_modules(known: argparse.Namespace, error: Callable[[str], None]) -> Tuple[Tuple[str, str], ...]:
    """--lora-modules checked as vLLM's start-up would fail on them: LoRA enabled, each path there, at most
    --max-loras of them (the fake's limit, _lora.py)."""
    modules = parse_lora_modules(known.lora_modules, error)
    if known.max_loras < 1:
        error("--max-loras must be at least 1")
    if modules and not known.enable_lora:
        error("--lora-modules needs --enable-lora")
    for _name, path in modules:
        if missing(path):
            error(missing(path))
    if len(modules) > known.max_loras:
        error("--lora-modules names %d adapters, --max-loras is %d" % (len(modules), known.max_loras))
    return modules


def node_args(known: argparse.Namespace, error: Callable[[str], None]) -> Optional[NodeArgs]:
    """This node's place in a server across hosts, or None for a server on one host; ``error`` refuses a shape vLLM
    would refuse (its message names the flag)."""
    if known.nnodes > 1:
        world = known.tensor_parallel_size * known.pipeline_parallel_size
        if known.master_port is None:
            error("--master-port is required with --nnodes > 1")
        if not 0 <= known.node_rank < known.nnodes:
            error("--node-rank must be in [0, --nnodes)")
        if world % known.nnodes:
            error("--tensor-parallel-size x --pipeline-parallel-size (%d) must be a multiple of --nnodes (%d)" % (world, known.nnodes))
        head = known.node_rank == 0 and not known.headless
        return NodeArgs("nodes", head, known.node_rank, known.master_addr, known.master_port, world // known.nnodes,
                        tuple(range(1, known.nnodes)) if head else ())
    local = known.data_parallel_size_local
    if known.data_parallel_size > 1 and local is not None and local < known.data_parallel_size:
        if known.data_parallel_address is None or known.data_parallel_rpc_port is None:
            error("--data-parallel-address and --data-parallel-rpc-port are required across hosts")
        if local < 1 or known.data_parallel_size % local:
            error("--data-parallel-size (%d) must be a multiple of --data-parallel-size-local (%d)" % (known.data_parallel_size, local))
        head = not known.headless
        if head and known.data_parallel_start_rank != 0:
            error("--data-parallel-start-rank must be 0 on the node that serves the API (not --headless)")
        return NodeArgs("data-parallel", head, known.data_parallel_start_rank, known.data_parallel_address,
                        known.data_parallel_rpc_port, local * known.tensor_parallel_size,
                        tuple(range(local, known.data_parallel_size, local)) if head else ())
    if known.headless:
        error("--headless needs --nnodes > 1, or --data-parallel-size-local below --data-parallel-size")
    return None


def api_keys(given: Optional[List[List[str]]], env: Mapping[str, str]) -> Tuple[str, ...]:
    """--api-key's keys (every occurrence), else VLLM_API_KEY; vLLM ignores an empty key."""
    keys = [key for group in given or [] for key in group if key]
    if not keys and env.get("VLLM_API_KEY"):
        keys = [env["VLLM_API_KEY"]]
    return tuple(keys)


def parse_server_args(argv: List[str], prog: str, positional_model: bool,
                      env: Optional[Mapping[str, str]] = None) -> ServerArgs:
    parser = _parser(prog, positional_model)
    known, _unknown = parser.parse_known_args(argv)
    model = getattr(known, "model_tag", None) or known.model or "facebook/opt-125m"
    if known.tensor_parallel_size < 1:
        parser.error("--tensor-parallel-size must be at least 1")
    if known.max_model_len < 2:
        parser.error("--max-model-len must be at least 2")
    if known.block_size < 1:
        parser.error("--block-size must be at least 1")
    if known.num_gpu_blocks_override is not None and known.num_gpu_blocks_override < 1:
        parser.error("--num-gpu-blocks-override must be at least 1")
    names = known.served_model_name or [model]
    return ServerArgs(model, known.tensor_parallel_size, known.gpu_memory_utilization, known.host, known.port,
                      names, known.max_model_len, api_keys(known.api_key, os.environ if env is None else env),
                      block_size=known.block_size, enable_prefix_caching=known.enable_prefix_caching,
                      num_gpu_blocks_override=known.num_gpu_blocks_override, nodes=node_args(known, parser.error),
                      pipeline_parallel_size=known.pipeline_parallel_size, dtype=known.dtype,
                      compilation_config=known.compilation_config, enforce_eager=known.enforce_eager,
                      enable_lora=known.enable_lora, max_loras=known.max_loras, lora_modules=lora_modules(known, parser.error))
