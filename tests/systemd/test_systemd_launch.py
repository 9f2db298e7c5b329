# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's systemd launch mode end to end, against a real systemd booted in a container of its own.

Real `ansible-playbook playbooks/restart_vllm.yml` runs whose modules execute INSIDE the container (connection
plugin nspawn_nsenter), so the role's `systemctl` talks to the container's systemd, which runs the fake vLLM as
the unit gpuops-NAME.service. The tests run in order, one server's life: launch, an idempotent rerun, a drift that
restarts it, a launch not marked good and the rollback (tests/systemd/rollback.yml) that undoes it, a rollback with
nothing to undo, a rollback with no last-good file, a stop. Every outcome is judged by readings taken inside the container by the test itself (inside.py):
the simulator's view of the GPUs, /proc (PIDs with start times, control groups, environments), systemd's own
`systemctl show`, and GET /health; never by the role's own summary.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest

from ansible_run import ansible_env, BIN, flat, recap, run_playbook
from gpusim.api import FAKE_VLLM, role_host_vars, role_inventory
from inventories import ROLLING_AS_WRITTEN
from nspawn import CACHE, INSIDE_PYTHON, REPO, Container

RESTART = REPO / "playbooks" / "restart_vllm.yml"
ROLLBACK = Path(__file__).resolve().parent / "rollback.yml"  # include_role tasks_from: rollback, as the rollout does
PLUGINS = Path(__file__).resolve().parent / "connection_plugins"
HOST = "gpu-node-01"
STATE = "/srv/gpusim/%s" % HOST  # inside the container, on its own root
PORT = 8000  # the container has a network namespace of its own: nothing else listens there
UNIT = "gpuops-vllm-%d.service" % PORT
GPUS = [2, 3]
CACHES = STATE + "/caches"  # vllm_server_cache_dir (gpusim.api.role_host_vars: the caches with the host's state)
LAST_GOOD = "%s/role/vllm-%d.last-good" % (STATE, PORT)  # the role's last known-good configuration, beside its record
# a new configuration that the rollout's restart launches without marking it good (vllm_server_mark_good: false)
UNMARKED = {"vllm_server_env": {"NCCL_PROTO": "LL128"}, "vllm_server_args": ["--max-model-len", "4096"]}
# what systemd itself puts in each invocation's environment (not the unit's configuration)
PER_INVOCATION = ("INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID")
TIMINGS: t.Dict[str, float] = {}


class Server:
    """What the earlier steps saw, for the later ones (the tests are one server's life, in order)."""

    def __init__(self, box: Container, inventory: Path) -> None:
        self.box = box
        self.inventory = inventory
        self.main: t.Optional[t.Tuple[int, int]] = None  # (MainPID, start time) after the last launch
        self.members: t.Dict[str, t.List[t.Any]] = {}  # the unit's control group after the last launch
        self.good: t.Dict[str, t.Any] = {}  # the last known-good server as read from /proc and systemd, for the rollback

    def playbook(self, step: str, *extra: str, book: Path = RESTART) -> subprocess.CompletedProcess:
        # one nsenter per module run, the module on its stdin (no temporary file)
        env = ansible_env(ANSIBLE_CONNECTION_PLUGINS=str(PLUGINS), ANSIBLE_PIPELINING="1")
        started = time.monotonic()
        proc = run_playbook(book, self.inventory, *extra, env=env)
        TIMINGS[step] = round(time.monotonic() - started, 1)
        return proc

    def snapshot(self, pids: t.Sequence[int] = ()) -> t.Dict[str, t.Any]:
        return self.box.snapshot(UNIT, PORT, STATE, pids, files=[LAST_GOOD])

    def need(self) -> t.Tuple[int, int]:
        if self.main is None:
            pytest.fail("no server was launched by an earlier step (see the first failure)")
        return self.main


def holders(snap: t.Mapping[str, t.Any]) -> t.Dict[int, t.List[int]]:
    return {gpu["index"]: [holder["pid"] for holder in gpu["holders"]] for gpu in snap["gpus"]}


