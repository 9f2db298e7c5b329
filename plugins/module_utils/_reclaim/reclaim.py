# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_reclaim: read every holder, end them (launchers first), then prove the GPUs free with fresh NVML readings.

The run's steps, each in the file named for it: the plan (plan.py), the containers its targets run in (containers.py),
the lineage watch of what it ends (lineage.py), the signal ladder (ladder.py), the verification by fresh readings
(verify.py), the evidence of what would not go (evidence.py) and the result (result.py). Reclaim drives them in order.

Package rule (_reclaim): what gpu_reclaim decides and does. It imports the flat files of module_utils, _host, _gpu
and its own files: never _bench, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import container_of as _container_of
from ansible_collections.gpuops.fleet.plugins.module_utils._host.listener import read_cgroup
from ansible_collections.gpuops.fleet.plugins.module_utils._host.process_table import ScannedTable, protected_pids
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import NvmlSession
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.selection import resolve_gpus
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim import containers as _containers, evidence, plan as _plan
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.ladder import run_ladder
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.lineage import Watch
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.owner import GetSid, getsid
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.result import Seen, check_result, foreign_entry, refused_result, run_result
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import ReclaimSpec
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.verify import Reading, Verification, drop_exited, read_gpu

Readings = t.Dict[int, Reading]


def _getpgid(pid: int) -> t.Optional[int]:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


class Reclaim:
    """One reclaim run. ``run()`` returns the module result, with the warnings as ``warnings_list``."""

    def __init__(self, session: NvmlSession, psutil: t.Any, spec: ReclaimSpec, check_mode: bool,
                 clock: t.Callable[[], float] = time.monotonic, getpgid: t.Optional[t.Callable[[int], t.Optional[int]]] = None,
                 sid_of: t.Optional[GetSid] = None, cgroup_of: t.Optional[t.Callable[[int], t.Optional[str]]] = None,
                 runtimes: t.Optional[_containers.Runtimes] = None, container_of: t.Optional[_containers.ContainerOf] = None) -> None:
        self.session = session
        self.psutil = psutil
        self.spec = spec
        self.check_mode = check_mode
        self.clock = clock
        self.getpgid = getpgid or _getpgid
        self.sid_of = sid_of or getsid
        self.cgroup_of = cgroup_of or read_cgroup
        # containers: the runtimes' command lines, the container of a host PID (from its cgroup), and the containers that
        # run targets of the plan (set apart from what is signalled: see _reclaim/containers.py)
        self.runtimes = runtimes or _containers.Runtimes()
        self.container_of = container_of or _container_of
        self.held: t.List[_containers.HeldContainer] = []
        self.start = clock()
        self.describe = _plan.Descriptions(psutil)

    def run(self) -> t.Dict[str, t.Any]:
        indices = resolve_gpus(self.spec.gpus, self.session.count, self.session.inventory)
        raw = {index: read_gpu(self.session, index) for index in indices}
        if any(reading.holders for reading in raw.values()):
            self.describe.table = ScannedTable(self.psutil)  # after the NVML reading: every holder listed was started before it
        before = {index: drop_exited(self.session, raw[index], self.describe) for index in indices}
        plan, watch, foreign = self._plan(before, set(indices))
        self.describe.planned()
        on_purpose = {pid: self.describe.before[pid]["create_time"] for pid in plan.on_purpose if pid in self.describe.before}
        if self.held:
            _containers.judge(self.held, self.spec, self.runtimes)
        seen = Seen(self.spec, plan, self.describe, on_purpose, foreign, self.held, self.runtimes, self._elapsed, self._evidence)
        if self.check_mode:
            return check_result(seen, before)
        if any(container.refused for container in self.held):
            return refused_result(seen, before, watch.report(0.0))
        return self._end(seen, before, watch, self._stop_containers())

    def _plan(self, before: Readings, selected: t.Set[int]) -> t.Tuple[_plan.Plan, Watch, t.List[t.Dict[str, t.Any]]]:
        """The plan (its targets on the host; the containers of the others in ``held``), the watch of their lineage, and
        the result's ``foreign``."""
        table = self.describe.table
        holders = _plan.gpu_holders(self.session, before, self.describe)
        others, unread = _plan.outside_holders(self.session, selected)
        unverifiable = _plan.unverifiable(before, holders, others, self.describe, table)
        protected = protected_pids(self.psutil)
        plan = _plan.plan_targets(self.psutil, self.spec, holders, selected, others, table, unverifiable, self.sid_of)
        plan.warnings.extend(unread)
        # a target that runs in a container is never signalled: its container is stopped through its runtime, or refused
        host_targets, self.held = _containers.hold(plan.targets, self.container_of, self.spec, self.check_mode)
        plan = plan._replace(targets=host_targets)
        watch = Watch(self.psutil, self.spec, table, protected, self.clock, self.getpgid, self.sid_of, self.cgroup_of, self.describe)
        watch.follow(plan.targets, _plan.process_groups(plan.targets, protected, self.getpgid))
        foreign = [foreign_entry(pid, verdict, holders.get(pid, {}).get("gpus", []), self.describe, self._container_fact(pid))
                   for pid, verdict in sorted(plan.foreign.items())]
        return plan, watch, foreign

    def _stop_containers(self) -> t.Optional[float]:
        """Stop the containers that run targets (containers.py stop_all); when the stops ended if a runtime may start
        one of them again as it exits (the verification then waits for it), else None."""
        if not self.held:
            return None
        stopped_at = _containers.stop_all(self.held, self.runtimes, self.spec, self.start + self.spec.timeout - self.clock(), self.clock)
        return stopped_at if _containers.may_restart(self.held) else None

    def _end(self, seen: Seen, before: Readings, watch: Watch, restart_at: t.Optional[float]) -> t.Dict[str, t.Any]:
        """The ladder over the plan's targets, then the verification, then the result."""
        watch.watch_tree(seen.plan.targets)
        began = self.clock()
        outcomes = run_ladder(self.psutil, seen.plan.targets, self.spec.signals, self.spec.grace, clock=self.clock,
                              deadline=self.start + self.spec.timeout, discover=watch.discover)
        watch.note_exits(began, outcomes)
        verification = Verification(self.session, self.psutil, self.spec, self.clock, self.start, watch, self.describe, seen.on_purpose)
        after, problems, outcomes = verification.run(before, seen.plan.left_alone, outcomes, _containers.stopped_pids(self.held), restart_at)
        problems += _containers.problems_after(self.held, self.runtimes, after)
        return run_result(seen, before, after, outcomes, problems, watch, verification)

    def _elapsed(self) -> float:
        return round(self.clock() - self.start, 3)

    def _container_fact(self, pid: int) -> t.Optional[t.Dict[str, t.Any]]:
        return _containers.fact_of(pid, self.held, self.container_of, self.runtimes)

    def _evidence(self, pids: t.Iterable[int]) -> t.Dict[str, t.Any]:
        return evidence.collect(self.psutil, pids, self._container_fact)
