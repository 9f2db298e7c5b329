# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/watch_setup.yml against a real systemd booted in a container of its own (the session's container, see
conftest.py and docs/systemd-test.md): the unit is enabled and active, its endpoint answers from inside the container
with the simulator's GPUs; a rerun changes nothing (same MainPID); a new port restarts it; state=absent stops it and
removes its unit and code. Judged by systemd's own `systemctl show`, /proc and a scrape taken inside by the test."""

from __future__ import annotations

import json
import time
import typing as t
from pathlib import Path

import pytest

from ansible_run import ansible_env, BIN, recap, run_playbook
from gpusim.api import role_host_vars, role_inventory
from nspawn import INSIDE_PYTHON, REPO, Container

PLAYBOOK = REPO / "playbooks" / "watch_setup.yml"
PLUGINS = Path(__file__).resolve().parent / "connection_plugins"
HOST = "gpu-node-05"
STATE = "/srv/gpusim/%s" % HOST
UNIT = "gpuops-watch.service"
SCRAPE = ("import sys, urllib.request\n"
          "print(urllib.request.urlopen('http://127.0.0.1:%s/metrics', timeout=30).read().decode())\n")


def show(box: Container) -> t.Dict[str, str]:
    out = box.run(["systemctl", "show", "--property=ActiveState,UnitFileState,MainPID,LoadState,FragmentPath", UNIT]).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def scrape(box: Container, port: int, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        done = box.run([INSIDE_PYTHON, "-c", SCRAPE % port], check=False, timeout=90)
        if done.returncode == 0:
            return done.stdout
        if time.monotonic() > deadline:
            journal = box.run(["journalctl", "-u", UNIT, "--no-pager"], check=False).stdout[-3000:]
            raise AssertionError("no answer on port %d: %s\n%s" % (port, done.stderr, journal))
        time.sleep(0.5)


@pytest.fixture(scope="module", name="inventory")
def inventory_fixture(container: Container, tmp_path_factory: pytest.TempPathFactory) -> Path:
    container.run([INSIDE_PYTHON, "-m", "gpusim", "create", "--state", STATE])
    container.run([INSIDE_PYTHON, "-m", "gpusim", "orphan", "--state", STATE, "--gpu", "1", "--mib", "4096"])
    inside = role_host_vars(Path(STATE), 8000, ansible_connection="nspawn_nsenter", nspawn_nsenter_leader_pid=container.leader,
                            ansible_python_interpreter=INSIDE_PYTHON, gpuops_watch_python=INSIDE_PYTHON, gpuops_watch_port=9835,
                            gpuops_watch_interval=5)
    path = tmp_path_factory.mktemp("watch") / "inventory.json"
    path.write_text(json.dumps(role_inventory({HOST: inside}, python=str(BIN / "python3")), indent=2))
    return path


def playbook(inventory: Path, *extra: str):
    return run_playbook(PLAYBOOK, inventory, *extra, env=ansible_env(ANSIBLE_CONNECTION_PLUGINS=str(PLUGINS), ANSIBLE_PIPELINING="1"))


def test_the_endpoint_as_a_systemd_service(container: Container, inventory: Path) -> None:
    first = playbook(inventory)
    assert first.returncode == 0, first.stdout[-5000:] + first.stderr[-2000:]
    assert recap(first.stdout)[HOST]["changed"] == 1
    unit = show(container)
    assert unit["ActiveState"] == "active" and unit["UnitFileState"] == "enabled", unit
    assert unit["FragmentPath"] == "/etc/systemd/system/" + UNIT
    main = unit["MainPID"]
    text = scrape(container, 9835)
    assert 'gpuops_gpus{host="gpu-node-05"} 8' in text, text[:2000]
    assert 'gpuops_gpu_memory_by_class_mib{host="gpu-node-05",gpu="1"' in text
    none = [line for line in text.splitlines() if line.startswith("gpuops_gpu_memory_by_class_mib{") and 'gpu="1"' in line
            and 'class="none"' in line]
    assert none and none[0].endswith(" 4096"), none
    cmdline = container.run(["cat", "/proc/%s/cmdline" % main]).stdout.split("\0")
    assert cmdline[:3] == [INSIDE_PYTHON, "-m", "ansible_collections.gpuops.fleet.plugins.module_utils._watch.serve"], cmdline

    again = playbook(inventory)
    assert again.returncode == 0 and recap(again.stdout)[HOST]["changed"] == 0, again.stdout[-3000:]
    assert show(container)["MainPID"] == main

    moved = playbook(inventory, "-e", "gpuops_watch_port=9836")
    assert moved.returncode == 0 and recap(moved.stdout)[HOST]["changed"] == 1, moved.stdout[-3000:]
    after = show(container)
    assert after["ActiveState"] == "active" and after["MainPID"] != main
    assert 'gpuops_gpus{host="gpu-node-05"} 8' in scrape(container, 9836)

    gone = playbook(inventory, "-e", "gpuops_watch_state=absent")
    assert gone.returncode == 0 and recap(gone.stdout)[HOST]["changed"] == 1, gone.stdout[-3000:]
    assert show(container)["LoadState"] == "not-found"
    assert container.run(["test", "-e", "/etc/systemd/system/" + UNIT], check=False).returncode != 0
    assert container.run(["test", "-e", "/opt/gpuops-fleet/watch"], check=False).returncode != 0
    assert container.run(["test", "-e", "/proc/%s" % after["MainPID"]], check=False).returncode != 0
