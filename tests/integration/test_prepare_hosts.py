# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/prepare_hosts.yml on a local simulated host: bad variables, the package index, check mode when prepared.

The offline install from the controller's wheels, over SSH on nodes without the packages, is tests/fleet's. Here the
host installs from the package index that pip is configured with (the one `make venv` uses).
"""

from __future__ import annotations

import json
import re
import subprocess

from ansible_run import flat, recap, REPO, run_playbook

PINS = dict(re.findall(r"(?m)^\s*([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)",
                       (REPO / "requirements" / "managed-host.txt").read_text()))
VERSIONS = "import importlib.metadata as m, json, sys; print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"


def test_prepare_hosts_refuses_bad_variables_then_installs_from_the_index(make_host, inventory, tmp_path):
    host = make_host("gpu-node-01")
    inv = inventory(host)
    venv = tmp_path / "venv"
    bad = {"gpuops_fleet_venv": "opt/venv", "gpuops_fleet_wheels_dir": "wheels", "gpuops_fleet_pip_args": "--pre",
           "gpuops_fleet_host_python": "python3", "gpuops_fleet_environment": ["LD_LIBRARY_PATH=/x"]}
    refused = run_playbook("prepare_hosts.yml", inv, "-e", json.dumps(bad))
    out = flat(refused.stdout)
    assert refused.returncode != 0
    for message in ("gpuops_fleet_venv must be an absolute, normalised path other than /, not 'opt/venv'",
                    "gpuops_fleet_host_python must be the absolute path of a Python 3 without spaces, not 'python3'",
                    "gpuops_fleet_wheels_dir must be '' (install from the index) or an absolute folder on the controller,"
                    " not 'wheels'",
                    "gpuops_fleet_pip_args must be a list of strings, not '--pre'",
                    "gpuops_fleet_environment must be a dict, not ['LD_LIBRARY_PATH=/x']"):
        assert message in out, out[-3000:]
    assert "TASK [Find the host's Python 3]" not in refused.stdout  # nothing ran on the host

    run = run_playbook("prepare_hosts.yml", inv, "-e", json.dumps({"gpuops_fleet_venv": str(venv)}))
    assert run.returncode == 0, run.stdout[-3000:]
    python = venv / "bin" / "python"
    installed = subprocess.run([str(python), "-c", VERSIONS, *PINS], capture_output=True, text=True, check=True)
    assert json.loads(installed.stdout) == PINS
    driver = dict(line.split("=", 1) for line in (host.state / "host").read_text().splitlines() if "=" in line)
    count = len(host.status()["gpus"])
    said = "gpu-node-01: driver %s, %d GPU(s), read through NVML by %s" % (driver["driver_version"], count, python)
    assert said in flat(run.stdout), run.stdout[-3000:]
    assert "ansible_python_interpreter: %s" % python in flat(run.stdout)

    # check mode on a prepared host: nothing to change, and NVML is still read through the environment
    check = run_playbook("prepare_hosts.yml", inv, "--check", "-e", json.dumps({"gpuops_fleet_venv": str(venv)}))
    assert check.returncode == 0, check.stdout[-3000:]
    assert recap(check.stdout)["gpu-node-01"]["changed"] == 0, check.stdout[-3000:]
    assert said in flat(check.stdout)
