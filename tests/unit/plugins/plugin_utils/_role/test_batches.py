# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A rolling play's batches hold each server across hosts whole."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.batches import BatchError, sizes, whole_groups

HOSTS = ["a", "g1", "g2", "b", "c", "h1", "h2", "h3"]
GROUPS = {"g1": "glm5_a", "g2": "glm5_a", "h1": "kimi", "h2": "kimi", "h3": "kimi"}


@pytest.mark.parametrize("serial, count, expected", [
    (1, 8, [1]), ("25%", 8, [2]), ([1, "25%"], 8, [1, 2]), (0, 8, [8]), ("100%", 8, [8]), ("10%", 8, [1]), ([], 3, [3]),
])
def test_the_sizes_are_ansibles(serial, count, expected):
    assert sizes(serial, count) == expected


@pytest.mark.parametrize("serial, batches", [
    (1, [1, 2, 1, 1, 3]),  # one host at a time, but each group whole
    ([1, "25%"], [1, 2, 2, 3]),  # the canary, then 2 at a time: b with c, then the 3-host group grown from h1-h2
    (2, [3, 2, 3]),  # a with the group it cut, b and c, the last group
    ("100%", [8]),
])
def test_each_batch_ends_at_the_end_of_a_group(serial, batches):
    assert whole_groups(HOSTS, GROUPS, serial) == batches
    start = 0
    for size in batches:  # no group on both sides of a boundary
        end = start + size
        assert end == len(HOSTS) or not GROUPS.get(HOSTS[end]) or GROUPS.get(HOSTS[end]) != GROUPS.get(HOSTS[end - 1])
        start = end


def test_a_fleet_of_one_host_servers_keeps_its_serial():
    assert whole_groups(["a", "b"], {}, [1, "25%"]) == [1, "25%"]


@pytest.mark.parametrize("group_of, serial, words", [
    ({"a": "g", "c": "g"}, 1, "the hosts of server group g (a, c) are not next to each other"),
    ({"a": "g", "b": "g"}, "lots", "serial: 'lots' is neither a number nor a percentage"),
    ({"a": "g", "b": "g"}, -1, "serial: -1 must not be negative"),
])
def test_what_cannot_make_whole_batches_is_named(group_of, serial, words):
    with pytest.raises(BatchError) as raised:
        whole_groups(["a", "b", "c"], group_of, serial)
    assert words in str(raised.value)
