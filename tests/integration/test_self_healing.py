# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Self-healing (docs/self-healing.md): the real ansible-rulebook (its own venv, .venv-eda, with Debian's JDK 17) runs
the collection's rulebook, whose source gpuops.fleet.gpuops_watch reads the metrics endpoints of four simulated hosts
(each a real serve.py process) and whose rules run the real restart_vllm.yml and gpu_cleanup.yml on them. One fleet
for the whole file (module fixture): four servers launched by the role, four endpoints; each test starts its own
ansible-rulebook (a fresh budget) and ends it by its PID. Outcomes are read independently: the listener on each
server's port, /proc start times, the simulator's holders, a completion sent to the server, the fake's own counters,
and the audit log the source writes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import typing as t
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ansible_run import BIN, REPO, RESTART, ansible_env, run_playbook
from gpusim.api import free_port, role_host_vars, role_inventory, starttime, wait_for
from readings import holders, listening_pid
from simhost import SimHost

from ansible_collections.gpuops.fleet.plugins.module_utils._http.prometheus import parse

EDA_BIN = REPO / ".venv-eda" / "bin"
RULEBOOK = "gpuops.fleet.gpuops_heal"
SERVE = "ansible_collections.gpuops.fleet.plugins.module_utils._watch.serve"
NAMES = ("gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04")
WATCH_INTERVAL = 5.0  # the endpoint's generation checks: one per server per 5 s
SCRAPE = 2.0  # the source's scrape interval
HOLD_DOWN = 2
MODEL = "zai-org/GLM-5-GGUF"

pytestmark = pytest.mark.timeout(900)


def java_home() -> str:
    for name in ("java-17-openjdk-amd64", "java-17-openjdk-arm64"):
        if (Path("/usr/lib/jvm") / name / "bin" / "java").exists():
            return str(Path("/usr/lib/jvm") / name)
    pytest.fail("Debian's openjdk-17-jre-headless is not installed: run `make eda-venv` (the README's test command does)")
    raise AssertionError  # not reached


def server(host: SimHost) -> t.Tuple[int, int]:
    """(PID, start time in ticks) of the process listening on the host's server port."""
    pid = listening_pid(host.port)
    assert pid, "%s: nothing listens on %d" % (host.name, host.port)
    return pid, starttime(pid)