def assert_runs_in_unit(snap: t.Mapping[str, t.Any], output: str) -> None:
    """systemd runs the unit; its main process answers /health; each server GPU is held by one process of its cgroup."""
    context = "%s\n%s" % (json.dumps(snap["systemd"]), output[-3000:])
    assert snap["systemd"].get("ActiveState") == "active", context
    assert snap["systemd"].get("KillMode") == "control-group", context
    assert snap["main_pid"] > 0 and str(snap["main_pid"]) in snap["members"], context
    assert snap["health"] == 200, context
    held = holders(snap)
    for index in GPUS:
        assert len(held[index]) == 1, "GPU %d: %s\n%s" % (index, held[index], context)
        assert str(held[index][0]) in snap["members"], "GPU %d is held by PID %d, outside %s's control group %s" % (
            index, held[index][0], UNIT, sorted(snap["members"]))
    assert not any(held[index] for index in held if index not in GPUS), held


@pytest.fixture(scope="module", name="server")
def server_fixture(container: Container, tmp_path_factory: pytest.TempPathFactory) -> Server:
    """A simulated 8-GPU host inside the container, and an inventory whose one host is the container."""
    container.run([INSIDE_PYTHON, "-m", "gpusim", "create", "--state", STATE])
    fake_vllm = [INSIDE_PYTHON, str(FAKE_VLLM), "serve"]
    inside = role_host_vars(Path(STATE), PORT, ansible_connection="nspawn_nsenter", nspawn_nsenter_leader_pid=container.leader,
                            ansible_python_interpreter=INSIDE_PYTHON, vllm_server_command=fake_vllm,
                            vllm_server_launch_mode="systemd", vllm_server_gpus=GPUS, vllm_server_tensor_parallel_size=len(GPUS))
    inventory = tmp_path_factory.mktemp("systemd") / "inventory.json"
    inventory.write_text(json.dumps(role_inventory({HOST: inside}, python=str(BIN / "python3"), **ROLLING_AS_WRITTEN), indent=2))
    return Server(container, inventory)


def test_launch_writes_and_starts_the_unit(server: Server) -> None:
    before = server.snapshot()
    assert before["unit_file"] is None and before["systemd"].get("ActiveState") == "inactive", before["systemd"]
    run = server.playbook("launch")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert recap(run.stdout)[HOST]["failed"] == 0
    snap = server.snapshot()
    assert snap["unit_file"] is not None and "KillMode=control-group" in snap["unit_file"]
    assert snap["systemd"]["FragmentPath"] == "/etc/systemd/system/" + UNIT
    assert_runs_in_unit(snap, run.stdout)
    # the server and its workers: the API server plus one worker per GPU, all in the unit's control group
    assert len(snap["members"]) >= 1 + len(GPUS), snap["members"]
    assert "NCCL_PROTO" not in snap["main_env"]
    assert snap["is_enabled"] == "enabled", "the unit is not enabled after a launch: it would not come back after a reboot"
    # the unit's server runs with the role's cache places, and its start-up was read from the unit's journal: the fake
    # compiled (its cache root was empty) and said so in its log
    for variable, folder in (("HF_HOME", "huggingface"), ("VLLM_CACHE_ROOT", "vllm"), ("TRITON_CACHE_DIR", "triton"),
                             ("FLASHINFER_WORKSPACE_BASE", "flashinfer")):
        assert snap["main_env"].get(variable) == "%s/%s" % (CACHES, folder), (variable, snap["main_env"])
    assert re.search(r"start-up [0-9.]+ s: weights [^:]*, compile: compiled", flat(run.stdout)), flat(run.stdout)[-3000:]
    server.main = (snap["main_pid"], snap["main_start"])
    server.members = snap["members"]


def test_rerun_with_nothing_to_change_changes_nothing(server: Server) -> None:
    main = server.need()
    run = server.playbook("idempotent rerun", "-e", "vllm_server_state=started")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert recap(run.stdout)[HOST]["changed"] == 0, flat(run.stdout)[-3000:]
    snap = server.snapshot()
    assert (snap["main_pid"], snap["main_start"]) == main, "the rerun replaced the server"
    assert snap["members"] == server.members
    assert_runs_in_unit(snap, run.stdout)


