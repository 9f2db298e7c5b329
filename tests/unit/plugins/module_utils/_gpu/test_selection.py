# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpus option: indices or UUIDs, errors naming the option and the value."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.selection import parse_gpus, resolve_gpus, SelectionError

UUID3 = "GPU-0000abc3-1111-2222-3333-000000000003"


def inventory():
    return [(i, "GPU-0000abc%d-1111-2222-3333-00000000000%d" % (i, i)) for i in range(8)]


def never():
    pytest.fail("the inventory must not be read when only indices are asked for")


def test_unset_selects_every_gpu():
    assert resolve_gpus(parse_gpus(None), 8, never) == list(range(8))


def test_indices_and_uuids_sorted_and_unique():
    refs = parse_gpus(["5", 1, UUID3.upper(), "3"])
    assert resolve_gpus(refs, 8, inventory) == [1, 3, 5]


def test_indices_only_do_not_read_uuids():
    assert resolve_gpus(parse_gpus(["7", "0"]), 8, never) == [0, 7]


@pytest.mark.parametrize("value", ["gpu0", "-1", "GPU-123", "", "0,1"])
def test_malformed_value_is_named(value):
    with pytest.raises(SelectionError) as caught:
        parse_gpus([value])
    assert str(caught.value).startswith("gpus: %r is neither a GPU index" % value)


def test_empty_list_is_refused():
    with pytest.raises(SelectionError, match="gpus: the list is empty"):
        parse_gpus([])


def test_unknown_index_names_value_and_range():
    with pytest.raises(SelectionError) as caught:
        resolve_gpus(parse_gpus(["8"]), 8, never)
    assert str(caught.value) == "gpus: no GPU has index 8; this host has 8 GPUs (indices 0-7)"


def test_unknown_uuid_mentions_gpus_whose_uuid_could_not_be_read():
    lost = [(0, "GPU-0000abc0-1111-2222-3333-000000000000"), (1, None)]
    with pytest.raises(SelectionError) as caught:
        resolve_gpus(parse_gpus([UUID3]), 2, lambda: lost, option="gpus")
    assert str(caught.value) == "gpus: no GPU has UUID %s; this host has 2 GPUs (indices 0-1) (the UUID of GPU 1 could not be read)" % UUID3


def test_host_without_gpus():
    with pytest.raises(SelectionError, match="this host has no GPU"):
        resolve_gpus(parse_gpus(["0"]), 0, never)
