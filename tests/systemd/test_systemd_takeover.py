# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The README's first day on a real fleet, against the real systemd booted in the container (the session's, shared with
the other files): a vLLM server started by hand under a live shell holds the inventory's port and GPUs, and the inventory
says `vllm_server_launch_mode: systemd`. `--check` previews the takeover and changes nothing; the real run stops the
hand-started tree (its shell lives on) and the role's unit serves instead, enabled. Then a server run by ANOTHER unit on
the same port is refused, naming the unit and vllm_server_takeover_units, and with vllm_server_takeover_units=true that
unit is stopped, disabled and replaced.

A simulated host of its own (gpu-node-03, port 8002, GPUs 6 and 7), sharing nothing with the other files' servers.
Judged by the test's own readings inside the container (inside.py: the socket table's listener, /proc with start times,
`systemctl show` and `is-enabled`, the simulator's GPUs), and the role's summary as words.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
import typing as t
from pathlib import Path

import psutil

from ansible_run import ansible_env, BIN, flat, run_playbook
from gpusim.api import FAKE_VLLM, SIM_LIB_DIR, role_host_vars, role_inventory, wait_for
from gpusim.devices import DEVICE_DIR_ENV
from inventories import ROLLING_AS_WRITTEN
from nspawn import INSIDE_PYTHON, REPO, Container

RESTART = REPO / "playbooks" / "restart_vllm.yml"
PLUGINS = Path(__file__).resolve().parent / "connection_plugins"
HOST = "gpu-node-03"
STATE = "/srv/gpusim/%s" % HOST
PORT = 8002
UNIT = "gpuops-vllm-%d.service" % PORT
OTHER = "other-vllm.service"
GPUS = [6, 7]
MODEL = "zai-org/GLM-5-GGUF"
# the fake `vllm serve` as an operator types it, and the environment that puts its workers on the host's GPUs 6 and 7
SERVE = [INSIDE_PYTHON, str(FAKE_VLLM), "serve", MODEL, "--tensor-parallel-size", str(len(GPUS)), "--port", str(PORT)]
SERVE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LD_LIBRARY_PATH": str(SIM_LIB_DIR), "GPUOPS_SIM_STATE": STATE,
             DEVICE_DIR_ENV: "%s/dev" % STATE, "CUDA_VISIBLE_DEVICES": ",".join(map(str, GPUS)),
             "GPUOPS_SIM_ENGINE_CORE": "1", "GPUOPS_SIM_WORKER_MIB": "8000"}


