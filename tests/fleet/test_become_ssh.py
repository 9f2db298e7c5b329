# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""become from an unprivileged SSH login (the node's `gpuops` user, sudo without a password), as real fleets log in."""

from __future__ import annotations

import subprocess

from fleetlib import BIN, ansible_env, flat, run_playbook, summary_lines
from gpusim.fleet.nodefiles import OPERATOR_USER

MIB = 60000


def test_unprivileged_login_with_become_cleans_up_and_restarts(make_fleet, tmp_path):
    fleet = make_fleet(2)
    trees = {name: fleet.incident(name, mib=MIB) for name in fleet.names}
    inventory = fleet.inventory(tmp_path / "inventory.yml", user=OPERATOR_USER, group_vars={"gpu_reclaim_timeout": 5})
    who = subprocess.run([str(BIN / "ansible"), "-i", str(inventory), "gpu_nodes", "-m", "ansible.builtin.raw",
                          "-a", "id -un"], env=ansible_env(), capture_output=True, text=True, timeout=120, check=False)
    assert who.returncode == 0 and who.stdout.count("rc=0 >>\n%s\n" % OPERATOR_USER) == 2, who.stdout

    # without become the login can do nothing to root's GPU holders: the play fails, naming the host, nothing changed
    plain = run_playbook("gpu_cleanup.yml", inventory, "--limit", "gpu-node-01")
    assert plain.returncode != 0
    assert "gpu-node-01: FAILED" in summary_lines(plain.stdout, "gpu-node-01"), plain.stdout[-3000:]
    assert fleet.used("gpu-node-01") == [0, MIB, MIB, MIB]

    cleanup = run_playbook("gpu_cleanup.yml", inventory, "-e", "gpu_cleanup_become=true", "--limit", "gpu-node-01")
    assert cleanup.returncode == 0, cleanup.stdout[-3000:]
    assert "gpu-node-01: OK: %d MiB freed, 3 process(es) ended" % (3 * MIB) in flat(cleanup.stdout)
    assert fleet.used("gpu-node-01") == [0, 0, 0, 0]
    assert not [pid for pid in trees["gpu-node-01"]["workers"] if pid in fleet.processes("gpu-node-01")]

    restart = run_playbook("restart_vllm.yml", inventory, "-e", "vllm_restart_become=true")
    assert restart.returncode == 0, restart.stdout[-3000:]
    for name in fleet.names:
        assert "STARTED" in summary_lines(restart.stdout, name)
        assert fleet.health(name) == 200
        server = fleet.server_record(name)["pid"]
        assert fleet.tree(name)[server][1].startswith(fleet.rec.python)
        owner = fleet.node_exec_out(name, ["ps", "-o", "user=", "-p", str(server)]).strip()
        assert owner == "root", owner
