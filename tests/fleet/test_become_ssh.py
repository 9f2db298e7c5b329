# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""become from an unprivileged SSH login (the node's `gpuops` user, sudo without a password), as real fleets log in.

The login runs the managed-host Python and reads the GPUs on its own (as any user of a GPU host can); what it may
not do is end root's processes. So without become gpu_reclaim itself refuses, naming the PIDs; with it, it works.
"""

from __future__ import annotations

import json
import re
import subprocess
import typing as t
from pathlib import Path

import yaml

from fleetlib import BIN, Fleet, ansible_env, flat, run_playbook, summary_lines
from gpusim.fleet import lifecycle
from gpusim.fleet.nodefiles import OPERATOR_UID, OPERATOR_USER

MIB = 60000
PROBE_FILE = "probe.json"
# run by the managed-host Python as the login: who it is, and each GPU's holders as NVML tells it
PROBE = """
import json, os, pwd
import psutil, pynvml
pynvml.nvmlInit()
holders = {}
for index in range(pynvml.nvmlDeviceGetCount()):
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    holders[index] = sorted(p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
with open(os.path.expanduser('~/%s'), 'w', encoding='utf-8') as out:
    json.dump({'user': pwd.getpwuid(os.geteuid()).pw_name, 'holders': holders, 'psutil': psutil.__version__}, out)
""" % PROBE_FILE


def probe_playbook(path: Path) -> Path:
    path.write_text(yaml.safe_dump([{
        "name": "What the unprivileged login does without become",
        "hosts": "gpu_nodes",
        "gather_facts": False,
        "environment": "{{ gpuops_fleet_environment }}",
        "tasks": [
            {"name": "A Python module runs", "ansible.builtin.ping": {}},
            {"name": "The managed-host Python imports pynvml and psutil and reads the GPUs",
             "ansible.builtin.command": {"argv": ["{{ ansible_python_interpreter }}", "-c", PROBE]}},
        ],
    }], sort_keys=False))
    return path


def starttimes(fleet: Fleet, name: str, pids: t.Iterable[int]) -> t.Dict[int, str]:
    """PID -> start time (field 22 of /proc/PID/stat, read inside the node) of those of <pids> that exist."""
    found = {}
    for pid in pids:
        proc = lifecycle.node_exec(fleet.rec, name, ["cat", "/proc/%d/stat" % pid])
        if proc.returncode == 0:
            found[pid] = proc.stdout.rpartition(")")[2].split()[19]
    return found


def as_operator(fleet: Fleet, name: str, argv: t.List[str]) -> subprocess.CompletedProcess:
    """<argv> run inside the node as the unprivileged login (its user and group IDs, no other groups)."""
    ids = ["setpriv", "--reuid=%d" % OPERATOR_UID, "--regid=%d" % OPERATOR_UID, "--clear-groups", "--"]
    return lifecycle.node_exec(fleet.rec, name, ids + argv, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"})


def test_unprivileged_login_with_become_cleans_up_and_restarts(make_fleet, tmp_path):
    fleet = make_fleet(2)
    trees = {name: fleet.incident(name, mib=MIB) for name in fleet.names}
    inventory = fleet.inventory(tmp_path / "inventory.yml", user=OPERATOR_USER, group_vars={"gpu_reclaim_timeout": 5})
    who = subprocess.run([str(BIN / "ansible"), "-i", str(inventory), "gpu_nodes", "-m", "ansible.builtin.raw",
                          "-a", "id -un"], env=ansible_env(), capture_output=True, text=True, timeout=120, check=False)
    assert who.returncode == 0 and who.stdout.count("rc=0 >>\n%s\n" % OPERATOR_USER) == 2, who.stdout

    # the login runs Python modules and the managed-host Python (pynvml, psutil) without become, and reads the GPUs
    probe = run_playbook(str(probe_playbook(tmp_path / "probe.yml")), inventory)
    assert probe.returncode == 0, probe.stdout[-3000:]
    for name in fleet.names:
        written = fleet.node(name).path / "home" / OPERATOR_USER / PROBE_FILE
        assert written.stat().st_uid == OPERATOR_UID
        seen = json.loads(written.read_text())
        assert seen["user"] == OPERATOR_USER
        assert {int(index): pids for index, pids in seen["holders"].items()} == fleet.holders(name), seen

    # root's workers: the login may neither signal them nor read their open files (the device-file evidence)
    workers = [pid for pid in trees["gpu-node-01"]["workers"] if pid in fleet.processes("gpu-node-01")]
    assert len(workers) == 3
    before = starttimes(fleet, "gpu-node-01", workers)
    assert fleet.node_exec_out("gpu-node-01", ["ps", "-o", "user=", "-p", ",".join(map(str, workers))]).split() == ["root"] * 3
    for pid in workers:
        signalled = as_operator(fleet, "gpu-node-01", ["kill", "-0", str(pid)])
        assert signalled.returncode != 0 and "Operation not permitted" in signalled.stderr, signalled.stderr
        listed = as_operator(fleet, "gpu-node-01", ["ls", "/proc/%d/fd" % pid])
        assert listed.returncode != 0 and "Permission denied" in listed.stderr, listed.stderr

    # without become, gpu_reclaim runs, is refused and says so: each worker named, not signalled, none ended
    plain = run_playbook("gpu_cleanup.yml", inventory, "--limit", "gpu-node-01")
    assert plain.returncode != 0
    refused = summary_lines(plain.stdout, "gpu-node-01")
    assert refused.startswith("gpu-node-01: FAILED: GPUs not freed (ended 0 process(es))"), plain.stdout[-3000:]
    for pid in workers:
        assert re.search(r"pid %d holds %d MiB: unverifiable: [^;]*; not signalled" % (pid, MIB), refused), (pid, refused)
    assert "MODULE FAILURE" not in plain.stdout and "deserialization" not in plain.stdout, plain.stdout[-3000:]
    assert starttimes(fleet, "gpu-node-01", workers) == before  # the same processes, all alive
    assert fleet.used("gpu-node-01") == [0, MIB, MIB, MIB]

    # Ansible's own become (-b): the playbook sets none of its own, so it takes effect
    cleanup = run_playbook("gpu_cleanup.yml", inventory, "-b", "--limit", "gpu-node-01")
    assert cleanup.returncode == 0, cleanup.stdout[-3000:]
    assert "gpu-node-01: OK: %d MiB freed, 3 process(es) ended" % (3 * MIB) in flat(cleanup.stdout)
    assert fleet.used("gpu-node-01") == [0, 0, 0, 0]
    assert fleet.holders("gpu-node-01") == {0: [], 1: [], 2: [], 3: []}
    after = starttimes(fleet, "gpu-node-01", workers)
    assert not [pid for pid in workers if after.get(pid) == before[pid]], after  # each one ended

    restart = run_playbook("restart_vllm.yml", inventory, "-b")
    assert restart.returncode == 0, restart.stdout[-3000:]
    for name in fleet.names:
        assert "STARTED" in summary_lines(restart.stdout, name)
        assert fleet.health(name) == 200
        server = fleet.server_record(name)["pid"]
        assert fleet.tree(name)[server][1].startswith(fleet.rec.python)
        owner = fleet.node_exec_out(name, ["ps", "-o", "user=", "-p", str(server)]).strip()
        assert owner == "root", owner
