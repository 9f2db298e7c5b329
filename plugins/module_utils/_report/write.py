# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_report): the fleet report's reading (on each host) and its files (on the controller). It may import
# the flat files of module_utils (_deps, _secrets), _gpu, _host and _http, and the read-only helpers of _reclaim (the
# owner rule) and _server (records, /health); never a module or a plugin.

"""gpu_report's run: check the options, build the report, write its files (each atomically) into ``dest``.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu import state as gpu_state
from ansible_collections.gpuops.fleet.plugins.module_utils._report import model
from ansible_collections.gpuops.fleet.plugins.module_utils._report import render
from ansible_collections.gpuops.fleet.plugins.module_utils._io import write_if_changed

# gpu_report's defaults, for a parameter that is missing (the module's ARGUMENT_SPEC names them from here)
DEFAULTS: t.Dict[str, t.Any] = {"idle_threshold_mib": gpu_state.DEFAULT_THRESHOLD_MIB, "title": "GPU fleet report"}


class ReportError(ValueError):
    """An option that cannot be used; the message names it and its value."""


def run_report(params: t.Mapping[str, t.Any], check_mode: bool, now: t.Optional[float] = None) -> t.Dict[str, t.Any]:
    """The module's result. Raises ReportError for bad options (before anything is written)."""
    try:
        # idle_threshold_mib, the collection's one name for it; threshold_mib is its deprecated alias (the module's argument
        # spec warns about it and copies its value to the new name; a caller that gives only the old name gets it)
        given = params["threshold_mib"] if "threshold_mib" in params else params.get("idle_threshold_mib", DEFAULTS["idle_threshold_mib"])
        threshold = gpu_state.check_threshold(given, "idle_threshold_mib")
    except ValueError as exc:
        raise ReportError(str(exc)) from None
    hosts, results = list(params["hosts"]), list(params["results"])
    if len(hosts) != len(results):
        raise ReportError("results: %d result(s) for %d host(s) in hosts; give one result (or null) per host" % (len(results), len(hosts)))
    dest = params["dest"]
    if os.path.exists(dest) and not os.path.isdir(dest):
        raise ReportError("dest: %r exists and is not a directory" % dest)
    report = model.build_report(list(zip(hosts, results)), threshold, time.time() if now is None else now, params.get("title") or DEFAULTS["title"])
    files = render.render_all(report)
    paths = {name: os.path.join(dest, name) for name in files}
    result: t.Dict[str, t.Any] = {
        "changed": False, "dest": dest, "index": paths["index.html"], "files": [paths[name] for name in render.FILES],
        "summary": report["summary"], "problems": report["problems"], "summary_md": files["summary.md"],
        "page_bytes": len(files["index.html"].encode("utf-8")),
    }
    if check_mode:
        result["changed"] = True
        return result
    try:
        os.makedirs(dest, exist_ok=True)
        for name in render.FILES:
            # the time stamp differs on every run: a file counts as changed when more than that differs
            changed = write_if_changed(paths[name], files[name], prefix=".report.")
            result["changed"] = result["changed"] or changed
    except OSError as exc:
        raise ReportError("dest: cannot write the report into %r: %s" % (dest, exc)) from None
    return result
