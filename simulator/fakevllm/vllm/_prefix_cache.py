# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Automatic prefix caching as vLLM's V1 engine does it, on the fake's word tokens.

A request's tokens (prompt, then generated) are cut into full blocks of `block_size` tokens; a partial last
block is never cached. A block's key hashes the key of the block before it and the block's own tokens, so a
block is found only when every token before it matches too. A new request's cached tokens are its longest run of
leading blocks found in the cache, at most `prompt_tokens - 1` tokens (vLLM recomputes the last prompt token to
get its logits, so a prompt of exactly k full blocks finds at most k - 1 of them).

The cache keeps at most `capacity` block keys, evicting the least recently used first. A request's blocks are
entered in reverse order, its first block last, so that among them the tail goes first, as vLLM frees a
request's blocks tail first. Blocks are entered as soon as a request is admitted (its prompt) and as each
generated block fills: vLLM caches a block once it is scheduled, so a request admitted one step later finds it.
"""

from __future__ import annotations

import collections
import hashlib
import threading
from typing import Iterable, List, OrderedDict, Sequence, Tuple

ROOT_KEY = b""


def block_key(parent: bytes, tokens: Iterable[str]) -> bytes:
    """The key of a block: its parent's key and its tokens (words never hold a space, so the join is exact)."""
    return hashlib.blake2b(parent + b"\x00" + " ".join(tokens).encode("utf-8", "surrogatepass"),
                           digest_size=16).digest()


def block_keys(tokens: Sequence[str], block_size: int, parent: bytes = ROOT_KEY) -> List[bytes]:
    """The chained keys of every full block of `tokens`."""
    keys = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = block_key(parent, tokens[start:start + block_size])
        keys.append(parent)
    return keys


class PrefixCache:
    """Block keys in LRU order (thread-safe)."""

    def __init__(self, block_size: int, capacity: int, enabled: bool = True) -> None:
        self.block_size = block_size
        self.capacity = capacity
        self.enabled = enabled
        self._lock = threading.Lock()
        self._blocks: OrderedDict[bytes, None] = collections.OrderedDict()

    def admit(self, prompt: Sequence[str]) -> Tuple[int, "RequestBlocks"]:
        """Look a new request's prompt up and enter its full blocks: (cached tokens, the request's sequence)."""
        if not self.enabled:
            return 0, RequestBlocks(self, ROOT_KEY, [], enabled=False)
        keys = block_keys(prompt, self.block_size)
        usable = max(len(prompt) - 1, 0) // self.block_size
        with self._lock:
            found = 0
            for key in keys[:usable]:
                if key not in self._blocks:
                    break
                found += 1
            cached = found * self.block_size
            self._enter(keys)
        tail = list(prompt[len(keys) * self.block_size:])
        return cached, RequestBlocks(self, keys[-1] if keys else ROOT_KEY, tail)

    def size(self) -> int:
        with self._lock:
            return len(self._blocks)

    def enter(self, keys: List[bytes]) -> None:
        with self._lock:
            self._enter(keys)

    def _enter(self, keys: List[bytes]) -> None:
        """Make `keys` the most recently used, the first of them last of all; evict beyond the capacity."""
        blocks = self._blocks
        for key in reversed(keys):
            blocks[key] = None
            blocks.move_to_end(key)
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)


class RequestBlocks:
    """One request's tokens past its last full block; generated tokens that fill a block enter the cache."""

    def __init__(self, cache: PrefixCache, last_key: bytes, tail: List[str], enabled: bool = True) -> None:
        self._cache = cache
        self._last_key = last_key
        self._tail = tail
        self._enabled = enabled

    def extend(self, tokens: Iterable[str]) -> None:
        """Append generated tokens; each block they fill enters the cache."""
        if not self._enabled:
            return
        self._tail.extend(tokens)
        size = self._cache.block_size
        if len(self._tail) < size:
            return
        keys = block_keys(self._tail, size, self._last_key)
        self._last_key = keys[-1]
        del self._tail[:len(keys) * size]
        self._cache.enter(keys)
