# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""prepare_hosts.yml over SSH on nodes whose Python has neither nvidia-ml-py nor psutil, and no package index.

Nodes (2 simulated GPUs each): 01 and 02 healthy; 03 with its driver unloaded (nvmlInit fails); 04 with no Python
where gpuops_fleet_host_python points. Each node's environment lies in its own folder. Judged inside the nodes:
what the environment's Python imports (and from where), the wheels on the node, the simulator's own state for the
driver version and the GPU count, and gpu_facts.yml run through the new interpreter.
"""

from __future__ import annotations

import json
import re
import typing as t
from pathlib import Path

from fleetlib import REPO, flat, lifecycle, recap, run_playbook

GPUS = 2
REQUIREMENTS = REPO / "requirements" / "managed-host.txt"
PINS = dict(re.findall(r"(?m)^\s*([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", REQUIREMENTS.read_text()))
# what the environment's Python imports, the version of each pinned package, and where each module lies
READ_VENV = """
import importlib.metadata as m, json, sys
import psutil, pynvml
print(json.dumps({"versions": {name: m.version(name) for name in sys.argv[1:]},
                  "files": [psutil.__file__, pynvml.__file__], "prefix": sys.prefix}))
"""


def sim_driver_version(node_state: Path) -> str:
    """The driver version the simulated host reports (its own `host` file)."""
    for line in (node_state / "host").read_text().splitlines():
        key, _sep, value = line.partition("=")
        if key == "driver_version":
            return value
    raise AssertionError("no driver_version in %s" % (node_state / "host"))


def imports_on_node(fleet, name: str, python: str, *modules: str) -> t.Dict[str, bool]:
    found = {}
    for module in modules:
        found[module] = lifecycle.node_exec(fleet.rec, name, [python, "-c", "import %s" % module]).returncode == 0
    return found


def test_prepare_hosts_offline_from_wheels_then_gpu_facts_through_the_new_python(make_fleet, tmp_path):
    fleet = make_fleet(4, gpus=GPUS)
    n = {i: "gpu-node-%02d" % i for i in range(1, 5)}
    venv = {name: fleet.node(name).path / "venv" for name in fleet.names}
    for name in fleet.names:  # the nodes' Python has neither package
        assert imports_on_node(fleet, name, "/usr/bin/python3", "psutil", "pynvml") == {"psutil": False, "pynvml": False}
    fleet.gpusim(n[3], "driver", "--unload")
    wheels = tmp_path / "wheels"
    host_vars = {name: {"gpuops_fleet_venv": str(venv[name])} for name in fleet.names}
    host_vars[n[4]]["gpuops_fleet_host_python"] = "/opt/no-such-python/bin/python3"
    inventory = fleet.inventory(tmp_path / "inventory.yml", host_vars=host_vars, group_vars={
        "ansible_python_interpreter": "/usr/bin/python3", "gpuops_fleet_wheels_dir": str(wheels)})

    # check mode on fresh nodes: a preview, nothing downloaded, nothing created
    check = run_playbook("prepare_hosts.yml", inventory, "--check", "--limit", "%s,%s,%s" % (n[1], n[2], n[3]))
    assert check.returncode == 0, check.stdout[-3000:]
    for name in (n[1], n[2], n[3]):
        assert "%s: CHECK MODE: would create %s with %s from the wheels of %s" % (
            name, venv[name], " ".join("%s==%s" % pin for pin in PINS.items()), wheels) in flat(check.stdout)
        assert not venv[name].exists(), name
    assert not wheels.exists()

    run = run_playbook("prepare_hosts.yml", inventory)
    out = flat(run.stdout)
    counters = recap(run.stdout)
    assert run.returncode != 0
    assert counters[n[1]]["failed"] == counters[n[2]]["failed"] == 0, run.stdout[-4000:]
    assert counters[n[3]]["failed"] == 1 and counters[n[4]]["failed"] == 1, run.stdout[-4000:]
    # the wheels were downloaded once on the controller and copied to each node that needed them
    downloaded = sorted(path.name for path in wheels.iterdir())
    assert [w.split("-")[0] for w in downloaded] == sorted(name.replace("-", "_") for name in PINS), downloaded
    for name in (n[1], n[2], n[3]):
        assert sorted(path.name for path in (venv[name] / "wheels").iterdir()) == downloaded, name
        python = str(venv[name] / "bin" / "python")
        read = json.loads(fleet.node_exec_out(name, [python, "-c", READ_VENV, *PINS]))
        assert read["versions"] == PINS, (name, read)
        assert read["prefix"] == str(venv[name]) and all(path.startswith(str(venv[name]) + "/") for path in read["files"]), read
    for name in (n[1], n[2]):
        gpus = len(fleet.status(name)["gpus"])
        assert gpus == GPUS
        assert "%s: driver %s, %d GPU(s), read through NVML by %s/bin/python" % (
            name, sim_driver_version(Path(fleet.node(name).gpu_state)), gpus, venv[name]) in out, out[-3000:]
        assert "ansible_python_interpreter: %s/bin/python" % venv[name] in out
    assert re.search(r"%s: NVML does not load through %s/bin/python: NVMLError\w*: Driver Not Loaded" % (n[3], venv[n[3]]),
                     out), out[-3000:]
    assert "%s: no usable Python 3 at /opt/no-such-python/bin/python3 (gpuops_fleet_host_python)" % n[4] in out, out[-3000:]
    assert not venv[n[4]].exists()

    # a rerun changes nothing: no task reports a change, and the installed files are the same files
    site_file = Path(read["files"][0])
    before = site_file.stat().st_mtime_ns
    again = run_playbook("prepare_hosts.yml", inventory, "--limit", "%s,%s" % (n[1], n[2]))
    assert again.returncode == 0, again.stdout[-3000:]
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in recap(again.stdout).values()), again.stdout[-3000:]
    assert set(recap(again.stdout)) == {n[1], n[2]}
    assert site_file.stat().st_mtime_ns == before

    # the collection's modules through the new interpreter: gpu_facts reads the simulated GPUs through NVML
    through_venv = fleet.inventory(tmp_path / "inventory-venv.yml", host_vars={
        name: {"ansible_python_interpreter": "%s/bin/python" % venv[name]} for name in (n[1], n[2])},
        nodes=[n[1], n[2]])
    facts = run_playbook("gpu_facts.yml", through_venv)
    assert facts.returncode == 0, facts.stdout[-3000:]
    for name in (n[1], n[2]):
        assert "%s: %d GPU(s), driver %s, CUDA 13.0 (read through nvml)" % (
            name, GPUS, sim_driver_version(Path(fleet.node(name).gpu_state))) in flat(facts.stdout), facts.stdout[-3000:]
