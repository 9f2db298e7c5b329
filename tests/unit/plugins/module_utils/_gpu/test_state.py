# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one judgement of whether a GPU is free (_gpu/state.py), on gpu_facts entries: a listed holder or memory above the
threshold holds it; holders whose pid is in ignore_pids do not, while their memory still counts."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu import state


def gpu(used=0, processes=()):
    return {"index": 0, "memory_used_mib": used, "processes": None if processes is None else list(processes), "error": None}


VLLM = {"pid": 10, "name": "VLLM::Worker_TP1", "used_memory_mib": 900}
OTHER = {"pid": 11, "name": "python3", "used_memory_mib": 50}


@pytest.mark.parametrize("entry, held", [
    (gpu(), False),
    (gpu(used=1024), False),                        # at the threshold: free
    (gpu(used=1025), True),                         # above it, no process: held by no process
    (gpu(used=10, processes=[VLLM]), True),         # a holder listed, whatever it holds
    (gpu(used=None), False),                        # memory not read: not held (nor free: is_free says so)
    (gpu(processes=None), False),
])
def test_is_held_by_a_holder_or_memory_above_the_threshold(entry, held):
    assert state.is_held(entry, 1024) is held


def test_ignored_holders_do_not_hold_the_gpu():
    assert state.is_held(gpu(used=900, processes=[VLLM]), 1024, ignore_pids={10}) is False
    assert state.is_held(gpu(used=950, processes=[VLLM, OTHER]), 1024, ignore_pids={10}) is True, "another holder still holds it"
    assert state.is_held(gpu(used=950, processes=[VLLM, OTHER]), 1024, ignore_pids=[10, 11]) is False
    assert state.is_held(gpu(used=900, processes=[VLLM]), 1024, ignore_pids=(99,)) is True


def test_ignored_holders_memory_still_counts():
    assert state.is_held(gpu(used=2000, processes=[VLLM]), 1024, ignore_pids={10}) is True
    assert state.is_held(gpu(used=2000, processes=[VLLM]), 4096, ignore_pids={10}) is False


def test_ignore_pids_is_keyword_only_and_empty_by_default():
    with pytest.raises(TypeError):
        state.is_held(gpu(), 1024, {10})  # pylint: disable=too-many-function-args
    assert state.is_held(gpu(processes=[VLLM])) is True


@pytest.mark.parametrize("used, threshold, held", [(None, 0, False), (0, 0, False), (1, 0, True), (1024, 1024, False), (1024.5, 1024, True)])
def test_memory_held_is_above_the_threshold_only(used, threshold, held):
    assert state.memory_held(used, threshold) is held


def test_is_free_and_state_follow_is_held():
    assert state.is_free(gpu(used=600)) and state.state(gpu(used=600)) == "free"
    assert not state.is_free(gpu(used=2000)) and state.state(gpu(used=2000)) == "held"
    assert not state.is_free(gpu(used=None)) and state.state(gpu(used=None)) == "unknown"
