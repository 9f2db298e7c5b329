# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An interrupted run never blocks the next one: real `ansible-playbook playbooks/restart_vllm.yml` runs on a simulated
host, killed (SIGKILL to the playbook's process group) during the drain, the stop and the /health wait, or interrupted
(SIGINT, as a terminal's Ctrl-C) during the /health wait; the rerun at once, without any override, must go ahead and
leave exactly one healthy server. A genuinely concurrent run is still refused, naming the holder.

The kill points are found by independent readings (the lock file, the server's log and record, /metrics, the module
processes below ansible-playbook in /proc), never by sleeping; the outcome is judged by the simulator's own GPU
readings, PID liveness and HTTP answers.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import pwd
import re
import signal
import socket
import subprocess
import threading
import time
import typing as t
from pathlib import Path

import psutil
import pytest

from ansible_run import ansible_env, flat, RESTART, run_playbook, start_playbook
from gpusim.api import pid_alive, starttime
from inventories import inventory_for
from readings import assert_server_owns_gpus, health, holders, running_requests, server_pid
from simhost import hosts_with_ports

PLAY = "Restart vLLM servers, rolling"


@pytest.fixture
def node(make_host):
    return hosts_with_ports(make_host, "gpu-node-01")[0]


def lock_file(host) -> Path:
    return host.state / "role" / ("vllm-%d.lock" % host.port)


def server_log(host) -> Path:
    return host.state / "role" / ("vllm-%d.log" % host.port)


class Stream(threading.Thread):
    """One streamed completion, read until it ends or close() cuts it from the client's side."""

    def __init__(self, port: int, max_tokens: int) -> None:
        super().__init__(daemon=True)
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        self.body = json.dumps({"model": "zai-org/GLM-5-GGUF", "prompt": "hello", "max_tokens": max_tokens, "stream": True,
                                "ignore_eos": True})

    def run(self) -> None:
        try:
            self.conn.request("POST", "/v1/completions", body=self.body, headers={"Content-Type": "application/json"})
            reply = self.conn.getresponse()
            while reply.readline():
                pass
        except (OSError, http.client.HTTPException):  # cut by close(): the point
            pass

    def close(self) -> None:
        if self.conn.sock is not None:
            with contextlib.suppress(OSError):
                self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.join(timeout=30)
        self.conn.close()


class Background:
    """ansible-playbook in its own session (so its process group is its own), output in a file.

    Every process seen below it (its task workers, which call setsid() and so leave its process group, and their
    module processes) is recorded with its start time, and cleanup() ends whatever of them still runs, by PID.
    """

    def __init__(self, inventory: Path, log: Path, env: t.Optional[t.Dict[str, str]] = None) -> None:
        self.log = log
        with open(log, "wb") as out:
            # without pipelining (ansible.cfg turns it on) each module runs from a file named AnsiballZ_<module>.py, which
            # module_runs() reads in /proc; the module calls, and so the kill points, are the same either way
            self.proc = start_playbook(RESTART, inventory, env=dict(env or ansible_env(), ANSIBLE_PIPELINING="False"), stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        self.pgid = os.getpgid(self.proc.pid)
        self.seen: t.Dict[int, t.Optional[int]] = {}

    def note(self, pid: t.Optional[int] = None) -> t.List[psutil.Process]:
        """Record the processes below `pid` (default: ansible-playbook) and return them."""
        try:
            found = psutil.Process(pid or self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        for child in found:
            self.seen.setdefault(child.pid, starttime(child.pid))
        return found

    def module_runs(self, module: str, option: t.Optional[str] = None) -> bool:
        """Whether a run of ``module`` is under way, with ``option`` among its arguments when given (the lock, the stop,
        the launch and the ready step all run vllm_process: its option tells them apart)."""
        for child in self.note():
            try:
                line = " ".join(child.cmdline())
            except psutil.Error:
                continue
            if "AnsiballZ_%s.py" % module in line and (option is None or self._has_option(line, option)):
                return True
        return False

    @staticmethod
    def _has_option(line: str, option: str) -> bool:
        """Whether the AnsiballZ file that ``line`` runs passes the top-level option ``option`` (its arguments are in it)."""
        for word in line.split():
            if word.endswith(".py") and "AnsiballZ_" in word:
                try:
                    return ('"%s": ' % option) in Path(word).read_text(errors="replace")
                except OSError:
                    return False
        return False

    def wait_for(self, what: str, condition: t.Callable[[], bool], timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "the run ended (rc %s) before %s:\n%s" % (self.proc.returncode, what, self.output()[-3000:])
            if condition():
                return
            time.sleep(0.1)
        raise AssertionError("no %s within %d s:\n%s" % (what, timeout, self.output()[-3000:]))

    def send(self, signum: int) -> None:
        self.note()
        os.killpg(self.pgid, signum)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.send(signal.SIGKILL)  # its own process group: ansible-playbook has not been reaped, so the group is its
            self.proc.wait(timeout=30)
        for pid, start in list(self.seen.items()):  # the children of orphaned workers too
            if pid_alive(pid, start):
                self.note(pid)
        for pid, start in self.seen.items():
            if pid_alive(pid, start):
                os.kill(pid, signal.SIGKILL)


def assert_one_healthy_server(host, gpus: t.Sequence[int], tp: int) -> int:
    """The recorded server runs and answers, its own workers hold its GPUs, and nothing else holds any GPU."""
    server, workers = assert_server_owns_gpus(host, gpus, tp)
    others = {index: pids for index, pids in holders(host).items() if index not in gpus and pids}
    assert not others, "GPUs outside the server's are held: %s" % others
    assert not lock_file(host).exists(), "the rerun left its lock"
    del workers
    return server


def _start_drain(host, tmp_path, streams):
    inventory = inventory_for(tmp_path, [host], {host.name: {
        "vllm_server_host_env": {"GPUOPS_SIM_STATE": str(host.state), "GPUOPS_SIM_TOKENS_PER_S": "20"}}},
        vllm_server_drain_timeout=300)
    assert run_playbook(RESTART, inventory).returncode == 0
    client = Stream(host.port, 6000)  # 300 s at 20 tokens/s: it runs until the client goes, after the kill
    streams.append(client)
    client.start()
    deadline = time.monotonic() + 30
    while running_requests(host.port) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running_requests(host.port) == 1, "the streamed request never ran"
    # the drain runs inside the stop's vllm_process call (process mode): that call running while the request still runs
    return inventory, lambda run: run.module_runs("vllm_process", "drain_url") and running_requests(host.port) == 1


def _start_stop(host, tmp_path, streams):
    # workers that ignore SIGTERM, below a server that waits 60 s before it SIGKILLs them itself: the role's stop
    # waits vllm_server_stop_timeout (10 s) for them, then the reclaim ladder
    inventory = inventory_for(tmp_path, [host], {host.name: {
        "vllm_server_host_env": {"GPUOPS_SIM_STATE": str(host.state), "GPUOPS_SIM_IGNORE_SIGTERM": "1",
                                 "GPUOPS_SIM_SHUTDOWN_GRACE_S": "60"}}}, vllm_server_tensor_parallel_size=2)
    assert run_playbook(RESTART, inventory).returncode == 0
    old = server_pid(host)
    assert old is not None

    def stopping(_run) -> bool:
        return pid_alive(old) and "received SIGTERM, shutting down" in server_log(host).read_text(errors="replace")
    return inventory, stopping


def _start_health_wait(host, tmp_path, streams):
    inventory = inventory_for(tmp_path, [host], {host.name: {
        "vllm_server_host_env": {"GPUOPS_SIM_STATE": str(host.state), "GPUOPS_SIM_STARTUP_DELAY_S": "10"}}})
    state = host.state / "role" / ("vllm-%d.json" % host.port)

    def waiting(run) -> bool:
        pid = server_pid(host)
        # the launch's own module run waits first (its wait option), then the ready step's runs (their ready option)
        return state.exists() and pid is not None and pid_alive(pid) and health(host.port) != 200 and (
            run.module_runs("vllm_process", "wait") or run.module_runs("vllm_process", "ready"))
    return inventory, waiting


@pytest.mark.timeout(600)  # three playbook runs: slow when the machine is busy
@pytest.mark.parametrize("point, signum, gpus", [
    ("drain", signal.SIGKILL, [0]),
    ("stop", signal.SIGKILL, [0, 1]),
    ("health wait", signal.SIGKILL, [0]),
    ("health wait", signal.SIGINT, [0]),
], ids=["kill-during-drain", "kill-during-stop", "kill-during-health-wait", "ctrl-c-during-health-wait"])
def test_rerun_right_after_an_interrupted_run_goes_ahead(node, tmp_path, point, signum, gpus):
    streams: t.List[Stream] = []
    inventory, reached = {"drain": _start_drain, "stop": _start_stop, "health wait": _start_health_wait}[point](node, tmp_path, streams)
    run = Background(inventory, tmp_path / "interrupted.log")
    try:
        run.wait_for("the lock and the %s" % point, lambda: lock_file(node).exists() and reached(run))
        run.send(signum)
        rc = run.proc.wait(timeout=60)
        if signum == signal.SIGINT:
            assert "User interrupted execution" in run.output(), run.output()[-3000:]
        assert rc != 0
        held = json.loads(lock_file(node).read_text())  # the interrupted run left its lock, naming its ansible-playbook
        assert held["controller"]["pid"] == run.proc.pid and held["controller"]["host"] == socket.gethostname()
        for client in streams:  # its client gives up: the drain of the rerun has nothing to wait for
            client.close()
            deadline = time.monotonic() + 30
            while running_requests(node.port) > 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert running_requests(node.port) == 0, "the server still counts the request whose client went"

        # ansible-core's task workers call setsid(), so the module call that was running goes on without its playbook;
        # let it end, so that what the rerun finds does not depend on a race
        deadline = time.monotonic() + 150
        while any(pid_alive(pid) and starttime(pid) == start for pid, start in run.seen.items()) and time.monotonic() < deadline:
            time.sleep(0.2)
        # the launch's or the ready step's call releases the lock itself once the server is ready and checked: killed during
        # the health wait, that call may still finish the job; killed earlier, the lock stays until a rerun takes it over
        left_locked = lock_file(node).exists()
        assert left_locked or point == "health wait", "the %s's call released a lock it must keep" % point

        again = run_playbook(RESTART, inventory, timeout=240)  # at once, with the default vllm_server_lock_stale_after
        text = flat(again.stdout + again.stderr)  # warnings go to stderr
        assert again.returncode == 0, again.stdout[-4000:]
        took_over = "took over the lock" in text and "ansible-playbook PID %d" % run.proc.pid in text and "no longer runs" in text
        assert took_over == left_locked, text[-3000:]
        assert_one_healthy_server(node, gpus, len(gpus))
    finally:
        for client in streams:
            client.close()
        run.cleanup()


@pytest.mark.timeout(600)
def test_concurrent_run_is_refused_naming_the_holder_and_how_to_override(node, tmp_path):
    # the first run holds the lock while its server starts: 30 s, so that a second ansible-playbook, however slowly a
    # busy machine starts it, meets the lock (6 s was not enough on a loaded 2-core machine); under the ready timeout, 60 s
    inventory = inventory_for(tmp_path, [node], {node.name: {
        "vllm_server_host_env": {"GPUOPS_SIM_STATE": str(node.state), "GPUOPS_SIM_STARTUP_DELAY_S": "30"}}})
    env = {key: value for key, value in ansible_env().items() if key not in ("USER", "LOGNAME", "LNAME", "USERNAME")}
    first = Background(inventory, tmp_path / "first.log", env=env)  # no USER: the user comes from the password database
    try:
        first.wait_for("the first run's lock", lambda: lock_file(node).exists())
        held = json.loads(lock_file(node).read_text())
        assert held["controller"]["pid"] == first.proc.pid and held["controller"]["user"] == pwd.getpwuid(os.getuid()).pw_name
        second = run_playbook(RESTART, inventory)
        text = flat(second.stdout)
        assert first.proc.poll() is None and lock_file(node).exists(), "the first run ended before the second was done"
        assert second.returncode != 0, text[-3000:]
        for needle in ("locked by another run", "%s on controller %s (ansible-playbook PID %d) running '%s'" % (
                pwd.getpwuid(os.getuid()).pw_name, socket.gethostname(), first.proc.pid, PLAY),
                " UTC (for ", "-e vllm_server_lock_stale_after=<seconds>", "rm %s" % lock_file(node),
                "Not taken over automatically: its ansible-playbook PID %d still runs" % first.proc.pid):
            assert needle in text, "%r not in %s" % (needle, text[-3000:])
        assert first.proc.wait(timeout=240) == 0, first.output()[-3000:]
        # a server that the launch's own wait (10 s) did not see ready is waited on by the ready step, saying so
        assert re.search(r"\[%s\] waiting for http://127\.0\.0\.1:%d/health: .* after 1\d s" % (node.name, node.port),
                         first.output()), first.output()[-3000:]
    finally:
        first.cleanup()
    assert_one_healthy_server(node, [0], 1)


@pytest.mark.timeout(600)
def test_lock_of_another_controller_keeps_the_stale_after_rule(node, tmp_path):
    inventory = inventory_for(tmp_path, [node])
    lock = lock_file(node)
    lock.parent.mkdir(parents=True, exist_ok=True)
    dead = subprocess.Popen(["true"])
    dead.wait()  # a PID that surely does not run here: it must not matter, the controller is another one
    lock.write_text(json.dumps({"token": "elsewhere1", "since": time.time() - 30, "play": PLAY, "owner": "bob",
                                "controller": {"host": "ctl-elsewhere", "user": "bob", "pid": dead.pid}}))
    refused = run_playbook(RESTART, inventory)
    text = flat(refused.stdout)
    assert refused.returncode != 0 and "bob on controller ctl-elsewhere (ansible-playbook PID %d)" % dead.pid in text, text[-3000:]
    assert "came from controller ctl-elsewhere" in text
    assert json.loads(lock.read_text())["token"] == "elsewhere1"
    assert not (node.state / "role" / ("vllm-%d.json" % node.port)).exists(), "nothing may start under another run's lock"

    overridden = run_playbook(RESTART, inventory, "-e", "vllm_server_lock_stale_after=5")
    assert overridden.returncode == 0, overridden.stdout[-3000:]
    assert "took over a stale lock" in flat(overridden.stderr) and "ctl-elsewhere" in flat(overridden.stderr)
    assert_one_healthy_server(node, [0], 1)
