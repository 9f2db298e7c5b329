# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Rolling batches that never split a server across hosts: a play's ``serial``, as Ansible reads it, with each batch
grown to the end of the server group it would cut.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t


class BatchError(ValueError):
    """The serial or the inventory cannot make whole-group batches; the message names what."""


def _size(item: t.Any, count: int) -> int:
    """One entry of ``serial`` as Ansible reads it: a percentage of the hosts (at least 1) or a number (0: every host)."""
    text = str(item).strip()
    try:
        if text.endswith("%"):
            return int(int(text[:-1]) / 100.0 * count) or 1
        value = int(text)
    except ValueError:
        raise BatchError("serial: %r is neither a number nor a percentage" % (item,)) from None
    if value < 0:
        raise BatchError("serial: %r must not be negative" % (item,))
    return value or count


def sizes(serial: t.Any, count: int) -> t.List[int]:
    """The batch sizes Ansible takes from ``serial`` for ``count`` hosts: each entry in turn, the last one repeated."""
    items = list(serial) if isinstance(serial, (list, tuple)) else [serial]
    if not items:
        return [count]
    return [_size(item, count) for item in items]


def whole_groups(hosts: t.Sequence[str], group_of: t.Mapping[str, str], serial: t.Any) -> t.Any:
    """The batch sizes for the play's ``hosts`` (in play order): Ansible's from ``serial``, each grown until it ends at the
    end of a server group (``group_of``: host -> its vllm_server_nodes_group, '' for none). ``serial`` itself when no host
    is in a server group. Raises BatchError when a group's hosts are not next to each other in the play's order."""
    if not any(group_of.get(host) for host in hosts):
        return serial
    where: t.Dict[str, t.List[int]] = {}
    for index, host in enumerate(hosts):
        if group_of.get(host):
            where.setdefault(group_of[host], []).append(index)
    for group, found in sorted(where.items()):
        if found != list(range(found[0], found[0] + len(found))):
            raise BatchError("the hosts of server group %s (%s) are not next to each other in the play's hosts, so no batch can"
                             " hold the group whole: list them together in the inventory" % (group, ", ".join(hosts[i] for i in found)))
    steps = sizes(serial, len(hosts))
    batches: t.List[int] = []
    start = 0
    while start < len(hosts):
        end = min(start + max(steps[min(len(batches), len(steps) - 1)], 1), len(hosts))
        while end < len(hosts) and group_of.get(hosts[end]) and group_of.get(hosts[end]) == group_of.get(hosts[end - 1]):
            end += 1
        batches.append(end - start)
        start = end
    return batches