def test_changed_environment_restarts_the_unit(server: Server) -> None:
    old_pid, old_start = server.need()
    old = [int(pid) for pid in server.members]
    run = server.playbook("drift", "-e", "vllm_server_state=started", "-e", json.dumps({"vllm_server_env": {"NCCL_PROTO": "LL"}}))
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert recap(run.stdout)[HOST]["changed"] > 0
    snap = server.snapshot(old)
    assert_runs_in_unit(snap, run.stdout)
    assert (snap["main_pid"], snap["main_start"]) != (old_pid, old_start), "the drift did not restart the server"
    assert snap["main_env"].get("NCCL_PROTO") == "LL", snap["main_env"]
    # NCCL is not in the compile cache's key: the new unit's server loaded the graphs its predecessor compiled, from the
    # cache that outlived the unit's stop (read in its journal)
    assert snap["main_env"].get("VLLM_CACHE_ROOT") == CACHES + "/vllm", snap["main_env"]
    assert re.search(r"start-up [0-9.]+ s: weights [^:]*, compile: cache hit", flat(run.stdout)), flat(run.stdout)[-3000:]
    survivors = [pid for pid, start in snap["alive"].items() if start is not None and start == server.members[pid][0]]
    assert not survivors, "processes of the old server still run: %s" % {pid: server.members[pid] for pid in survivors}
    server.main = (snap["main_pid"], snap["main_start"])
    server.members = snap["members"]
    again = server.playbook("idempotent rerun after the drift", "-e", "vllm_server_state=started", "-e",
                            json.dumps({"vllm_server_env": {"NCCL_PROTO": "LL"}}))
    assert again.returncode == 0 and recap(again.stdout)[HOST]["changed"] == 0, flat(again.stdout)[-3000:]
    assert (server.snapshot()["main_pid"]) == server.main[0]


