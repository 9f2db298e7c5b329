# -*- coding: utf-8 -*-
# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The ``gpus`` option: GPU indices or UUIDs, checked before anything is read or touched.

Package rule (_gpu): the GPUs as NVML and nvidia-smi show them. It imports the flat files of module_utils
(_deps, _argspec, _secrets), _host and its own files: never _reclaim, _bench, _server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import ASCII_DIGITS, SpecError

# An index (int) or a UUID (str, as the user spelled it).
GpuRef = t.Union[int, str]
Inventory = t.Sequence[t.Tuple[int, t.Optional[str]]]

_UUID = re.compile(r"^GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$", re.IGNORECASE)
_INDEX_DIGITS = 6


class SelectionError(SpecError):
    """A ``gpus`` value that names no GPU; the message names the option and the value."""


def parse_gpus(values: t.Optional[t.Sequence[t.Any]], option: str = "gpus") -> t.Optional[t.List[GpuRef]]:
    """Check the syntax of the option's values; None (all GPUs) when the option is not set."""
    if values is None:
        return None
    if not values:
        raise SelectionError("%s: the list is empty; omit the option to select every GPU" % option)
    refs: t.List[GpuRef] = []
    for value in values:
        word = str(value).strip()
        if ASCII_DIGITS.match(word) and len(word) <= _INDEX_DIGITS:
            refs.append(int(word))
        elif _UUID.match(word):
            refs.append(word)
        else:
            raise SelectionError("%s: %r is neither a GPU index (ASCII digits: 0, 1, ...) nor a GPU UUID "
                                 "(GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)" % (option, value))
    return refs


def resolve_gpus(refs: t.Optional[t.Sequence[GpuRef]], count: int, inventory: t.Callable[[], Inventory], option: str = "gpus") -> t.List[int]:
    """Sorted unique indices selected by ``refs`` (every GPU when None).

    ``inventory`` returns (index, uuid or None) for every GPU; it is called only when a UUID is asked for.
    """
    if refs is None:
        return list(range(count))
    by_uuid: t.Dict[str, int] = {}
    unread: t.List[int] = []
    if any(isinstance(ref, str) for ref in refs):
        for index, uuid in inventory():
            if uuid is None:
                unread.append(index)
            else:
                by_uuid[uuid.lower()] = index
    selected = set()
    for ref in refs:
        if isinstance(ref, int):
            if ref >= count:
                raise SelectionError("%s: no GPU has index %d; this host has %s" % (option, ref, _describe_count(count)))
            selected.add(ref)
        elif ref.lower() in by_uuid:
            selected.add(by_uuid[ref.lower()])
        else:
            unknown = "%s: no GPU has UUID %s; this host has %s" % (option, ref, _describe_count(count))
            if unread:
                unknown += " (the UUID of GPU %s could not be read)" % ", ".join(str(index) for index in unread)
            raise SelectionError(unknown)
    return sorted(selected)


def _describe_count(count: int) -> str:
    if count == 0:
        return "no GPU"
    if count == 1:
        return "1 GPU (index 0)"
    return "%d GPUs (indices 0-%d)" % (count, count - 1)