def playbook(inventory: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_playbook(RESTART, inventory, *extra, env=ansible_env(ANSIBLE_CONNECTION_PLUGINS=str(PLUGINS), ANSIBLE_PIPELINING="1"))


def holders(snap: t.Mapping[str, t.Any]) -> t.Dict[int, t.List[str]]:
    return {gpu["index"]: [str(holder["pid"]) for holder in gpu["holders"]] for gpu in snap["gpus"] if gpu["index"] in GPUS}


def alive(snap: t.Mapping[str, t.Any], started: t.Mapping[str, t.Any]) -> t.List[str]:
    """The PIDs of ``started`` still running with the same start time (``snap`` read with pids=started)."""
    return [pid for pid, start in snap["alive"].items() if start is not None and start == started[pid]]


def ready(snap: t.Mapping[str, t.Any], unit: t.Optional[str] = None) -> bool:
    """The server on the port answers /health and each GPU is held by one process (with ``unit``: its main process listens)."""
    return (snap["health"] == 200 and all(len(pids) == 1 for pids in holders(snap).values())
            and (unit is None or snap["listener"] == snap["main_pid"]))


def serving_from_unit(snap: t.Mapping[str, t.Any]) -> None:
    """The role's unit is active and enabled, its main process is the listener on the port, and each GPU is held by one
    process of its control group."""
    assert snap["systemd"].get("ActiveState") == "active" and snap["is_enabled"] == "enabled", (snap["systemd"], snap["is_enabled"])
    assert snap["main_pid"] > 0 and snap["listener"] == snap["main_pid"], (snap["main_pid"], snap["listener"])
    assert snap["health"] == 200
    assert all(len(pids) == 1 and pids[0] in snap["members"] for pids in holders(snap).values()), (holders(snap), snap["members"])


def test_servers_started_by_hand_and_by_another_unit_are_taken_over_by_the_unit(container: Container, tmp_path: Path) -> None:
    container.run([INSIDE_PYTHON, "-m", "gpusim", "create", "--state", STATE])
    inside = role_host_vars(Path(STATE), PORT, ansible_connection="nspawn_nsenter", nspawn_nsenter_leader_pid=container.leader,
                            ansible_python_interpreter=INSIDE_PYTHON, vllm_server_command=[INSIDE_PYTHON, str(FAKE_VLLM), "serve"],
                            vllm_server_launch_mode="systemd", vllm_server_gpus=GPUS, vllm_server_tensor_parallel_size=len(GPUS),
                            vllm_server_ready_timeout=120)
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps(role_inventory({HOST: inside}, python=str(BIN / "python3"), vllm_server_model=MODEL,
                                                   **ROLLING_AS_WRITTEN), indent=2))

    def snapshot(unit: str = UNIT, pids: t.Iterable[str] = (), facts: t.Sequence[int] = ()) -> t.Dict[str, t.Any]:
        return container.snapshot(unit, PORT, STATE, [int(pid) for pid in pids], facts=facts)

    # a live bash inside the container (entered as every in-container command is) runs the server as its child and
    # stays after it, as a shell in a tmux pane does
    env = ["%s=%s" % item for item in SERVE_ENV.items()]
    with open(tmp_path / "hand.log", "ab") as log:
        shell = subprocess.Popen(container.enter() + ["/usr/bin/env", "-i", *env, "/bin/bash", "-c",  # pylint: disable=consider-using-with
                                                      shlex.join(SERVE) + "; echo server exited $?; sleep infinity"],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert wait_for(lambda: ready(snapshot()), 60, 0.5), (tmp_path / "hand.log").read_text()
        before = snapshot()
        old = before["listener"]
        assert old is not None, before
        hand = before["procs"][str(old)]
        bash = hand["ppid"]
        bash_facts = snapshot(facts=[bash])["procs"][str(bash)]
        assert bash_facts["argv"][:2] == ["/bin/bash", "-c"], bash_facts
        # not any unit's process: its control group is the one nsenter ran in, no `.service` of the container's systemd
        assert ".service" not in hand["cgroup"], hand["cgroup"]
        old_tree = before["listener_tree"]
        assert len(old_tree) >= 4 and all(pids[0] in old_tree for pids in holders(before).values()), (old_tree, holders(before))
        assert before["systemd"].get("ActiveState") == "inactive" and before["unit_file"] is None, before["systemd"]

        check = playbook(inventory, "--check")
        said = flat(check.stdout)
        assert check.returncode == 0, said[-6000:] + check.stderr[-3000:]
        assert "would take over PID %d started by hand in a shell (PID %d (/bin/bash -c" % (old, bash) in said, said[-4000:]
        after_check = snapshot(pids=old_tree)
        assert after_check["listener"] == old and alive(after_check, old_tree) == list(old_tree), "the check run stopped something"
        assert holders(after_check) == holders(before) and after_check["gpus"] == before["gpus"]
        assert after_check["systemd"] == before["systemd"] and after_check["unit_file"] is None, after_check["systemd"]

        run = playbook(inventory)
        said = flat(run.stdout)
        assert run.returncode == 0, said[-6000:] + run.stderr[-3000:]
        snap = snapshot(pids=old_tree, facts=[bash])
        assert alive(snap, old_tree) == [], "left running of the hand-started server: %s" % alive(snap, old_tree)
        assert snap["procs"][str(bash)]["start"] == bash_facts["start"], "the shell of the server taken over was ended"
        serving_from_unit(snap)
        assert not set(snap["members"]) & set(old_tree)
        assert "taken over: PID %d" % old in said and "started by hand in a shell" in said, said[-4000:]

        # ---- a server run by another tool's unit on the same port: refused by default, replaced when allowed
        container.run(["systemctl", "stop", UNIT])
        # another tool's unit, enabled, that starts its server again whenever it ends
        other_unit = "[Service]\n%sExecStart=%s\nRestart=always\nRestartSec=1\n[Install]\nWantedBy=multi-user.target\n" % (
            "".join("Environment=%s\n" % item for item in env), shlex.join(SERVE))
        container.run(["/bin/sh", "-c", 'cat > /etc/systemd/system/"$1" && systemctl daemon-reload && systemctl enable --now "$1"',
                       "sh", OTHER], stdin=other_unit)
        assert wait_for(lambda: ready(snapshot(OTHER), OTHER), 60, 0.5), snapshot(OTHER)
        other = snapshot(OTHER)
        other_tree = other["listener_tree"]
        refused = playbook(inventory)
        said = flat(refused.stdout)
        assert refused.returncode != 0, said[-4000:]
        assert "nothing was stopped" in said and OTHER in said and "vllm_server_takeover_units" in said, said[-4000:]
        still = snapshot(OTHER, pids=other_tree)
        assert alive(still, other_tree) == list(other_tree) and still["systemd"] == other["systemd"], "the refused run stopped something"
        assert still["gpus"] == other["gpus"]

        run = playbook(inventory, "-e", "vllm_server_takeover_units=true")
        said = flat(run.stdout)
        assert run.returncode == 0, said[-6000:] + run.stderr[-3000:]
        gone_other = snapshot(OTHER, pids=other_tree)
        assert gone_other["systemd"].get("ActiveState") == "inactive" and gone_other["main_pid"] == 0, gone_other["systemd"]
        assert other["is_enabled"] == "enabled" and gone_other["is_enabled"] == "disabled", gone_other["is_enabled"]
        assert alive(gone_other, other_tree) == [], "left running of the other unit's server"
        snap = snapshot()
        serving_from_unit(snap)
        assert "taken over: PID %d" % other["main_pid"] in said and OTHER in said, said[-4000:]
        time.sleep(3)  # three of the other unit's RestartSec=: Restart=always did not start it again
        later = snapshot(OTHER)
        assert later["systemd"].get("ActiveState") == "inactive" and later["systemd"].get("NRestarts") == gone_other["systemd"].get("NRestarts")
        assert snapshot()["listener"] == snap["main_pid"]
    finally:
        container.run(["systemctl", "disable", "--now", OTHER], check=False)
        if shell.poll() is None:
            for child in psutil.Process(shell.pid).children(recursive=True):
                child.kill()
            shell.kill()
        shell.wait(10)
