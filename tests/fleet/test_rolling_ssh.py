# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rolling restart over SSH: with vllm_restart_serial 25%, never more than a quarter of the servers down.

A thread on the machine asks every server's /health (at the node's address) in rounds while the playbook runs;
a server counts as down in a round unless it answers 200.
"""

from __future__ import annotations

import threading
import time
import typing as t

from fleetlib import recap, run_playbook

NODES = 4


class HealthSampler(threading.Thread):
    def __init__(self, fleet) -> None:
        super().__init__(daemon=True)
        self.fleet = fleet
        self.rounds: t.List[t.Dict[str, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.rounds.append({name: self.fleet.health(name, timeout=1.0) for name in self.fleet.names})
            time.sleep(0.02)


def test_rolling_restart_keeps_three_quarters_serving(make_fleet, tmp_path):
    fleet = make_fleet(NODES)
    inventory = fleet.inventory(tmp_path / "inventory.yml", group_vars={
        "vllm_restart_serial": "25%", "vllm_server_tensor_parallel_size": 2, "vllm_server_gpus": [0, 1]})
    first = run_playbook("restart_vllm.yml", inventory, "-e", "vllm_restart_serial=100%")
    assert first.returncode == 0, first.stdout[-3000:]
    before = {name: fleet.server_record(name)["pid"] for name in fleet.names}
    assert all(fleet.health(name) == 200 for name in fleet.names)

    sampler = HealthSampler(fleet)
    sampler.start()
    try:
        run = run_playbook("restart_vllm.yml", inventory)
    finally:
        sampler.stop.set()
        sampler.join(timeout=30)
    assert run.returncode == 0, run.stdout[-3000:]
    assert all(counters["failed"] == 0 for counters in recap(run.stdout).values())
    rounds = sampler.rounds
    assert len(rounds) >= 50, "too few samples (%d) to judge the rolling restart" % len(rounds)
    down_counts = [sum(1 for code in sample.values() if code != 200) for sample in rounds]
    worst = max(down_counts)
    assert worst <= NODES // 4, "at one moment %d of %d servers were down: %s" % (
        worst, NODES, rounds[down_counts.index(worst)])
    # every server was seen down at some point (the restart really happened under the sampler) and is back
    for name in fleet.names:
        assert any(sample[name] != 200 for sample in rounds), "%s was never seen restarting" % name
        assert fleet.health(name) == 200
        assert fleet.server_record(name)["pid"] != before[name]
    # batches one at a time, in inventory order: each server went down only after the previous one was back
    order = [next(i for i, sample in enumerate(rounds) if sample[name] != 200) for name in fleet.names]
    assert order == sorted(order), order
