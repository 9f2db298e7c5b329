# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The README's quick start, as written, on examples/ as shipped, against two simulated hosts.

The commands are parsed out of README.md's first 150 lines (its first shell block with `ansible-playbook` commands,
and the `export` lines of that block), and run from examples/ with the example's inventory and group_vars, vault
included. Over them, an inventory of the test's own (given after the example's, host variables) puts only what a
simulated host on this machine needs instead of a real one: the address and connection (local), a free loopback port
instead of 8000, and the simulator's paths (the virtual environment prepare_hosts makes, the fake NVML, the fake vLLM
in place of /opt/vllm/bin/vllm, the role's state folder). gpu-node-01 runs a vLLM server started by hand in a real
tmux pane, with the vault's key as VLLM_API_KEY in its environment; gpu-node-02's GPUs are idle.

Judged by readings the playbooks did not make: the kernel's socket table (who listens), PID liveness with start times,
the simulator's reading of the GPUs, the prepared environment's own Python, and what the servers answer with and
without the key.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import typing as t
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
import yaml

from ansible_run import ansible_env, BIN, flat, recap, REPO
from gpusim.api import FakeVllm, pid_alive, role_inventory, starttime, wait_for
from inventories import role_host_vars
from readings import assert_server_owns_gpus, health, holders, listening_pid

EXAMPLES = REPO / "examples"
README_LINES = 150
WORKER_MIB = 20000


def quick_start() -> t.Tuple[t.Dict[str, str], t.List[t.List[str]]]:
    """(the block's exports, each ansible-playbook command's words) of the first shell block of README.md's first 150
    lines that runs ansible-playbook; the block must end within those lines."""
    lines = (REPO / "README.md").read_text().splitlines()[:README_LINES]
    text = "\n".join(lines) + "\n"
    for found in re.finditer(r"^```(sh|bash|shell|console)\n(.*?)^```$", text, re.S | re.M):
        body = found.group(2)
        if "ansible-playbook " not in body:
            continue
        exports: t.Dict[str, str] = {}
        commands = []
        for line in body.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["export"]:
                for word in words[1:]:
                    name, value = word.split("=", 1)
                    exports[name] = value
            elif words[:1] == ["ansible-playbook"]:
                commands.append(words)
            elif words:
                raise AssertionError("the quick start runs something this test does not: %s" % line)
        return exports, commands
    raise AssertionError("no shell block with ansible-playbook commands in README.md's first %d lines" % README_LINES)


def vault_key() -> str:
    """The key the example keeps in Ansible Vault, read with the demo password, as ansible-vault shows it."""
    shown = subprocess.run([str(BIN / "ansible-vault"), "view", "--vault-password-file", str(EXAMPLES / "demo-vault-password.txt"),
                            str(EXAMPLES / "group_vars" / "vllm_servers" / "vault.yml")],
                           capture_output=True, text=True, timeout=60, check=True, env=ansible_env())
    key = re.search(r"(?m)^vault_vllm_api_key:\s*(\S+)\s*$", shown.stdout)
    assert key, "vault.yml does not hold vault_vllm_api_key"
    return key.group(1)


def models_status(port: int, key: t.Optional[str]) -> int:
    """GET /v1/models, with `Authorization: Bearer KEY` when a key is given: the HTTP status."""
    request = urllib.request.Request("http://127.0.0.1:%d/v1/models" % port)
    if key is not None:
        request.add_header("Authorization", "Bearer %s" % key)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def tree(pid: int) -> t.Dict[int, t.Optional[int]]:
    """The process and its descendants, each with its start time."""
    pids = [pid] + [child.pid for child in psutil.Process(pid).children(recursive=True)]
    return {p: starttime(p) for p in pids}


def alive(started: t.Mapping[int, t.Optional[int]]) -> t.List[int]:
    return [pid for pid, start in started.items() if pid_alive(pid, start)]


@pytest.fixture
def tmux(tmp_path: Path) -> t.Iterator[t.List[str]]:
    """A tmux server of this test's own (its own socket), killed at the end whatever happens."""
    base = ["tmux", "-S", str(tmp_path / "tmux.sock")]
    yield base
    subprocess.run(base + ["kill-server"], check=False, capture_output=True, timeout=20)


