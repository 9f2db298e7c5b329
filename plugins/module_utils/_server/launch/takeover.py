# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The stop of a server taken over (found listening on the server's port, never launched here), in every launch mode.

A container is drained and stopped through its runtime (never signalled, never removed). Otherwise another tool's unit
that runs it is stopped and disabled first (systemd would start it again), then the process is drained and its whole
tree stopped; its parent (a shell, tmux, screen) is never signalled.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

# each backend is imported for the takeover it stops (a module run compiles its imports from source: see mode.backend)
# pylint: disable=import-outside-toplevel

# the listener's `how` of a server run by another tool's systemd unit (_host.listener.UNIT)
BY_UNIT = "systemd"


def stop_takeover(module: t.Any, psutil: t.Any, takeover: t.Mapping[str, t.Any], drain_url: t.Optional[str] = None,
                  drain_timeout: float = 60.0, stop_timeout: float = 30.0) -> t.Dict[str, t.Any]:
    """Stop the server ``takeover`` names (pid, create_time, and how, unit and container as vllm_listener read them).
    Returns changed, stopped, drained (when drained), unit_disabled (whether the other tool's unit was stopped or
    disabled), container (a container's inspect before its stop, else None) and msg."""
    if takeover.get("container"):
        from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import container
        result = container.stop_taken_over(module, psutil, takeover["container"], drain_url, drain_timeout, stop_timeout)
        result["unit_disabled"] = False
        return result
    unit_disabled = False
    said = []
    if takeover.get("how") == BY_UNIT and takeover.get("unit"):
        from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import systemd
        done = systemd.stop_unit(module, str(takeover["unit"]), disable=True)
        unit_disabled = done["changed"]
        if unit_disabled:
            said.append("%s the unit %s" % ("would stop and disable" if module.check_mode else "stopped and disabled", takeover["unit"]))
    from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import process
    result = process.stop_taken_over(module, psutil, int(takeover["pid"]), float(takeover["create_time"]), drain_url,
                                     drain_timeout, stop_timeout)
    result["unit_disabled"] = unit_disabled
    result["container"] = None
    result["changed"] = result["changed"] or unit_disabled
    result["msg"] = "; ".join(said + [result["msg"]])
    return result
