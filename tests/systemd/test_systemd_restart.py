# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's unit fit for production, against the real systemd booted in the container (the session's, shared with
test_systemd_launch.py): enabled or not as vllm_server_systemd_enabled says, a crash restarted by systemd
(Restart=on-failure), a server that dies at every start reported as a crash loop with its restart count, and the role's
own stop and the undo of a failed launch leaving the unit stopped and disabled (never restarted by systemd).

A second simulated host of its own (gpu-node-02, port 8001, GPUs 4 and 5) so that it shares nothing with the other
file's server. The unit restarts after 2 s and gives up after 3 starts in 60 s, so that a crash loop ends within
seconds. Judged by the test's own readings inside the container (inside.py: `systemctl show`, `systemctl is-enabled`,
/proc, the simulator's GPUs, GET /health), never by the role's summary.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import typing as t
from pathlib import Path

import pytest

from ansible_run import ansible_env, BIN, flat, recap, run_playbook
from gpusim.api import FAKE_VLLM, role_host_vars, role_inventory
from inventories import ROLLING_AS_WRITTEN
from nspawn import INSIDE_PYTHON, REPO, Container

RESTART = REPO / "playbooks" / "restart_vllm.yml"
PLUGINS = Path(__file__).resolve().parent / "connection_plugins"
HOST = "gpu-node-02"
STATE = "/srv/gpusim/%s" % HOST
PORT = 8001
UNIT = "gpuops-vllm-%d.service" % PORT
GPUS = [4, 5]
RESTART_SEC = 2
# the fake vLLM logs vLLM's engine start-up failure 1 s after it starts, ends its workers and exits 1 (docs/simulator.md)
CRASH_AT_START = {"vllm_server_env": {"GPUOPS_SIM_FAIL_AT_START": "crash"}}
# the ready step's failure: the unit waits to be restarted, or (when the tasks between the start and the ready step took
# longer than the whole loop, on a loaded machine) systemd gave up already
CRASH_SAID = (r'FAILED at "Wait for /health and the model on the server": the server unit %s (died and systemd restarts it|is failed)'
              r' \(crash loop: \d+ restarts?, last exit status 1 \(Result=exit-code\)')


class Box:
    def __init__(self, box: Container, inventory: Path) -> None:
        self.box = box
        self.inventory = inventory
        self.main: t.Optional[t.Tuple[int, int]] = None

    def playbook(self, *extra: str) -> subprocess.CompletedProcess:
        return run_playbook(RESTART, self.inventory, *extra, env=ansible_env(ANSIBLE_CONNECTION_PLUGINS=str(PLUGINS), ANSIBLE_PIPELINING="1"))

    def snapshot(self, pids: t.Sequence[int] = ()) -> t.Dict[str, t.Any]:
        return self.box.snapshot(UNIT, PORT, STATE, pids)

    def wait_for(self, what: str, ok: t.Callable[[t.Dict[str, t.Any]], bool], timeout: float = 90) -> t.Dict[str, t.Any]:
        deadline = time.monotonic() + timeout
        snap = self.snapshot()
        while not ok(snap):
            if time.monotonic() > deadline:
                pytest.fail("%s: not within %d s; last reading %s" % (what, timeout, json.dumps(snap["systemd"])))
            time.sleep(0.5)
            snap = self.snapshot()
        return snap


def holders(snap: t.Mapping[str, t.Any]) -> t.Dict[int, t.List[int]]:
    return {gpu["index"]: [holder["pid"] for holder in gpu["holders"]] for gpu in snap["gpus"]}


def gone(snap: t.Mapping[str, t.Any], members: t.Mapping[str, t.List[t.Any]]) -> bool:
    """Every process of an earlier control group ended (or its PID reused by another process)."""
    return all(start is None or start != members[pid][0] for pid, start in snap["alive"].items())


def serving(snap: t.Mapping[str, t.Any]) -> bool:
    """The unit is active, its main process answers /health and each of its GPUs is held by one process of its group."""
    held = holders(snap)
    return (snap["systemd"].get("ActiveState") == "active" and snap["main_pid"] > 0 and snap["health"] == 200
            and all(len(held[index]) == 1 and str(held[index][0]) in snap["members"] for index in GPUS))


def stays_stopped(box: Box, members: t.Mapping[str, t.List[t.Any]]) -> t.Dict[str, t.Any]:
    """The unit is stopped, and still is after three of its RestartSec= (systemd did not start it again)."""
    first = box.snapshot([int(pid) for pid in members])
    time.sleep(3 * RESTART_SEC + 1)
    snap = box.snapshot([int(pid) for pid in members])
    for reading in (first, snap):
        assert reading["systemd"].get("ActiveState") in ("inactive", "failed"), reading["systemd"]
        assert reading["systemd"].get("SubState") != "auto-restart", reading["systemd"]
        assert reading["main_pid"] == 0 and reading["members"] == {}, reading["members"]
    assert snap["systemd"].get("NRestarts") == first["systemd"].get("NRestarts"), (first["systemd"], snap["systemd"])
    assert gone(snap, members), "processes of the stopped unit still run: %s" % members
    assert all(not holders(snap)[index] for index in GPUS), holders(snap)
    assert [gpu["used_mib"] for gpu in snap["gpus"] if gpu["index"] in GPUS] == [0] * len(GPUS)
    assert snap["health"] == -1
    return snap


