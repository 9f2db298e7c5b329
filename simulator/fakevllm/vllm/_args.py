# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The subset of vLLM's engine and server flags the fake understands; other flags are accepted."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
import os
from typing import List, Mapping, Optional, Tuple

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

    @property
    def num_gpu_blocks(self) -> int:
        """KV-cache blocks: --num-gpu-blocks-override, else room for KV_CACHE_SEQUENCES full-length sequences."""
        if self.num_gpu_blocks_override is not None:
            return self.num_gpu_blocks_override
        return KV_CACHE_SEQUENCES * -(-self.max_model_len // self.block_size)


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
    return parser


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
                      num_gpu_blocks_override=known.num_gpu_blocks_override)