def generates(port: int) -> bool:
    """One completion to the server: whether it answers 200 with text (a dead engine answers 500)."""
    body = json.dumps({"model": MODEL, "prompt": "heal", "max_tokens": 2}).encode()
    request = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status == 200 and bool(json.load(reply).get("choices"))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def successes(port: int) -> float:
    """The fake vLLM's own count of generation requests it served (vllm:request_success_total)."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as reply:
        found = parse(reply.read().decode(), ("vllm:request_success_total",))
    return sum(value for _labels, value in found.get("vllm:request_success_total", []))


def kill_engine(host: SimHost) -> int:
    """The engine of the host's server dies behind its live /health (the fake's engine-dead file, docs/simulator.md)."""
    pid, _start = server(host)
    folder = host.state / "engine-dead"
    folder.mkdir(exist_ok=True)
    (folder / str(pid)).touch()
    return pid


class Fleet:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.hosts: t.List[SimHost] = []
        self.endpoints: t.Dict[str, subprocess.Popen] = {}
        self.ports: t.Dict[str, int] = {}
        self.inventory = root / "inventory.json"

    def host(self, name: str) -> SimHost:
        return next(h for h in self.hosts if h.name == name)

    def start(self) -> None:
        for name in NAMES:
            host = SimHost(name, self.root / "hosts" / name)
            self.hosts.append(host)
            host.gpusim("create")
            host.port = free_port()
        inventory = role_inventory({h.name: role_host_vars(h.state, h.port) for h in self.hosts}, python=str(BIN / "python3"),
                                   vllm_restart_serial="100%", vllm_restart_max_fail_percentage=100)
        self.inventory.write_text(json.dumps(inventory, indent=2))
        launched = run_playbook(RESTART, self.inventory)
        assert launched.returncode == 0, launched.stdout[-5000:]
        for host in self.hosts:
            port = free_port()
            env = host.process_env()
            env["PYTHONPATH"] = os.pathsep.join([str(REPO / ".collections"), env.get("PYTHONPATH", "")])
            log = self.root / ("watch-%s.log" % host.name)
            self.endpoints[host.name] = subprocess.Popen(  # pylint: disable=consider-using-with
                [sys.executable, "-m", SERVE, "--listen", "127.0.0.1", "--port", str(port), "--interval", str(WATCH_INTERVAL),
                 "--host", host.name, "--state-dir", str(host.state / "role"), "--generate-timeout", "5"],
                env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
            self.ports[host.name] = port
            assert wait_for(lambda: "serving" in log.read_text() or self.endpoints[host.name].poll() is not None, timeout=30), log.read_text()
        self.healthy()

    def healthy(self, timeout: float = 120) -> None:
        """Every server answers a completion (what a test leaves behind for the next one)."""
        for host in self.hosts:
            assert wait_for(lambda: listening_pid(host.port) and generates(host.port), timeout=timeout, interval=1), host.name

    def stop(self) -> None:
        for proc in self.endpoints.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        failures = []
        for host in self.hosts:
            done = host.gpusim("cleanup", check=False)
            if done.returncode != 0:
                failures.append("%s: %s %s" % (host.name, done.stdout, done.stderr))
        assert not failures, failures


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> t.Iterator[Fleet]:
    made = Fleet(tmp_path_factory.mktemp("heal"))
    try:
        made.start()
        yield made
    finally:
        made.stop()


class Rulebook:
    """One real ansible-rulebook over the fleet, in its own session, ended by its PID (and its process group)."""

    def __init__(self, fleet: Fleet, folder: Path, **heal: t.Any) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.audit = folder / "audit.jsonl"
        self.log = folder / "rulebook.log"
        settings = {"gpuops_heal_targets": {name: "http://127.0.0.1:%d/metrics" % port for name, port in fleet.ports.items()},
                    "gpuops_heal_interval": SCRAPE, "gpuops_heal_hold_down": HOLD_DOWN, "gpuops_heal_audit_log": str(self.audit)}
        settings.update({"gpuops_heal_%s" % key: value for key, value in heal.items()})
        variables = folder / "heal.json"
        variables.write_text(json.dumps(settings))
        env = ansible_env(JAVA_HOME=java_home(), ANSIBLE_HOME=str(folder / "ansible-home"))
        self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [str(EDA_BIN / "ansible-rulebook"), "-i", str(fleet.inventory), "-r", RULEBOOK, "--vars", str(variables), "-v"],
            env=env, cwd=str(folder), stdout=self.log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        self.started = time.time()
        # a bad rulebook, variable or missing Java ends it within seconds: it must still run after them
        wait_for(lambda: self.proc.poll() is not None, timeout=5, interval=0.5)
        assert self.proc.poll() is None, self.log.read_text()[-5000:]

    def lines(self) -> t.List[t.Dict[str, t.Any]]:
        if not self.audit.exists():
            return []
        return [json.loads(line) for line in self.audit.read_text().splitlines() if line.strip()]

    def decisions(self, action: t.Optional[str] = None) -> t.List[t.Dict[str, t.Any]]:
        return [line for line in self.lines() if line["event"] == "decision" and (action is None or line["action"] == action)]

    def playbooks_done(self, count: int, timeout: float = 300) -> str:
        """The rulebook's log once `count` playbook runs ended in it (a run is never cut off by the test's end)."""
        assert wait_for(lambda: self.log.read_text().count("PLAY RECAP") >= count, timeout=timeout, interval=0.5), self.log.read_text()[-5000:]
        return self.log.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):  # what it started (ansible-playbook) is in its process group
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)


@contextlib.contextmanager
def rulebook(fleet: Fleet, folder: Path, **heal: t.Any) -> t.Iterator[Rulebook]:
    running = Rulebook(fleet, folder, **heal)
    try:
        yield running
    finally:
        running.stop()


def test_dry_run_changes_nothing_then_a_dead_engine_is_healed_the_others_untouched(fleet, tmp_path):
    before = {h.name: server(h) for h in fleet.hosts}
    sick = fleet.host("gpu-node-02")
    dead_pid = kill_engine(sick)
    fault_at = time.time()
    assert not generates(sick.port)  # the canary: the fault is real, /health lives on
    # dry run: the decision is logged, nothing runs
    with rulebook(fleet, tmp_path / "dry", dry_run=True) as dry:
        assert wait_for(lambda: dry.decisions("dry_run"), timeout=WATCH_INTERVAL + (HOLD_DOWN + 3) * SCRAPE + 30, interval=0.5), \
            dry.log.read_text()[-4000:]
        time.sleep(3 * SCRAPE)
        (said,) = dry.decisions("dry_run")  # one: the window (3600 s) holds the next one back
        assert said["host"] == sick.name and said["condition"] == "engine_dead" and said["dry_run"] is True
        assert said["evidence"]["servers"][0]["pid"] == str(dead_pid) and said["evidence"]["servers"][0]["generates"] == 0
        assert "DRY RUN gpu-node-02: engine_dead" in dry.log.read_text()
        assert "PLAY [" not in dry.log.read_text()  # no playbook ran
    assert {h.name: server(h) for h in fleet.hosts} == before and not generates(sick.port)

    # for real: healed, the other three untouched; the probe load on a healthy server is at most one per interval
    counted = {h.name: successes(h.port) for h in fleet.hosts if h is not sick}
    with rulebook(fleet, tmp_path / "real") as real:
        watch_from = time.time()
        assert wait_for(lambda: listening_pid(sick.port) not in (None, dead_pid) and generates(sick.port), timeout=300, interval=0.5), \
            real.log.read_text()[-5000:]
        healed_at = time.time()
        assert wait_for(lambda: [l for l in real.lines() if l["event"] == "finished"], timeout=120, interval=0.5), real.lines()
        watched = time.time() - watch_from
        (decided,) = real.decisions("remediate")
        (finished,) = [l for l in real.lines() if l["event"] == "finished"]
        text = real.playbooks_done(1)
    assert decided["host"] == sick.name and decided["condition"] == "engine_dead" and decided["playbook"] == "gpuops.fleet.restart_vllm"
    assert finished["host"] == sick.name and finished["ok"] is True, finished
    for host in fleet.hosts:
        if host is not sick:
            assert server(host) == before[host.name], host.name
            probes = successes(host.port) - counted[host.name]
            assert probes <= watched / WATCH_INTERVAL + 1, (host.name, probes, watched)
    recap = text.split("PLAY RECAP")[-1]  # the run was limited to the sick host
    assert re.search(r"^gpu-node-02\s+: ok=", recap, re.M) and not re.search(r"^gpu-node-0[134]\s+:", recap, re.M), recap
    new_pid, _start = server(sick)
    assert new_pid != dead_pid
    seconds = healed_at - watch_from
    print("\nself-healing: engine dead -> generating again in %.1f s after the rulebook started (%.1f s after the fault, "
          "dry run included); endpoint interval %g s, scrape %g s, hold-down %d" % (seconds, healed_at - fault_at, WATCH_INTERVAL, SCRAPE, HOLD_DOWN))
    (tmp_path.parent / "heal-seconds.txt").write_text("%.1f\n" % seconds)


def test_an_orphan_is_ended_and_its_gpu_freed_the_server_beside_it_untouched(fleet, tmp_path):
    fleet.healthy()
    before = {h.name: server(h) for h in fleet.hosts}
    host = fleet.host("gpu-node-03")
    tree = host.gpusim_json("vllm", "--tp", "2", "--first-gpu", "2", "--mib", "5000")
    host.gpusim("incident", "--parent", str(tree["parent"]))
    assert wait_for(lambda: len(host.holders(3)) == 1 and host.holders(2) == [], timeout=60)
    orphan = host.holders(3)[0]
    with rulebook(fleet, tmp_path / "rb") as running:
        assert wait_for(lambda: not holders(host)[3], timeout=240, interval=0.5), running.log.read_text()[-5000:]
        assert wait_for(lambda: [l for l in running.lines() if l["event"] == "finished"], timeout=60, interval=0.5), running.lines()
        (decided,) = running.decisions("remediate")
        running.playbooks_done(1)
    assert decided["condition"] == "orphaned_gpu_memory" and decided["playbook"] == "gpuops.fleet.gpu_cleanup"
    assert [h["pid"] for h in decided["evidence"]["holders"]] == [str(orphan)]
    assert starttime(orphan) is None or not os.path.exists("/proc/%d" % orphan)
    assert {h.name: server(h) for h in fleet.hosts} == before
    assert generates(host.port)


def test_the_same_fault_on_four_hosts_restarts_at_most_two_at_once(fleet, tmp_path):
    fleet.healthy()
    dead = {h.name: kill_engine(h) for h in fleet.hosts}
    with rulebook(fleet, tmp_path / "rb", max_hosts=2) as running:
        assert wait_for(lambda: len([l for l in running.lines() if l["event"] == "finished" and l["ok"]]) == 4, timeout=600, interval=1), \
            (running.lines(), running.log.read_text()[-5000:])
        running.playbooks_done(4)
        lines = running.lines()
    spans = {}
    for line in lines:
        if line["event"] == "decision" and line["action"] == "remediate":
            spans[line["host"]] = [line["at"], None]
        elif line["event"] == "finished":
            spans[line["host"]][1] = line["at"]
        assert len(line["running"]) <= 2, line
    assert sorted(spans) == sorted(dead)
    instants = sorted({at for span in spans.values() for at in span})
    for instant in instants:
        at_once = [host for host, (start, end) in spans.items() if start <= instant < end]
        assert len(at_once) <= 2, (instant, spans)
    # the servers' own start times: no more than two new servers started before the first remediation ended
    first_end = min(end for _start, end in spans.values())
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime", encoding="ascii") as uptime:
        boot = time.time() - float(uptime.read().split()[0])
    started = {h.name: boot + server(h)[1] / ticks for h in fleet.hosts}
    assert all(server(h)[0] != dead[h.name] for h in fleet.hosts)
    assert len([name for name, at in started.items() if at < first_end]) <= 2, (started, spans)
    fleet.healthy()


def test_a_host_whose_remediation_keeps_failing_gets_k_tries_then_a_person_is_needed(fleet, tmp_path):
    fleet.healthy()
    host = fleet.host("gpu-node-04")
    # a person's run from another controller holds the server's lock: every remediation meets it and fails, and never
    # interleaves with it (the server is not touched)
    lock = host.state / "role" / ("vllm-%d.lock" % host.port)
    lock.write_text(json.dumps({"token": "person01", "since": time.time(), "play": "Restart vLLM servers, rolling", "owner": "alice",
                                "controller": {"host": "ops-laptop", "user": "alice", "pid": 4242}}))
    try:
        before = server(host)
        dead_pid = kill_engine(host)
        with rulebook(fleet, tmp_path / "rb", max_failures=2, window=1, timeout=40) as running:
            assert wait_for(lambda: running.decisions("person"), timeout=400, interval=1), (running.lines(), running.log.read_text()[-5000:])
            time.sleep(3 * SCRAPE)
            text = running.playbooks_done(2)
            lines = running.lines()
        tries = [l for l in lines if l["event"] == "decision" and l["action"] == "remediate"]
        assert len(tries) == 2, lines
        assert [l["ok"] for l in lines if l["event"] == "finished"] == [False, False]
        person = [l for l in lines if l["event"] == "decision" and l["action"] == "person"]
        assert person and person[0]["evidence"]["servers"][0]["pid"] == str(dead_pid)
        assert text.count("person_needed") >= 1 and "locked by another run" in text, text[-5000:]
        assert server(host) == before and not generates(host.port)  # untouched: the person's run holds it
        assert json.loads(lock.read_text())["token"] == "person01"
    finally:
        lock.unlink()
    healed = run_playbook(RESTART, fleet.inventory, "-e", "vllm_restart_hosts=%s" % host.name)
    assert healed.returncode == 0, healed.stdout[-4000:]
    fleet.healthy()


def test_hostname_is_this_controller():  # the lock above names another controller: it must not be this one
    assert socket.gethostname() != "ops-laptop"