@pytest.fixture(scope="module", name="box")
def box_fixture(container: Container, tmp_path_factory: pytest.TempPathFactory) -> Box:
    container.run([INSIDE_PYTHON, "-m", "gpusim", "create", "--state", STATE])
    inside = role_host_vars(Path(STATE), PORT, ansible_connection="nspawn_nsenter", nspawn_nsenter_leader_pid=container.leader,
                            ansible_python_interpreter=INSIDE_PYTHON, vllm_server_command=[INSIDE_PYTHON, str(FAKE_VLLM), "serve"],
                            vllm_server_launch_mode="systemd", vllm_server_gpus=GPUS, vllm_server_tensor_parallel_size=len(GPUS),
                            vllm_server_systemd_restart_sec=RESTART_SEC, vllm_server_systemd_start_limit_burst=3,
                            vllm_server_systemd_start_limit_interval_sec=60, vllm_server_ready_timeout=120)
    inventory = tmp_path_factory.mktemp("systemd-restart") / "inventory.json"
    inventory.write_text(json.dumps(role_inventory({HOST: inside}, python=str(BIN / "python3"), **ROLLING_AS_WRITTEN), indent=2))
    return Box(container, inventory)


def test_launch_with_enabled_false_leaves_the_unit_disabled(box: Box) -> None:
    run = box.playbook("-e", "vllm_server_systemd_enabled=false")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    snap = box.snapshot()
    assert serving(snap), snap
    assert snap["is_enabled"] == "disabled", snap["is_enabled"]
    unit = snap["unit_file"]
    assert "Restart=on-failure" in unit and "RestartSec=%d" % RESTART_SEC in unit, unit
    assert "StartLimitBurst=3" in unit and "StartLimitIntervalSec=60" in unit, unit
    box.main = (snap["main_pid"], snap["main_start"])


def test_a_killed_server_is_restarted_by_systemd(box: Box) -> None:
    if box.main is None:
        pytest.fail("no server was launched by the first step")
    before = box.snapshot()
    assert serving(before) and before["systemd"].get("NRestarts") == "0", before["systemd"]
    box.box.run(["/bin/sh", "-c", 'kill -9 "$1"', "sh", str(before["main_pid"])])  # minbase has no kill(1): the shell's
    snap = box.wait_for("a new main process that answers /health after kill -9",
                        lambda s: s["main_pid"] not in (0, before["main_pid"]) and serving(s))
    assert snap["systemd"].get("NRestarts") == "1", snap["systemd"]
    again = box.snapshot([int(pid) for pid in before["members"]])
    assert gone(again, before["members"]), "processes of the killed server still run"
    assert serving(again)
    box.main = (again["main_pid"], again["main_start"])


def test_a_rerun_enables_the_unit_without_restarting_it(box: Box) -> None:
    """vllm_server_systemd_enabled (default true) on a server that already matches: enabled, not restarted; a server that
    systemd restarted once and that answers is no crash loop."""
    if box.main is None:
        pytest.fail("no server ran after the earlier steps")
    run = box.playbook("-e", "vllm_server_state=started")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert recap(run.stdout)[HOST]["changed"] == 1, flat(run.stdout)[-3000:]
    assert "crash loop" not in run.stdout and "%s: UNCHANGED:" % HOST in flat(run.stdout), flat(run.stdout)[-3000:]
    snap = box.snapshot()
    assert (snap["main_pid"], snap["main_start"]) == box.main, "the server was restarted to enable its unit"
    assert snap["is_enabled"] == "enabled", snap["is_enabled"]
    assert serving(snap)


# one short completion sent inside the container to the server on PORT: prints its HTTP status, then its body
COMPLETE = """
import json, sys, urllib.error, urllib.request
request = urllib.request.Request("http://127.0.0.1:%s/v1/completions" % sys.argv[1], headers={"Content-Type": "application/json"},
                                 data=json.dumps({"model": sys.argv[2], "prompt": "hello", "max_tokens": 3, "ignore_eos": True}).encode())
try:
    with urllib.request.urlopen(request, timeout=30) as reply:
        print(reply.status); print(reply.read().decode())
except urllib.error.HTTPError as error:
    print(error.code); print(error.read().decode())
"""


