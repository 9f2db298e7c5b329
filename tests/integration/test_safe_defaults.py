# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 34's defaults and names, through real `ansible-playbook` runs on simulated hosts, as shipped (no
ROLLING_AS_WRITTEN, no forced restart: the command lines are built with playbook_argv).

- restart_vllm.yml rolls one host first, then at most 25 %, and halts at the first batch with a failure; it converges
  (a healthy server with this configuration is left alone); the deprecated vllm_restart_force=true still forces, with a
  deprecation warning.
- become is Ansible's own: -b and ansible_become=true take effect (the become plugin's command runs; the play sets no
  become of its own), the deprecated vllm_restart_become=true too, with a warning.
- no silent tensor-parallel size: unset, it is the number of vllm_server_gpus; with neither, the run is refused before
  anything stops, naming both.
- the preflight fails closed when the environment of the server on the port cannot be read.
- gpu_facts.yml reads the group vllm_servers by default and still reads the deprecated gpu_facts_idle_mib, with a
  warning.

Outcomes are judged by independent readings: the kernel's socket table and /proc, the simulator's GPU holders, the
server's /health, the become command's own log.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import typing as t
from pathlib import Path

from ansible_run import ansible_env, flat, playbook_argv, RESTART
from gpusim.api import pid_alive, starttime
from inventories import role_host_vars, write_role_inventory
from readings import assert_server_owns_gpus, health, holders, listening_pid

AS_SHIPPED = {"vllm_restart_serial": None, "vllm_restart_max_fail_percentage": None, "vllm_server_state": None}
KEY = "sk-unseen-789"


def shipped(playbook: t.Union[str, Path], inventory: Path, *extra: str, timeout: int = 400,
            wrap: t.Sequence[str] = (), env: t.Optional[t.Dict[str, str]] = None) -> "subprocess.CompletedProcess[str]":
    """The playbook with only what the test gives (its defaults as shipped); ``wrap`` runs ansible-playbook under it."""
    argv = list(wrap) + playbook_argv(playbook, inventory, *extra)
    return subprocess.run(argv, env=env or ansible_env(), capture_output=True, text=True, timeout=timeout, check=False)


def deprecations(output: str) -> str:
    """Every deprecation warning of the run, one line each."""
    text = flat(output)
    return " | ".join(part.split("[WARNING]")[0].split("[ERROR]")[0] for part in text.split("[DEPRECATION WARNING]:")[1:])


def test_restart_rolls_one_host_first_halts_at_the_first_failed_batch_and_converges(fleet, tmp_path):
    first, second, third = fleet("gpu-node-01", "gpu-node-02", "gpu-node-03")
    # the second host asks for a GPU it lacks: its preflight fails, before anything is stopped there
    per_host = {second.name: {"vllm_server_tensor_parallel_size": 2, "vllm_server_gpus": [0, 9]}}
    entries = {h.name: role_host_vars(h, h.port, **per_host.get(h.name, {})) for h in (first, second, third)}
    inventory = write_role_inventory(tmp_path / "inventory.json", entries, **AS_SHIPPED)
    run = shipped(RESTART, inventory)
    text = flat(run.stdout)
    assert run.returncode != 0, run.stdout[-4000:]
    batches = run.stdout.split("PLAY [Restart vLLM servers, rolling]")[1:]
    # [1, "25%"] of 3 hosts: one host, then one (a quarter of 3, at least 1), then one
    assert len(batches) == 3, run.stdout[-4000:]
    assert "[gpu-node-01]" in batches[0] and "[gpu-node-02]" not in batches[0] and "[gpu-node-03]" not in batches[0]
    assert "[gpu-node-02]" in batches[1] and "[gpu-node-01]" not in batches[1]
    # the first host runs its server; the failed batch halted the rollout: the third host was never touched
    server, _workers = assert_server_owns_gpus(first, [0], 1)
    assert listening_pid(third.port) is None and all(not pids for pids in holders(third).values())
    assert listening_pid(second.port) is None
    assert "gpu-node-03: not restarted: the rolling restart was halted before this host" in text, text[-3000:]

    # converge by default: the healthy server with this configuration is left alone
    again = shipped(RESTART, inventory, "--limit", first.name)
    assert again.returncode == 0, again.stdout[-4000:]
    assert listening_pid(first.port) == server and pid_alive(server)
    assert deprecations(again.stdout + again.stderr) == ""

    # the deprecated vllm_restart_force=true still forces, with a warning naming the new name and the removal version
    forced = shipped(RESTART, inventory, "--limit", first.name, "-e", "vllm_restart_force=true")
    assert forced.returncode == 0, forced.stdout[-4000:]
    said = deprecations(forced.stdout + forced.stderr)
    assert "vllm_restart_force is deprecated" in said and "vllm_server_state=restarted" in said and "0.3.0" in said, said
    new_server, _workers = assert_server_owns_gpus(first, [0], 1)
    assert new_server != server and not pid_alive(server)


