# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/rollout_vllm.yml on a simulated fleet of four hosts, through real ansible-playbook runs.

The fake vLLM's decode pace comes from NCCL_PROTO (unset 47.3, LL 57.6, LL128 45.5 tok/s per stream: LL128 is ~4%
slower, LL ~22% faster). Outcomes are judged by independent readings: the PID (with its start time) of the process
listening on each host's port, that process's /proc/PID/environ, /health, and the simulator's own view of who holds
the GPUs; never by the playbook's claim alone. Each test has a fleet of its own, of as many hosts as it needs (so
pytest-xdist runs the tests side by side), and first brings it to the baseline configuration with restart_vllm.yml
(which also keeps that configuration as each server's last good one).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import time
import typing as t
import urllib.request
from pathlib import Path

import pytest

from gpusim.api import free_port, pid_alive, starttime
from ansible_run import flat, REPO, RESTART, run_playbook, start_playbook
from inventories import role_host_vars, write_role_inventory
from readings import assert_server_owns_gpus, environ, health, server_pid
from report_fleet import Node, assert_self_contained, chart_points, console_errors, dump_dom, numbers
from simhost import SimHost

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
# each test's budget covers a loaded 2-core machine: a rollout is several playbook runs and benchmarks
pytestmark = pytest.mark.timeout(1200)


class Fleet:
    """The first `size` hosts of NAMES, each a simulated host with its own server port; cleanup() ends them all."""

    def __init__(self, root: Path, size: int) -> None:
        self.root = root
        self.names = NAMES[:size]
        self.hosts: t.List[SimHost] = []

    def create(self) -> "Fleet":
        for name in self.names:
            host = SimHost(name, self.root / "hosts" / name)
            self.hosts.append(host)  # before it is created: cleanup() covers a host whose creation failed half-way
            host.gpusim("create")
            host.port = free_port()
        return self

    def inventory(self, run: Path, jitter: t.Optional[str] = None, **group_vars: t.Any) -> Path:
        run.mkdir(parents=True, exist_ok=True)
        entries = {}
        for host in self.hosts:
            entry = role_host_vars(host, host.port)
            if jitter is not None:
                entry["vllm_server_host_env"] = dict(entry["vllm_server_host_env"], GPUOPS_SIM_JITTER=jitter)
            entries[host.name] = entry
        # the rollout's own runs converge (its rollback checks a server that already runs the good configuration again)
        merged = dict(LOAD, vllm_server_tensor_parallel_size=TP, vllm_rollout_results_dir=str(run / "results"), vllm_server_state=None)
        merged.update(group_vars)
        return write_role_inventory(run / "inventory.json", entries, **merged)

    def reset(self, run: Path, *limit: str, **inv: t.Any) -> t.Dict[str, t.Tuple[int, float]]:
        """Every host (of `limit`) runs the baseline configuration (NCCL_PROTO unset), kept as its last good one (a host
        that already does is left as it is); their servers."""
        extra = ["--limit", ",".join(limit)] if limit else []
        proc = run_playbook(RESTART, self.inventory(run, **inv), "-e", "vllm_server_state=started", *extra, timeout=600)
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


@pytest.fixture
def make_fleet(tmp_path: Path) -> t.Iterator[t.Callable[[int], Fleet]]:
    """make_fleet(size) -> this test's own fleet of `size` hosts (under tmp_path/fleet), cleaned up even on failure."""
    made: t.List[Fleet] = []

    def factory(size: int) -> Fleet:
        fleet = Fleet(tmp_path / "fleet", size)
        made.append(fleet)
        return fleet.create()

    try:
        yield factory
    finally:
        for fleet in made:
            fleet.cleanup()


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


def dom_rollbacks(run: Path) -> t.List[t.Tuple[str, str]]:
    """(host, status) of each row of the page's rollback table."""
    table = dump_dom(run / "results" / "report.html")[0].find("table", id="rollback-table")
    return [(tr.attrs["data-host"], tr.attrs["data-status"]) for tr in table.find_all("tr") if "data-host" in tr.attrs]


def assert_page_as_seen(run: Path) -> Node:
    """report.html, rendered by chromium (its own policy forbids every script): the outcome, and per gated host the
    baseline and the canary of each gated metric, in the chart and the table, with the figures of report.json. Returns
    the rendered DOM."""
    page = run / "results" / "report.html"
    assert_self_contained(page)
    dom, _raw, stderr = dump_dom(page)
    assert not console_errors(stderr), console_errors(stderr)
    data = report(run)
    outcome = dom.find("p", id="outcome")
    assert outcome.attrs["data-status"] == data["outcome"]["status"]
    assert outcome.text() == "ROLLOUT %s: %s" % (data["outcome"]["status"].upper(), " ".join(data["outcome"]["reason"].split()))
    for verdict in data["batches"]:
        table = dom.find("table", id="gate-table-%s" % verdict["batch"])
        for host in verdict["hosts"]:
            for metric in host["metrics"]:
                tr = table.find("tr", data_host=host["host"], data_metric=metric["metric"])
                assert numbers(tr) == [metric["baseline"], metric["canary"], metric["change_pct"], metric["spread"], metric["threshold_pct"]]
                assert tr.find_all("td")[-1].text() == " ".join(metric["verdict"].split())
                if metric["metric"] in ("decode_tok_s", "median_ttft_ms"):
                    points = [p for p in chart_points(dom, "gate-%s-%s" % (verdict["batch"], metric["metric"]))
                              if p.attrs["data-group"] == host["host"]]
                    assert [(p.attrs["data-series"], float(p.attrs["data-value"])) for p in points] == [
                        ("baseline", metric["baseline"]), ("canary", metric["canary"])]
    assert [tr.attrs["data-host"] for tr in dom.find("table", id="fleet-table").find_all("tr") if "data-host" in tr.attrs] == [
        e["host"] for e in data["fleet"]]
    return dom


def summary_sections(run: Path) -> t.Dict[str, t.List[str]]:
    """summary.md's lines under each "## " heading (the heading's text without "## "), and its first lines under ""."""
    sections: t.Dict[str, t.List[str]] = {"": []}
    current = ""
    for line in (run / "results" / "summary.md").read_text().splitlines():
        if line.startswith("## "):
            current = line[3:]
            sections[current] = []
        elif line.strip():
            sections[current].append(line)
    return sections


def markdown_row(line: str) -> t.List[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def assert_passed_page_as_seen(run: Path, names: t.Sequence[str], servers: t.Dict[str, t.Tuple[int, float]]) -> None:
    """report.html of a rollout that went through, as a person reads it in chromium (its own policy forbids every script,
    so what it shows is what a reader with scripts off sees; nothing outside the page is named or fetched): the verdict
    is a pass, and so is every gated batch and host; nothing was rolled back; the plan names every host of the fleet in
    order, and the table of what runs where shows each one running the new configuration as the process that listens
    on its port (``servers``); each gated host's figures shown are those of summary.md (and, by assert_page_as_seen,
    the exact figures of report.json)."""
    page = run / "results" / "report.html"
    dom = assert_page_as_seen(run)
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"<link|<iframe|<object|<embed|<img|@import|url\(|href=", text, re.IGNORECASE)
    policy = dom.find("meta", http_equiv="Content-Security-Policy").attrs["content"]
    assert policy.startswith("default-src 'none';") and "script-src 'none'" in policy, policy
    data, markdown = report(run), summary_sections(run)
    outcome = dom.find("p", id="outcome")
    verdict_line = next(line for line in markdown[""] if line.startswith("**"))
    assert outcome.attrs["data-status"] == "passed" and "good" in outcome.attrs["class"].split()
    assert outcome.text() == "ROLLOUT " + " ".join(verdict_line.replace("**", "").split())
    assert outcome.text().startswith("ROLLOUT PASSED: ") and "HALT" not in outcome.text()
    assert dom.find("title").text() == "vLLM rollout: passed"
    assert dom.find("span", id="plan-hosts").text() == ", ".join(names)
    assert data["batches"]
    for verdict in data["batches"]:
        batch = dom.find("section", id="batch-%s" % verdict["batch"])
        assert batch.find("h2").text() == "Batch %s: pass" % verdict["batch"]
        assert [(li.attrs["data-host"], li.attrs["data-verdict"]) for li in batch.find("ul", class_="verdicts").find_all("li")] == [
            (host["host"], "pass") for host in verdict["hosts"]]
        # host, metric, baseline, canary, change and spread as shown, against the row of summary.md's table of the batch
        table = batch.find("table", id="gate-table-%s" % verdict["batch"])
        shown = [[td.text() for td in tr.find_all("td")][:6] for tr in table.find_all("tr") if "data-host" in tr.attrs]
        written = [markdown_row(line)[:6] for line in markdown["Batch %s: pass" % verdict["batch"]]
                   if line.startswith("| ") and not line.startswith("| host |")]
        assert shown == written and len(shown) == sum(len(host["metrics"]) for host in verdict["hosts"]) > 0, (shown, written)
    rollbacks = dom.find("section", id="rollbacks")
    assert not rollbacks.find_all("table") and rollbacks.find("p", class_="none").text() == "None." and data["rollbacks"] == []
    rows = [[td.text() for td in tr.find_all("td")] for tr in dom.find("table", id="fleet-table").find_all("tr") if "data-host" in tr.attrs]
    said = dict(line[2:].split(": ", 1) for line in markdown["What runs where"])
    assert [(host, runs) for host, runs, _words in rows] == [(name, "new") for name in names]
    for host, _runs, words in rows:
        assert words == said[host] and words.startswith("runs the NEW configuration"), (host, words, said)
        assert int(re.search(r"PID (\d+)", words).group(1)) == servers[host][0], (host, words)


def test_bad_inputs_fail_before_anything_changes(make_fleet, tmp_path):
    # the canary and a host of a later batch: neither may change
    sim = make_fleet(2)
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
    assert all(same(before[name]) for name in sim.names)
    assert all(proto(pid) is None for pid, _t in before.values())
    assert not (tmp_path / "results" / "baseline").exists()


def test_check_mode_says_the_order_and_changes_nothing(make_fleet, tmp_path):
    # three hosts in batches of two: a canary batch of two hosts, then a second batch
    sim = make_fleet(3)
    before = sim.reset(tmp_path)
    proc = rollout(sim.inventory(tmp_path), *env_arg({"NCCL_PROTO": "LL"}), "--check", "-e", "vllm_rollout_serial=2")
    assert proc.returncode == 0, proc.stdout[-4000:]
    out = flat(proc.stdout)
    assert "CHECK MODE, nothing was changed" in out
    assert out.index("batch 1 (canary), gpu-node-01: measure the baseline") < out.index("batch 2, gpu-node-03")
    assert "batch 1 (canary), gpu-node-02: measure the baseline" in out
    assert "NCCL_PROTO=LL" in out
    assert all(same(before[name]) for name in sim.names)
    assert not (tmp_path / "results").exists()


def test_ll128_canary_is_rolled_back_and_the_fleet_untouched(make_fleet, tmp_path):
    # the canary and one host of the next batch, which the halt must leave untouched
    sim = make_fleet(2)
    before = sim.reset(tmp_path)
    # LL128 is ~3.8% slower per stream (1.8 tok/s); a 2% threshold keeps the verdict clear of a loaded machine's ~1%
    # shifts. Streams of 64 tokens, not LOAD's 32: over 32 tokens a repeat's timing noise alone spread a side by 1.94
    # tok/s on a fresh-clone CI run, more than the slowdown, and the gate rightly called it noise
    proc = rollout(sim.inventory(tmp_path), *env_arg({"NCCL_PROTO": "LL128"}), "-e", "vllm_rollout_threshold_pct=2",
                   "-e", "vllm_server_benchmark_output_len=64")
    out = flat(proc.stdout)
    assert proc.returncode != 0, out[-4000:]
    assert "rollout halted" in out and "gpu-node-01" in out and "REGRESSION" in out, out[-4000:]
    # the canary: a new server (rolled back), running the old environment, healthy, holding its GPUs
    after = sim.servers()
    assert after["gpu-node-01"][0] != before["gpu-node-01"][0]
    assert proto(after["gpu-node-01"][0]) is None
    assert health(sim.hosts[0].port) == 200
    # the other was never touched
    for name in sim.names[1:]:
        assert same(before[name]), name
        assert after[name] == before[name]
    data = report(tmp_path)
    verdict = data["batches"][0]["hosts"][0]
    assert verdict["verdict"] == "regression"
    decode = verdict["metrics"][0]
    assert decode["metric"] == "decode_tok_s" and decode["regression"] and decode["canary"] < decode["baseline"]
    assert [r["host"] for r in data["rollbacks"]] == ["gpu-node-01"] and data["rollbacks"][0]["status"] == "ok"
    assert data["rollbacks"][0]["checks"]
    assert {e["host"]: e["runs"] for e in data["fleet"]} == dict.fromkeys(sim.names, "good")
    assert len(data["batches"]) == 1
    # the canary's start-up (read by its ready step) against the baseline's (kept by the ready step that launched it)
    canary = data["batches"][0]["canaries"]["gpu-node-01"]["startup"]
    assert canary["total_s"] > 0 and [phase["name"] for phase in canary["phases"]][:1] == ["weights"]
    assert "- gpu-node-01: start-up: baseline " in (tmp_path / "results" / "summary.md").read_text()
    assert (tmp_path / "results" / "chart.png").read_bytes()[:4] == b"\x89PNG"
    assert_page_as_seen(tmp_path)
    assert dom_rollbacks(tmp_path) == [("gpu-node-01", "ok")]


def test_canary_that_crashes_at_start_is_rolled_back(make_fleet, tmp_path):
    sim = make_fleet(2)
    before = sim.reset(tmp_path)
    proc = rollout(sim.inventory(tmp_path), *env_arg(CRASH))
    out = flat(proc.stdout)
    assert proc.returncode != 0, out[-4000:]
    assert "rollout halted" in out and "failed its gate" in out, out[-4000:]
    after = sim.servers()
    assert "GPUOPS_SIM_FAIL_AT_START" not in environ(after["gpu-node-01"][0])
    assert health(sim.hosts[0].port) == 200
    for name in sim.names[1:]:
        assert same(before[name]), name
    data = report(tmp_path)
    assert data["batches"][0]["hosts"][0]["verdict"] == "failed"
    assert data["rollbacks"][0]["status"] == "ok" and data["rollbacks"][0]["action"] in ("started", "restarted")


def test_killed_between_restart_and_benchmark_then_rerun(make_fleet, tmp_path):
    # two hosts (gpu-node-01, the canary, and gpu-node-02) keep it short
    sim = make_fleet(2)
    before = sim.reset(tmp_path)
    inv = sim.inventory(tmp_path)
    canary = sim.hosts[0]
    proc = start_playbook(ROLLOUT, inv, *env_arg({"NCCL_PROTO": "LL"}), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True)
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
    rerun = rollout(inv, *env_arg({"NCCL_PROTO": "LL"}))
    out = flat(rerun.stdout)
    assert rerun.returncode == 0, out[-5000:]
    assert "already ran the new configuration" in out
    after = sim.servers()
    assert all(proto(pid) == "LL" for pid, _t in after.values())
    data = report(tmp_path)
    assert {e["host"]: e["runs"] for e in data["fleet"]} == dict.fromkeys(sim.names, "new")
    assert data["batches"][0]["hosts"][0]["verdict"] == "pass"


def test_jitter_and_no_effect_config_never_halt(make_fleet, tmp_path):
    # one host whose fake server jitters each token by up to 30% of a gap; three rollouts in a row of a variable the
    # server ignores (each a real restart, gated by its own baseline and canary measurements): none may halt, and
    # each one leaves the new configuration running
    sim = make_fleet(1)
    name = sim.names[0]
    sim.reset(tmp_path, jitter="0.3")
    halts = []
    for attempt in range(3):
        run = tmp_path / ("run%d" % attempt)
        proc = rollout(sim.inventory(run, jitter="0.3"), *env_arg({"GPUOPS_TEST_NOOP": str(attempt)}))
        if proc.returncode != 0:
            halts.append(flat(proc.stdout)[-2000:])
            continue
        pid = sim.servers()[name][0]
        assert environ(pid)["GPUOPS_TEST_NOOP"] == str(attempt) and environ(pid)["GPUOPS_SIM_JITTER"] == "0.3"
        assert report(run)["batches"][0]["hosts"][0]["verdict"] == "pass"
    assert not halts, halts


def test_ll_rolls_out_to_every_host(make_fleet, tmp_path):
    # the canary and two later batches of one host each (vllm_rollout_serial 1)
    sim = make_fleet(3)
    sim.reset(tmp_path)
    proc = rollout(sim.inventory(tmp_path), *env_arg({"NCCL_PROTO": "LL"}))
    out = flat(proc.stdout)
    assert proc.returncode == 0, out[-5000:]
    assert "ROLLOUT PASSED" in out
    after = sim.servers()
    assert all(proto(pid) == "LL" for pid, _t in after.values())
    data = report(tmp_path)
    assert {e["host"]: e["runs"] for e in data["fleet"]} == dict.fromkeys(sim.names, "new")
    assert "passed" in data["outcome"]["reason"] and "decode tok/s per stream" in data["outcome"]["reason"]
    decode = data["batches"][0]["hosts"][0]["metrics"][0]
    assert decode["canary"] > decode["baseline"] * 1.1
    summary = (tmp_path / "results" / "summary.md").read_text()
    assert "**PASSED**" in summary
    assert_passed_page_as_seen(tmp_path, sim.names, after)
    # LL is now every server's last known-good configuration: the record says so
    for host in sim.hosts:
        record = json.loads((host.state / "role" / ("vllm-%d.json" % host.port)).read_text())
        good = json.loads((host.state / "role" / ("vllm-%d.last-good" % host.port)).read_text())
        assert good["config_hash"] == record["config_hash"] and good["env"]["NCCL_PROTO"] == "LL"
        assert oct((host.state / "role" / ("vllm-%d.last-good" % host.port)).stat().st_mode & 0o777) == "0o600"


def test_a_dataset_rollout_gates_both_sides_on_the_same_requests(make_fleet, tmp_path):
    """vllm_server_benchmark_workload reaches the gate: the baseline and the canary send the dataset's same requests (the
    same prompt tokens in every repeat, as each server counted them), and the canary's server received exactly those."""
    sim = make_fleet(1)
    sim.reset(tmp_path)
    rows = [{"prompt": " ".join("w%d" % i for i in range(6 + 3 * n)), "output_len": 8} for n in range(8)]
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows))
    inv = sim.inventory(tmp_path, vllm_server_benchmark_workload={"kind": "dataset", "file": str(dataset)})
    proc = rollout(inv, *env_arg({"NCCL_PROTO": "LL"}))
    out = flat(proc.stdout)
    assert proc.returncode == 0 and "ROLLOUT PASSED" in out, out[-5000:]
    sides = {side: json.loads((tmp_path / "results" / side / "gpu-node-01.json").read_text()) for side in ("baseline", "canary")}
    digest = hashlib.sha256(dataset.read_bytes()).hexdigest()
    for side, measured in sides.items():
        assert (measured["summary"]["workload"]["kind"], measured["summary"]["workload"]["sha256"]) == ("dataset", digest), side
    tokens = {side: [run["total_input_tokens"] for run in measured["runs"]] for side, measured in sides.items()}
    assert tokens["baseline"] == tokens["canary"] and len(set(tokens["canary"])) == 1, tokens
    # the canary's own server: every streamed request's prompt is one of the dataset's, and the measured repeats sum up
    with urllib.request.urlopen("http://127.0.0.1:%d/sim/sent" % sim.hosts[0].port, timeout=10) as reply:
        streamed = [r for r in json.loads(reply.read())["requests"] if r["stream"]]
    streamed.sort(key=lambda record: record["arrived_s"])
    count = LOAD["vllm_server_benchmark_num_requests"]
    repeats = [streamed[len(streamed) - count * (i + 1):len(streamed) - count * i] for i in range(len(tokens["canary"]))][::-1]
    assert len(streamed) == LOAD["vllm_server_benchmark_warmup_requests"] + count * len(repeats), streamed
    assert {r["prompt_tokens"] for r in streamed} <= {6 + 3 * n for n in range(8)}, streamed
    assert [sum(r["prompt_tokens"] for r in repeat) for repeat in repeats] == tokens["canary"], (repeats, tokens)
    assert len({tuple(sorted(r["prompt_tokens"] for r in repeat)) for repeat in repeats}) == 1  # the same requests each repeat
