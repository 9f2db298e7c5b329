# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_reclaim's --diff: each selected GPU's used memory and holders, before and after.

Package rule (_reclaim): what gpu_reclaim decides and does. It imports the flat files of module_utils, _host, _gpu
and its own files: never _bench, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t


def _line(index: int, used: t.Optional[int], holders: t.Sequence[t.Mapping[str, t.Any]]) -> str:
    names = ", ".join("%s(pid %d)" % (h["name"] or "?", h["pid"]) for h in holders) or "no holder"
    return "GPU %d: %s MiB used, %s\n" % (index, "?" if used is None else used, names)


def reclaim_diff(gpus: t.Sequence[t.Mapping[str, t.Any]], check_mode: bool) -> t.Dict[str, str]:
    """A diff whose ``after`` is the fresh reading (in check mode: what a real run would leave, holders it would not end
    and the memory they keep included; the memory is ``?`` where a holder's share is not available)."""
    before = "".join(_line(g["index"], g["memory_used_mib_before"], g["processes_before"]) for g in gpus)
    if check_mode:
        after = "".join(_line(g["index"], g.get("predicted_memory_used_mib_after"), g.get("processes_would_remain", [])) for g in gpus)
    else:
        after = "".join(_line(g["index"], g["memory_used_mib_after"], g["processes_left"]) for g in gpus)
    return {"before": before, "after": after, "before_header": "GPU memory before", "after_header": "GPU memory after"}
