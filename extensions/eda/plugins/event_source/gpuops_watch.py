# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuops.fleet.gpuops_watch: an Event-Driven Ansible source that reads each GPU host's metrics endpoint
(docs/watch.md) and puts one event on the queue per decision about a condition (docs/self-healing.md).

Arguments (all but targets optional):
  targets: {host: url} of each host's endpoint, e.g. {gpu-node-01: "http://gpu-node-01:9835/metrics"}
  interval: seconds between two scrapes of every host (default 30)
  hold_down: scrapes in a row a condition must be seen in before anything is decided (default 2)
  timeout: seconds after an event with the condition still seen before the remediation counts as failed (default 600)
  window: at most one remediation per host in this many seconds (default 3600)
  max_hosts: hosts in remediation at once across the fleet (default 1)
  max_failures: failed remediations of a host in a row before a person is needed (default 2)
  failure_window: seconds after which a failure is forgotten (default 86400)
  dry_run: true decides and says so, and the rulebook runs nothing (default false)
  audit_log: the file the audit's JSON lines are appended to (default: standard output)

Each event: {"gpuops_heal": {"action": "remediate" | "dry_run" | "person_needed", "host", "condition",
"playbook", "reason", "evidence", "at"}}.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import typing as t

try:
    from ansible_collections.gpuops.fleet.plugins.module_utils._http.prometheus import parse
    from ansible_collections.gpuops.fleet.plugins.module_utils._http.request import http_get
    from ansible_collections.gpuops.fleet.plugins.module_utils._watch.budget import Policy
    from ansible_collections.gpuops.fleet.plugins.module_utils._watch.heal import conditions, Healer
except ImportError:  # run from an installed collection whose root is not on sys.path: add it (…/ansible_collections/..)
    sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 7)))
    from ansible_collections.gpuops.fleet.plugins.module_utils._http.prometheus import parse
    from ansible_collections.gpuops.fleet.plugins.module_utils._http.request import http_get
    from ansible_collections.gpuops.fleet.plugins.module_utils._watch.budget import Policy
    from ansible_collections.gpuops.fleet.plugins.module_utils._watch.heal import conditions, Healer

NAMES = ("gpuops_watch_reading_ok", "gpuops_server_", "gpuops_gpu_holder_memory_mib")


def _audit_to(path: t.Optional[str]) -> t.Callable[[str], None]:
    def write(line: str) -> None:
        if path:
            with open(path, "a", encoding="utf-8") as out:
                out.write(line + "\n")
        else:
            print(line, flush=True)
    return write


def _scrape(url: str, timeout: float) -> t.Optional[t.Dict[str, t.Any]]:
    reply = http_get(url, timeout)
    if reply.status != 200:
        return None
    return conditions(parse(reply.body, NAMES))


def healer_from(args: t.Mapping[str, t.Any]) -> Healer:
    policy = Policy(window_s=args.get("window", 3600.0), max_hosts=args.get("max_hosts", 1),
                    max_failures=args.get("max_failures", 2), failure_window_s=args.get("failure_window", 86400.0),
                    dry_run=args.get("dry_run", False))
    return Healer(policy, hold_down=args.get("hold_down", 2), timeout_s=args.get("timeout", 600.0),
                  audit=_audit_to(args.get("audit_log")))


async def main(queue: t.Any, args: t.Mapping[str, t.Any]) -> None:
    targets = args.get("targets")
    if not isinstance(targets, dict) or not targets:
        raise ValueError("targets: %r must be a mapping of host name to its endpoint's URL" % (targets,))
    interval = args.get("interval", 30.0)
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval <= 0:
        raise ValueError("interval: %r must be a number of seconds above 0" % (interval,))
    healer = healer_from(args)
    loop = asyncio.get_running_loop()
    while True:
        began = loop.time()
        readings = await asyncio.gather(*[asyncio.to_thread(_scrape, url, min(interval, 30.0)) for url in targets.values()])
        for host, found in zip(targets, readings):
            for event in healer.observe(host, found):
                await queue.put(event)
        await asyncio.sleep(max(0.0, interval - (loop.time() - began)))


if __name__ == "__main__":  # a try from a shell: python gpuops_watch.py '{"targets": {...}, "interval": 5}'

    class _Print:
        async def put(self, event: t.Any) -> None:
            print(json.dumps(event), flush=True)

    asyncio.run(main(_Print(), json.loads(sys.argv[1])))