def logging_sudo(path: Path, log: Path) -> Path:
    """A become_exe that logs each command it is given, then runs sudo with it (the become plugin's real command)."""
    path.write_text("#!/bin/sh\necho \"$$ $*\" >> %s\nexec sudo \"$@\"\n" % log)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_become_is_ansible_s_own_and_the_old_variable_still_works(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    log = tmp_path / "became.log"
    exe = logging_sudo(tmp_path / "logging-sudo", log)
    # the tests run as root, as does the local connection: Ansible skips a become to the same user unless told not to
    same_user = ansible_env(ANSIBLE_BECOME_ALLOW_SAME_USER="true")
    entry = role_host_vars(node, node.port, ansible_become_exe=str(exe))
    inventory = write_role_inventory(tmp_path / "inventory.json", {node.name: entry}, **AS_SHIPPED)
    start = shipped(RESTART, inventory, env=same_user)
    assert start.returncode == 0, start.stdout[-4000:]
    assert not log.exists(), "no become asked, yet the become command ran"
    server, _workers = assert_server_owns_gpus(node, [0], 1)

    def became(*extra: str, inventory_path: Path = inventory) -> t.List[str]:
        if log.exists():
            log.unlink()
        run = shipped(RESTART, inventory_path, *extra, env=same_user)
        assert run.returncode == 0, run.stdout[-4000:]
        assert listening_pid(node.port) == server  # converged: the same server
        return (log.read_text().splitlines() if log.exists() else []) + [deprecations(run.stdout + run.stderr)]

    # -b: every task on the host runs through the become command (the module's Python behind sudo)
    *lines, said = became("-b")
    assert any("python" in line for line in lines), lines
    assert said == ""
    # ansible_become=true in the inventory
    entry_become = dict(entry, ansible_become=True)
    with_become = write_role_inventory(tmp_path / "inventory-become.json", {node.name: entry_become}, **AS_SHIPPED)
    *lines, said = became(inventory_path=with_become)
    assert lines and said == "", (lines, said)
    # the deprecated variable still becomes, and says what replaces it
    *lines, said = became("-e", "vllm_restart_become=true")
    assert lines, "vllm_restart_become=true did not become"
    assert "vllm_restart_become is deprecated" in said and "-b, or ansible_become=true" in said and "0.3.0" in said, said


def test_the_size_is_the_number_of_gpus_and_neither_is_refused(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    entry = role_host_vars(node, node.port, vllm_server_tensor_parallel_size=None, vllm_server_gpus=[2, 3])
    inventory = write_role_inventory(tmp_path / "inventory.json", {node.name: entry}, **AS_SHIPPED)
    run = shipped(RESTART, inventory)
    assert run.returncode == 0, run.stdout[-4000:]
    server, _workers = assert_server_owns_gpus(node, [2, 3], 2)
    argv = Path("/proc/%d/cmdline" % int(server)).read_bytes().decode().split("\0")
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2", argv
    before, gpus = starttime(server), holders(node)

    refused = shipped(RESTART, inventory, "-e", json.dumps({"vllm_server_gpus": []}))
    text = flat(refused.stdout)
    assert refused.returncode != 0
    assert "vllm_server_tensor_parallel_size and vllm_server_gpus are both unset" in text, text[-3000:]
    assert pid_alive(server, before) and listening_pid(node.port) == server and health(node.port) == 200
    assert holders(node) == gpus


def masked_environ(pid: int) -> t.List[str]:
    """ansible-playbook in a mount namespace of its own where /proc/PID/environ is a file that not even root may read
    (a write-only sysctl bound over it): the server's command line and sockets are read as always, its environment
    cannot be, as for another user's process without become. The host's /proc is not changed."""
    script = 'mount --bind /proc/sys/vm/compact_memory /proc/%d/environ && exec "$@"' % pid
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "masked"]


def test_an_unreadable_environment_fails_closed(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    entry = role_host_vars(node, node.port, vllm_server_env={"VLLM_API_KEY": KEY})
    inventory = write_role_inventory(tmp_path / "inventory.json", {node.name: entry}, **AS_SHIPPED)
    run = shipped(RESTART, inventory)
    assert run.returncode == 0, run.stdout[-4000:]
    server = int(assert_server_owns_gpus(node, [0], 1)[0])
    before, gpus = starttime(server), holders(node)

    # the new configuration drops the key; the running server's key is in its environment, which cannot be read
    dropped = json.dumps({"vllm_server_env": {"NCCL_PROTO": "LL"}})
    refused = shipped(RESTART, inventory, "-e", dropped, wrap=masked_environ(server))
    text = flat(refused.stdout)
    assert refused.returncode != 0, refused.stdout[-4000:]
    assert ("the environment of the server that listens on port %d (PID %d) cannot be read" % (int(node.port), server)) in text, text[-4000:]
    assert "Run with become (-b, or ansible_become=true in the inventory)" in text and "vllm_server_allow_open=true" in text
    assert KEY not in refused.stdout + refused.stderr
    assert pid_alive(server, before) and listening_pid(node.port) == server and holders(node) == gpus
    assert os.path.exists("/proc/%d/environ" % server) and b"VLLM_API_KEY" in Path("/proc/%d/environ" % server).read_bytes()


def test_gpu_facts_reads_the_servers_group_and_the_old_threshold_name(fleet, tmp_path):
    member, outsider = fleet("gpu-node-01", "gpu-node-02")
    entries = {member.name: role_host_vars(member, member.port)}
    inventory = write_role_inventory(tmp_path / "inventory.json", entries, **AS_SHIPPED)
    # a host outside the group vllm_servers, in the same inventory
    data = json.loads(inventory.read_text())
    data["all"]["hosts"] = {outsider.name: role_host_vars(outsider, outsider.port)}
    inventory.write_text(json.dumps(data))
    run = shipped("gpu_facts.yml", inventory, "-e", "gpu_facts_idle_mib=4096")
    assert run.returncode == 0, run.stdout[-4000:]
    assert "ok: [gpu-node-01]" in run.stdout and "[gpu-node-02]" not in run.stdout, run.stdout[-4000:]
    said = deprecations(run.stdout + run.stderr)
    assert "gpu_facts_idle_mib is deprecated" in said and "gpuops_fleet_idle_threshold_mib" in said and "0.3.0" in said, said
