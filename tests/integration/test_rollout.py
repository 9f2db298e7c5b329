# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/rollout_vllm.yml on a simulated fleet of four hosts, through real ansible-playbook runs.

The fake vLLM's decode pace comes from NCCL_PROTO (unset 47.3, LL 57.6, LL128 45.5 tok/s per stream: LL128 is ~4%
slower, LL ~22% faster). Outcomes are judged by independent readings: the PID (with its start time) of the process
listening on each host's port, that process's /proc/PID/environ, /health, and the simulator's own view of who holds
the GPUs; never by the playbook's claim alone. One fleet serves the whole file; each test first brings it back to
the baseline configuration with restart_vllm.yml (which also keeps that configuration as each server's last good one).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import typing as t
from pathlib import Path

import pytest

from gpusim.api import free_port, pid_alive, starttime
from simfleet import (BIN, REPO, RESTART, SimHost, ansible_env, assert_server_owns_gpus, environ, flat, health, role_host_vars,
                      run_playbook, server_pid, write_role_inventory)

ROLLOUT = REPO / "playbooks" / "rollout_vllm.yml"
NAMES = ("gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04")
LOAD = {  # short measurements: 4 requests of 32 tokens, 2 at a time, one warmup request, 3 repeats
    "vllm_server_benchmark_input_len": 16,
    "vllm_server_benchmark_output_len": 32,
    "vllm_server_benchmark_num_requests": 4,
    "vllm_server_benchmark_concurrency": 2,
    "vllm_server_benchmark_warmup_requests": 1,
    "vllm_server_benchmark_repeats": 3,
}
TP = 2
CRASH = {"GPUOPS_SIM_FAIL_AT_START": "crash", "GPUOPS_SIM_FAIL_AFTER_S": "0.3"}
# one fleet for the file, its tests in order (the last one leaves every host on LL): one xdist worker runs them all
# (each test's budget covers a loaded 2-core machine: a rollout is several playbook runs and benchmarks)
pytestmark = [pytest.mark.xdist_group("test_rollout"), pytest.mark.timeout(1200)]


class Fleet:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.hosts: t.List[SimHost] = []
        for name in NAMES:
            host = SimHost(name, root / "hosts" / name)
            host.gpusim("create")
            host.port = free_port()
            self.hosts.append(host)

    def inventory(self, run: Path, jitter: t.Optional[str] = None, **group_vars: t.Any) -> Path:
        run.mkdir(parents=True, exist_ok=True)
        entries = {}
        for host in self.hosts:
            entry = role_host_vars(host, host.port)
            if jitter is not None:
                entry["vllm_server_host_env"] = dict(entry["vllm_server_host_env"], GPUOPS_SIM_JITTER=jitter)
            entries[host.name] = entry
        merged = dict(LOAD, vllm_server_tensor_parallel_size=TP, vllm_rollout_results_dir=str(run / "results"))
        merged.update(group_vars)
        return write_role_inventory(run / "inventory.json", entries, **merged)

    def reset(self, run: Path, *limit: str, **inv: t.Any) -> t.Dict[str, t.Tuple[int, float]]:
        """Every host (of `limit`) runs the baseline configuration (NCCL_PROTO unset), kept as its last good one (a host
        that already does is left as it is); their servers."""
        extra = ["--limit", ",".join(limit)] if limit else []
        proc = run_playbook(RESTART, self.inventory(run, **inv), "-e", "vllm_restart_force=false", *extra, timeout=600)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        return self.servers(*limit)

    def servers(self, *limit: str) -> t.Dict[str, t.Tuple[int, float]]:
        """host -> (PID, start time) of the process listening on its port, each one healthy and holding its GPUs."""
        found = {}
        for host in self.hosts:
            if limit and host.name not in limit:
                continue
            pid, _workers = assert_server_owns_gpus(host, range(TP), TP)
            found[host.name] = (pid, starttime(pid))
        return found

    def cleanup(self) -> None:
        for host in self.hosts:
            host.gpusim("cleanup", check=False)


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> t.Iterator[Fleet]:
    made = Fleet(tmp_path_factory.mktemp("rollout"))
    try:
        yield made
    finally:
        made.cleanup()


def rollout(inv: Path, *extra: str, timeout: int = 600) -> "subprocess.CompletedProcess[str]":
    return run_playbook(ROLLOUT, inv, *extra, timeout=timeout)


def env_arg(env: t.Dict[str, t.Any]) -> t.List[str]:
    return ["-e", json.dumps({"vllm_server_env": env})]


def proto(pid: int) -> t.Optional[str]:
    return environ(pid).get("NCCL_PROTO")


def same(before: t.Tuple[int, float]) -> bool:
    return pid_alive(before[0]) and abs(starttime(before[0]) - before[1]) < 0.5


def report(run: Path) -> t.Dict[str, t.Any]:
    return json.loads((run / "results" / "report.json").read_text())


def test_bad_inputs_fail_before_anything_changes(sim, tmp_path):
    before = sim.reset(tmp_path)
    inv = sim.inventory(tmp_path)
    cases = [
        (["-e", "vllm_rollout_threshold_pct=-1"], "vllm_rollout_threshold_pct=-1"),
        (["-e", "vllm_rollout_serial=0"], "vllm_rollout_serial=0"),
        (["-e", "vllm_server_benchmark_repeats=1"], "vllm_server_benchmark_repeats=1"),
        (["-e", "vllm_rollout_ttft_threshold_pct=lots"], "vllm_rollout_ttft_threshold_pct=lots"),
    ]
    for extra, named in cases:
        proc = rollout(inv, *env_arg({"NCCL_PROTO": "LL"}), *extra)
        out = flat(proc.stdout)
        assert proc.returncode != 0 and named in out, (extra, out[-3000:])
    assert all(same(before[name]) for name in NAMES)
    assert all(proto(pid) is None for pid, _t in before.values())
    assert not (tmp_path / "results" / "baseline").exists()


def test_check_mode_says_the_order_and_changes_nothing(sim, tmp_path):
    before = sim.reset(tmp_path)
    proc = rollout(sim.inventory(tmp_path), *env_arg({"NCCL_PROTO": "LL"}), "--check", "-e", "vllm_rollout_serial=2")
    assert proc.returncode == 0, proc.stdout[-4000:]
    out = flat(proc.stdout)
    assert "CHECK MODE, nothing was changed" in out
    assert out.index("batch 1 (canary), gpu-node-01: measure the baseline") < out.index("batch 2, gpu-node-03")
    assert "batch 1 (canary), gpu-node-02: measure the baseline" in out
    assert "NCCL_PROTO=LL" in out
    assert all(same(before[name]) for name in NAMES)
    assert not (tmp_path / "results").exists()


def test_ll128_canary_is_rolled_back_and_the_fleet_untouched(sim, tmp_path):
    before = sim.reset(tmp_path)
    # LL128 is ~3.8% slower per stream; a 2% threshold keeps the verdict clear of a loaded machine's ~1% shifts
    proc = rollout(sim.inventory(tmp_path), *env_arg({"NCCL_PROTO": "LL128"}), "-e", "vllm_rollout_threshold_pct=2")
    out = flat(proc.stdout)
    assert proc.returncode != 0, out[-4000:]
    assert "rollout halted" in out and "gpu-node-01" in out and "REGRESSION" in out, out[-4000:]
    # the canary: a new server (rolled back), running the old environment, healthy, holding its GPUs
    after = sim.servers()
    assert after["gpu-node-01"][0] != before["gpu-node-01"][0]
    assert proto(after["gpu-node-01"][0]) is None
    assert health(sim.hosts[0].port) == 200
    # the three others were never touched
    for name in NAMES[1:]:
        assert same(before[name]), name
        assert after[name] == before[name]
    data = report(tmp_path)
    verdict = data["batches"][0]["hosts"][0]
    assert verdict["verdict"] == "regression"
    decode = verdict["metrics"][0]
    assert decode["metric"] == "decode_tok_s" and decode["regression"] and decode["canary"] < decode["baseline"]
    assert [r["host"] for r in data["rollbacks"]] == ["gpu-node-01"] and data["rollbacks"][0]["status"] == "ok"
    assert data["rollbacks"][0]["checks"]
    assert {e["host"]: e["runs"] for e in data["fleet"]} == dict.fromkeys(NAMES, "good")
    assert len(data["batches"]) == 1
    assert (tmp_path / "results" / "chart.png").read_bytes()[:4] == b"\x89PNG"


def test_canary_that_crashes_at_start_is_rolled_back(sim, tmp_path):
    before = sim.reset(tmp_path)
    proc = rollout(sim.inventory(tmp_path), *env_arg(CRASH))
    out = flat(proc.stdout)
    assert proc.returncode != 0, out[-4000:]
    assert "rollout halted" in out and "failed its gate" in out, out[-4000:]
    after = sim.servers()
    assert "GPUOPS_SIM_FAIL_AT_START" not in environ(after["gpu-node-01"][0])
    assert health(sim.hosts[0].port) == 200
    for name in NAMES[1:]:
        assert same(before[name]), name
    data = report(tmp_path)
    assert data["batches"][0]["hosts"][0]["verdict"] == "failed"
    assert data["rollbacks"][0]["status"] == "ok" and data["rollbacks"][0]["action"] in ("started", "restarted")


def test_killed_between_restart_and_benchmark_then_rerun(sim, tmp_path):
    # two hosts (gpu-node-01, the canary, and gpu-node-02) keep it short
    before = sim.reset(tmp_path, "gpu-node-01", "gpu-node-02")
    inv = sim.inventory(tmp_path)
    limit = ["--limit", "gpu-node-01,gpu-node-02"]
    canary = sim.hosts[0]
    proc = subprocess.Popen([str(BIN / "ansible-playbook"), "-i", str(inv), str(ROLLOUT), *env_arg({"NCCL_PROTO": "LL"}), *limit],
                            env=ansible_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        killed = False
        while time.monotonic() < deadline and proc.poll() is None:
            pid = server_pid(canary)
            if pid and pid != before["gpu-node-01"][0] and proto(pid) == "LL" and health(canary.port) == 200:
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.05)
        assert killed, "the canary never ran the new configuration"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert not (tmp_path / "results" / "canary" / "gpu-node-01.json").exists()
    assert (tmp_path / "results" / "baseline" / "gpu-node-01.json").exists()
    # the rerun knows the canary already runs the new configuration, measures it against the recorded baseline
    rerun = rollout(inv, *env_arg({"NCCL_PROTO": "LL"}), *limit)
    out = flat(rerun.stdout)
    assert rerun.returncode == 0, out[-5000:]
    assert "already ran the new configuration" in out
    after = sim.servers("gpu-node-01", "gpu-node-02")
    assert all(proto(pid) == "LL" for pid, _t in after.values())
    data = report(tmp_path)
    assert {e["host"]: e["runs"] for e in data["fleet"]} == dict.fromkeys(NAMES[:2], "new")
    assert data["batches"][0]["hosts"][0]["verdict"] == "pass"


def test_jitter_and_no_effect_config_never_halt(sim, tmp_path):
    # one host (gpu-node-04) whose fake server jitters each token by up to 30% of a gap; five rollouts of a variable
    # the server ignores: none may halt, and each one leaves the new configuration running
    sim.reset(tmp_path, "gpu-node-04", jitter="0.3")
    halts = []
    for attempt in range(5):
        run = tmp_path / ("run%d" % attempt)
        proc = rollout(sim.inventory(run, jitter="0.3"), *env_arg({"GPUOPS_TEST_NOOP": str(attempt)}), "--limit", "gpu-node-04")
        if proc.returncode != 0:
            halts.append(flat(proc.stdout)[-2000:])
            continue
        pid = sim.servers("gpu-node-04")["gpu-node-04"][0]
        assert environ(pid)["GPUOPS_TEST_NOOP"] == str(attempt) and environ(pid)["GPUOPS_SIM_JITTER"] == "0.3"
        assert report(run)["batches"][0]["hosts"][0]["verdict"] == "pass"
    assert not halts, halts


def test_ll_rolls_out_to_every_host(sim, tmp_path):
    sim.reset(tmp_path)
    proc = rollout(sim.inventory(tmp_path), *env_arg({"NCCL_PROTO": "LL"}))
    out = flat(proc.stdout)
    assert proc.returncode == 0, out[-5000:]
    assert "ROLLOUT PASSED" in out
    after = sim.servers()
    assert all(proto(pid) == "LL" for pid, _t in after.values())
    data = report(tmp_path)
    assert {e["host"]: e["runs"] for e in data["fleet"]} == dict.fromkeys(NAMES, "new")
    assert "passed" in data["outcome"]["reason"] and "decode tok/s per stream" in data["outcome"]["reason"]
    decode = data["batches"][0]["hosts"][0]["metrics"][0]
    assert decode["canary"] > decode["baseline"] * 1.1
    summary = (tmp_path / "results" / "summary.md").read_text()
    assert "**PASSED**" in summary
    # LL is now every server's last known-good configuration: the record says so
    for host in sim.hosts:
        record = json.loads((host.state / "role" / ("vllm-%d.json" % host.port)).read_text())
        good = json.loads((host.state / "role" / ("vllm-%d.last-good" % host.port)).read_text())
        assert good["config_hash"] == record["config_hash"] and good["env"]["NCCL_PROTO"] == "LL"
        assert oct((host.state / "role" / ("vllm-%d.last-good" % host.port)).stat().st_mode & 0o777) == "0o600"