@pytest.mark.timeout(900)
def test_the_readme_quick_start_runs_the_example_as_shipped(fleet, tmp_path, tmux):  # pylint: disable=too-many-locals,too-many-statements
    exports, commands = quick_start()
    playbooks = [[w for w in words if w.startswith("gpuops.fleet.")] for words in commands]
    assert playbooks == [["gpuops.fleet.prepare_hosts"], ["gpuops.fleet.gpu_facts"], ["gpuops.fleet.restart_vllm"],
                         ["gpuops.fleet.restart_vllm"]], commands
    assert "--check" in commands[2] and "--diff" in commands[2] and "--check" not in commands[3], commands
    assert all(words[words.index("-i") + 1] == "inventory.yml" for words in commands), commands

    shipped_inventory = yaml.safe_load((EXAMPLES / "inventory.yml").read_text())
    names = sorted(shipped_inventory["vllm_servers"]["hosts"])
    assert names == ["gpu-node-01", "gpu-node-02"], names
    shipped = yaml.safe_load((EXAMPLES / "group_vars" / "vllm_servers" / "main.yml").read_text())
    assert shipped["vllm_server_port"] == 8000 and shipped["vllm_server_command"][0].startswith("/"), shipped
    assert shipped["ansible_python_interpreter"] == "/opt/gpuops-fleet/venv/bin/python"  # what prepare_hosts makes
    tp = shipped["vllm_server_tensor_parallel_size"]
    key = vault_key()
    assert shipped["vllm_server_env"]["VLLM_API_KEY"] == "{{ vault_vllm_api_key }}"

    node1, node2 = fleet(*names)
    # the simulator's stand-in for /opt/gpuops-fleet/venv, one per host: the simulated hosts share this machine's disk,
    # and two prepare_hosts runs making one venv at once race (one found the other's half-made venv without pip)
    venvs = {node.name: tmp_path / node.name / "venv" for node in (node1, node2)}
    fake_vllm = role_inventory({}, python=str(BIN / "python3"))["all"]["vars"]["vllm_server_command"]
    assert fake_vllm[-1] == shipped["vllm_server_command"][-1] == "serve"
    overlay = {"vllm_servers": {"hosts": {node.name: dict(
        role_host_vars(node, node.port, vllm_server_command=fake_vllm),
        ansible_connection="local", ansible_host="127.0.0.1",
        gpuops_fleet_venv=str(venvs[node.name]), ansible_python_interpreter=str(venvs[node.name] / "bin" / "python"))
        for node in (node1, node2)}}}
    for entry in overlay["vllm_servers"]["hosts"].values():
        # the package index the simulated hosts reach is this machine's: its pip settings, which become's sudo would drop
        entry["gpuops_fleet_environment"].update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})
    substituted = set(overlay["vllm_servers"]["hosts"][node1.name])
    assert substituted == {"gpuops_fleet_environment", "vllm_server_port", "vllm_server_state_dir", "vllm_server_cache_dir", "vllm_server_host_env",
                           "vllm_server_command", "ansible_connection", "ansible_host", "gpuops_fleet_venv",
                           "ansible_python_interpreter"}, substituted
    assert "vllm_server_host_env" not in shipped  # the simulator's variable replaces nothing of the example's
    overlay_path = tmp_path / "simulated-hosts.json"
    overlay_path.write_text(json.dumps(overlay, indent=2))

    env = ansible_env(**{name: value.replace("$PWD", str(EXAMPLES)) for name, value in exports.items()})
    assert Path(env.get("ANSIBLE_VAULT_PASSWORD_FILE", "")).is_file(), exports

    def run(words: t.List[str]) -> "subprocess.CompletedProcess[str]":
        at = words.index("-i")
        argv = [str(BIN / "ansible-playbook")] + words[1:at] + ["-i", "inventory.yml", "-i", str(overlay_path)] + words[at + 2:]
        return subprocess.run(argv, cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=600, check=False)

    # gpu-node-01: `vllm serve` started by hand in a tmux pane, the vault's key in its environment, on the port and GPUs
    hand = FakeVllm(node1, tmp_path / "hand.log", gpus=",".join(str(i) for i in range(tp)), port=node1.port,
                    worker_mib=WORKER_MIB, engine_core=True, model=shipped["vllm_server_model"], env={"VLLM_API_KEY": key})
    pane_command = "bash -c %s" % shlex.quote(shlex.join(hand.argv) + "; exec bash")
    subprocess.run(tmux + ["new-session", "-d", "-s", "vllm", "-x", "200", "-y", "50", pane_command], check=True, env=hand.env,
                   timeout=20)
    pane = int(subprocess.run(tmux + ["display-message", "-p", "-t", "vllm", "#{pane_pid}"], check=True, capture_output=True,
                              text=True, timeout=20).stdout)
    keep = {pane: starttime(pane), psutil.Process(pane).ppid(): starttime(psutil.Process(pane).ppid())}  # the shell, tmux
    assert wait_for(lambda: health(node1.port) == 200, 60, 0.2), hand.log.read_text()[-2000:] if hand.log.exists() else ""
    found = listening_pid(node1.port)
    assert found is not None
    old = int(found)
    assert psutil.Process(old).ppid() == pane
    assert wait_for(lambda: all(len(holders(node1)[i]) == 1 for i in range(tp)), 60, 0.2), holders(node1)
    old_tree = tree(old)
    assert models_status(node1.port, None) == 401 and models_status(node1.port, key) == 200

    # 1. prepare_hosts: the environment the example's interpreter line names, made and working
    prepared = run(commands[0])
    assert prepared.returncode == 0, prepared.stdout[-4000:] + prepared.stderr[-2000:]
    for each in venvs.values():
        imports = subprocess.run([str(each / "bin" / "python"), "-c", "import pynvml, psutil; print('ok')"], capture_output=True,
                                 text=True, timeout=60, check=False)
        assert imports.stdout.strip() == "ok", imports.stderr
        assert "ansible_python_interpreter: %s" % (each / "bin" / "python") in flat(prepared.stdout)

    # 2. gpu_facts: the hand-started server's workers, read through the prepared Python
    facts = run(commands[1])
    text = flat(facts.stdout)
    assert facts.returncode == 0, text[-4000:]
    assert all(str(pid) in text for pid in holders(node1)[0]), text[-4000:]
    assert alive(old_tree) == list(old_tree)

    # 3. restart --check --diff: says it would take the server over, changes nothing
    before = (node1.snapshot(), node2.snapshot())
    check = run(commands[2])
    text = flat(check.stdout)
    assert check.returncode == 0, text[-4000:]
    assert "would take over PID %d" % old in text, text[-4000:]
    assert key not in check.stdout + check.stderr
    assert listening_pid(node1.port) == old and alive(old_tree) == list(old_tree)
    assert listening_pid(node2.port) is None
    assert (node1.snapshot(), node2.snapshot()) == before

    # 4. the restart: the hand-started server replaced by the role's own, which requires the vault's key; so on node 2
    restart = run(commands[3])
    text = flat(restart.stdout)
    assert restart.returncode == 0, text[-6000:]
    assert key not in restart.stdout + restart.stderr
    assert alive(old_tree) == [], "left running: %s" % alive(old_tree)
    assert alive(keep) == list(keep), "the tmux server or its pane's shell was ended"
    assert "taken over: PID %d" % old in text, text[-4000:]
    for node in (node1, node2):
        server, workers = assert_server_owns_gpus(node, range(tp), tp)
        assert server != old and server not in old_tree and not set(workers) & set(old_tree)
        assert models_status(node.port, None) == 401, "the new server on %s answers without the key" % node.name
        assert models_status(node.port, key) == 200
    counts = recap(restart.stdout)
    assert counts[node1.name]["failed"] == 0 and counts[node2.name]["failed"] == 0, counts
    # the summary the README shows for this step: each of its lines begins as the run's own does
    for shown in readme_summary():
        assert shown in text, "the README shows %r; the run printed:\n%s" % (shown, text[-4000:])


def readme_summary() -> t.List[str]:
    """The start of each line of the README's sample summary of the restart (the first text block after the quick start
    commands): the host, then the words before the first value or bracket."""
    text = (REPO / "README.md").read_text()
    after = text[text.index("ansible-playbook -i inventory.yml gpuops.fleet.restart_vllm\n"):]
    block = re.search(r"^```text\n(.*?)^```$", after, re.S | re.M)
    assert block, "no sample summary after the README's quick start"
    starts = []
    for line in block.group(1).splitlines():
        host, _colon, rest = line.partition(": ")
        starts.append("%s: %s" % (host, " ".join(re.split(r"[(\d]", rest, maxsplit=1)[0].split())))
    assert len(starts) >= 3, starts
    return starts