def configuration(snap: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """What the unit's main process runs, read from /proc and systemd: its argv, the unit's ExecStart, its environment
    (less what systemd sets per invocation)."""
    env = {key: value for key, value in snap["main_env"].items() if key not in PER_INVOCATION}
    return {"argv": snap["main_argv"], "exec_argv": snap["exec_argv"], "env": env}


def survivors_of(snap: t.Mapping[str, t.Any], members: t.Mapping[str, t.List[t.Any]]) -> t.Dict[str, t.List[t.Any]]:
    """The processes of an earlier control group that still run (same PID, same start time)."""
    return {pid: members[pid] for pid, start in snap["alive"].items() if start is not None and start == members[pid][0]}


def test_rollback_relaunches_the_last_good_configuration(server: Server) -> None:
    """A launch held back from being marked good (as the rollout's restart is), then the rollback entry point with
    that new configuration still in the extra vars: the unit runs the last known-good configuration again."""
    server.need()
    good = server.snapshot()
    assert_runs_in_unit(good, "")
    server.good = configuration(good)
    assert server.good["env"].get("NCCL_PROTO") == "LL" and "--max-model-len" not in server.good["argv"], server.good
    assert server.good["exec_argv"] == server.good["argv"], server.good
    kept = good["files"][LAST_GOOD]
    assert kept is not None, "no %s after two launches that passed ready and the check" % LAST_GOOD
    assert kept["mode"] == "0600", kept

    new_vars = dict(UNMARKED, vllm_server_mark_good=False)
    run = server.playbook("launch not marked good", "-e", "vllm_server_state=started", "-e", json.dumps(new_vars))
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    bad = server.snapshot()
    assert_runs_in_unit(bad, run.stdout)
    assert (bad["main_pid"], bad["main_start"]) != (good["main_pid"], good["main_start"]), "the new configuration was not launched"
    assert bad["main_env"].get("NCCL_PROTO") == "LL128" and "4096" in bad["main_argv"], configuration(bad)
    assert bad["files"][LAST_GOOD] == kept, "the launch held back from being marked good changed %s" % LAST_GOOD

    run = server.playbook("rollback", "-e", json.dumps(UNMARKED), book=ROLLBACK)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert recap(run.stdout)[HOST]["changed"] > 0
    snap = server.snapshot([int(pid) for pid in bad["members"]])
    assert_runs_in_unit(snap, run.stdout)
    assert (snap["main_pid"], snap["main_start"]) not in ((bad["main_pid"], bad["main_start"]), (good["main_pid"], good["main_start"]))
    assert configuration(snap) == server.good, "the rollback launched %s, the last good was %s" % (configuration(snap), server.good)
    assert not survivors_of(snap, bad["members"]), "processes of the rolled-back server still run"
    assert snap["files"][LAST_GOOD] == kept, "the rollback changed %s: %s, was %s" % (LAST_GOOD, snap["files"][LAST_GOOD], kept)
    server.main = (snap["main_pid"], snap["main_start"])
    server.members = snap["members"]


def test_rollback_to_the_running_good_configuration_checks_it_only(server: Server) -> None:
    main = server.need()
    # converge, as a rollout's rollback does (the inventory's rolling settings force a restart)
    run = server.playbook("rollback, good one running", "-e", "vllm_server_state=started", "-e", json.dumps(UNMARKED), book=ROLLBACK)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    snap = server.snapshot()
    assert (snap["main_pid"], snap["main_start"]) == main, "the rollback restarted a server that ran the last good configuration"
    assert snap["members"] == server.members
    assert configuration(snap) == server.good
    assert_runs_in_unit(snap, run.stdout)
    # checked again, as a launch is (the check's task ran), not restarted
    assert "action: unchanged" in flat(run.stdout), flat(run.stdout)[-3000:]


def test_rollback_without_a_last_good_file_fails_and_stops_nothing(server: Server) -> None:
    main = server.need()
    aside = LAST_GOOD + ".aside"
    server.box.run(["mv", LAST_GOOD, aside])
    try:
        run = server.playbook("rollback, nothing kept", "-e", "vllm_server_state=started", "-e", json.dumps(UNMARKED), book=ROLLBACK)
        snap = server.snapshot()
    finally:
        server.box.run(["mv", aside, LAST_GOOD])
    assert run.returncode != 0, flat(run.stdout)[-3000:]
    assert "no last known-good configuration is kept for vllm-%d" % PORT in flat(run.stdout), flat(run.stdout)[-3000:]
    assert LAST_GOOD in flat(run.stdout) and "nothing was stopped" in flat(run.stdout), flat(run.stdout)[-3000:]
    assert (snap["main_pid"], snap["main_start"]) == main, "the refused rollback replaced the server"
    assert snap["members"] == server.members
    assert snap["files"][LAST_GOOD] is None
    assert_runs_in_unit(snap, run.stdout)
    assert server.snapshot()["files"][LAST_GOOD] is not None


def plant_in_unit(box: Container, control_group: str) -> int:
    """A process that no reclaim would touch (a plain `sleep`, no GPU), moved into the unit's control group:
    only systemd ending the whole group (KillMode=control-group) ends it."""
    proc = box.run(["/bin/sh", "-c", 'setsid sleep 600 </dev/null >/dev/null 2>&1 & echo "$!"'])
    pid = int(proc.stdout.strip())
    moved = box.run(["/bin/sh", "-c", 'for h in /sys/fs/cgroup /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do '
                     'if [ -f "$h$1/cgroup.procs" ]; then echo "$2" > "$h$1/cgroup.procs" && echo "$h"; fi; done',
                     "sh", control_group, str(pid)])
    assert moved.stdout.strip(), "no hierarchy has %s: %s" % (control_group, moved.stderr)
    return pid


def test_stop_ends_the_whole_control_group_and_frees_the_gpus(server: Server) -> None:
    server.need()
    stranger = plant_in_unit(server.box, server.snapshot()["systemd"]["ControlGroup"])
    before = server.snapshot()
    assert str(stranger) in before["members"], "the planted sleep (%d) is not in the unit's control group" % stranger
    server.members = before["members"]
    old = [int(pid) for pid in server.members]
    assert len(old) >= 2 + len(GPUS)
    run = server.playbook("stop", "-e", "vllm_server_state=stopped")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    snap = server.snapshot(old)
    assert snap["systemd"].get("ActiveState") in ("inactive", "failed"), snap["systemd"]
    assert snap["main_pid"] == 0 and snap["members"] == {}, snap
    survivors = [pid for pid, start in snap["alive"].items() if start is not None and start == server.members[pid][0]]
    assert not survivors, "still running after the stop: %s" % {pid: server.members[pid] for pid in survivors}
    assert snap["alive"][str(stranger)] != before["members"][str(stranger)][0], (
        "the sleep in the unit's control group outlived the stop: the unit was not stopped as a whole (KillMode=control-group)")
    assert all(not pids for pids in holders(snap).values()), holders(snap)
    assert [gpu["used_mib"] for gpu in snap["gpus"]] == [0] * len(snap["gpus"])
    assert snap["health"] == -1
    assert snap["is_enabled"] == "disabled", "a stopped server's unit is still enabled: the next boot would start it"


def test_zz_report_timings(container: Container) -> None:
    """Not a check: writes how long each part took to build/systemd-test/timings.json (and prints it)."""
    timings = dict(container.timings, **TIMINGS)
    (CACHE / "timings.json").write_text(json.dumps(timings, indent=2) + "\n", encoding="utf-8")
    print("systemd test timings (s): %s" % timings, file=sys.stderr)
    assert os.path.exists(CACHE / "timings.json")