def complete(box: Box) -> t.Tuple[int, str]:
    model = json.loads(box.inventory.read_text())["all"]["vars"]["vllm_server_model"]
    status, body = box.box.run([INSIDE_PYTHON, "-c", COMPLETE, str(PORT), model]).stdout.split("\n", 1)
    return int(status), body


def test_a_rerun_replaces_a_unit_whose_engine_died(box: Box) -> None:
    """The rule of process mode (tests/integration/test_role_faults.py) with a unit: the fake's engine core dies after 2
    completions (the ready step's, then the test's own); a rerun with vllm_server_state=started finds /health answering
    but the completion refused (EngineDeadError) and restarts the unit, and the new main process generates."""
    dying = json.dumps({"vllm_server_env": {"GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS": "2"}})
    run = box.playbook("-e", dying)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    before = box.snapshot()
    assert serving(before), before
    status, body = complete(box)
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] >= 1, body
    rerun = box.playbook("-e", "vllm_server_state=started", "-e", dying)
    assert rerun.returncode == 0, rerun.stdout[-6000:] + rerun.stderr[-3000:]
    said = flat(rerun.stdout)
    assert re.search(r"%s: RESTARTED \(the running server does not generate: HTTP 500.{0,800}?EngineDeadError" % HOST, said), said[-4000:]
    snap = box.snapshot([int(pid) for pid in before["members"]])
    assert serving(snap) and snap["main_pid"] != before["main_pid"], snap
    assert gone(snap, before["members"]), "processes of the replaced server still run"
    status, body = complete(box)
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] >= 1, body


def test_the_role_stop_leaves_the_unit_stopped_and_disabled(box: Box) -> None:
    before = box.snapshot()
    assert serving(before)
    run = box.playbook("-e", "vllm_server_state=stopped")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    snap = stays_stopped(box, before["members"])
    assert snap["is_enabled"] == "disabled", snap["is_enabled"]


def test_a_server_that_dies_at_start_is_a_crash_loop(box: Box) -> None:
    """Kept (vllm_server_keep_failed_server=true): the ready step fails at the first crash, naming the crash loop, not
    at its timeout; systemd restarts it until the start limit; then the status of a check run names the crash loop and
    systemd's own count of restarts."""
    started = time.monotonic()
    run = box.playbook("-e", json.dumps(dict(CRASH_AT_START, vllm_server_keep_failed_server=True)))
    took = time.monotonic() - started
    assert run.returncode != 0, flat(run.stdout)[-3000:]
    said = flat(run.stdout)
    assert re.search(CRASH_SAID % re.escape(UNIT), said), said[-4000:]
    assert took < 100, "the failed start was seen only after %.0f s (the ready timeout is 120 s)" % took
    failed = box.wait_for("systemd giving up on the crashing server (start limit)",
                          lambda s: s["systemd"].get("ActiveState") == "failed", timeout=90)
    # systemd 252 keeps the last run's Result (exit-code) when it refuses the next start; newer ones say start-limit-hit
    result = failed["systemd"].get("Result")
    assert result in ("exit-code", "start-limit-hit"), failed["systemd"]
    restarts = int(failed["systemd"]["NRestarts"])
    assert restarts >= 2, failed["systemd"]
    assert failed["is_enabled"] == "enabled", failed["is_enabled"]

    check = box.playbook("--check", "-e", "vllm_server_state=started", "-e", json.dumps(CRASH_AT_START))
    assert check.returncode == 0, check.stdout[-6000:] + check.stderr[-3000:]
    shown = flat(check.stdout)
    expected = "crash loop: %d restarts, last exit status 1 (Result=%s); systemd gave up" % (restarts, result)
    assert "unit %s: %s" % (UNIT, expected) in shown, shown[-4000:]
    assert "no managed server ran (%s)" % expected in shown, shown[-4000:]
    after = box.snapshot()
    assert after["systemd"] == failed["systemd"], "the check run changed the unit: %s, was %s" % (after["systemd"], failed["systemd"])


def test_a_failed_launch_undone_stays_stopped_and_disabled(box: Box) -> None:
    """The same crashing server, undone (the default): the role starts it although systemd gave up on the last one (its
    failed state is cleared first), sees it die, stops it; systemd does not restart it, and the unit is disabled so that
    the next boot does not start it either."""
    before = box.snapshot()
    assert before["systemd"].get("ActiveState") == "failed" and before["is_enabled"] == "enabled", before
    run = box.playbook("-e", json.dumps(CRASH_AT_START))
    assert run.returncode != 0, flat(run.stdout)[-3000:]
    said = flat(run.stdout)
    # the ready step saw the new server die: the start was not refused for the earlier crash loop's start limit (the
    # start task would have failed)
    assert re.search(CRASH_SAID % re.escape(UNIT), said), said[-4000:]
    assert "was stopped and GPU 4, 5 verified free" in said, said[-4000:]
    snap = stays_stopped(box, {})
    assert snap["is_enabled"] == "disabled", snap["is_enabled"]
