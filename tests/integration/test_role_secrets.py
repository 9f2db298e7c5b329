# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Secrets stay secret through a real `ansible-playbook -vvv playbooks/restart_vllm.yml` on a simulated host, and a
server secured with an API key is made ready, checked and benchmarked.

HF_TOKEN in vllm_server_env and `--api-key K` in vllm_server_args: neither value may appear in the play's output
(every module result and its arguments are printed at -vvv), in Ansible's log file, or in any file under the host's
state folder that others can read; yet the server runs with both (read from /proc), answers /v1/models only with
the key (asked here with urllib), and the summary has its checked environment (names only) and a benchmark line.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import typing as t
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from ansible_run import ansible_env, flat, RESTART, run_playbook
from gpusim.api import pid_alive, starttime
from inventories import role_host_vars, write_role_inventory
from readings import health, holders, listening_pid
from simhost import hosts_with_ports

TOKEN = "hf_secret123"
KEY = "sk-secret456"
SECRETS = (TOKEN, KEY)
BENCH = {"vllm_server_benchmark_input_len": 8, "vllm_server_benchmark_output_len": 4, "vllm_server_benchmark_num_requests": 4,
         "vllm_server_benchmark_concurrency": 2, "vllm_server_benchmark_warmup_requests": 1, "vllm_server_benchmark_repeats": 1,
         "vllm_server_benchmark_timeout": 30}


def play(inventory: Path, log: Path, *extra: str) -> subprocess.CompletedProcess:
    """ansible-playbook -vvv, with Ansible's own log file too."""
    return run_playbook(RESTART, inventory, "-vvv", *extra, timeout=400, env=ansible_env(ANSIBLE_LOG_PATH=str(log)))


def models(port: int, key: t.Optional[str]) -> t.Tuple[int, t.Any]:
    request = urllib.request.Request("http://127.0.0.1:%d/v1/models" % port)
    if key is not None:
        request.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def files_with_secrets(root: Path) -> t.Dict[str, int]:
    """Every file under root that holds a secret -> its mode bits."""
    found = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            info = path.lstat()
            if not stat.S_ISREG(info.st_mode):
                continue
            data = path.read_bytes()
            if any(secret.encode() in data for secret in SECRETS):
                found[str(path)] = stat.S_IMODE(info.st_mode)
    return found


def assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, "%s shows %s:\n%s" % (where, secret, text[max(0, text.find(secret) - 1500):text.find(secret) + 300])


def test_restart_with_secrets_shows_none_and_the_keyed_server_is_ready_checked_benchmarked(make_host, tmp_path):
    (node,) = hosts_with_ports(make_host, "gpu-node-01")
    entries = {node.name: role_host_vars(node, node.port, vllm_server_tensor_parallel_size=2,
                                         vllm_server_env={"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL"},
                                         vllm_server_args=["--api-key", KEY, "--max-model-len", "4096"], **BENCH)}
    inventory = write_role_inventory(tmp_path / "inventory.json", entries)
    log = tmp_path / "ansible.log"
    run = play(inventory, log, "-e", "vllm_restart_benchmark=true")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    assert "invocation" in output and "module_args" in output  # -vvv: every module's arguments and result were printed
    assert_no_secret(output, "the play's output")
    assert_no_secret(log.read_text(), "Ansible's log")

    # the secrets were really used: the recorded server runs with them (independent readings: /proc)
    record_file = node.state / "role" / ("vllm-%d.json" % node.port)
    server = json.loads(record_file.read_text())["pid"]
    assert pid_alive(server)
    proc = psutil.Process(server)
    assert proc.environ()["HF_TOKEN"] == TOKEN and proc.environ()["NCCL_PROTO"] == "LL"
    assert proc.cmdline()[proc.cmdline().index("--api-key") + 1] == KEY

    # its two workers hold GPUs 0 and 1 (the simulator's own reading)
    held = {g["index"]: [h["pid"] for h in g["holders"]] for g in node.status()["gpus"]}
    workers = [pid for index in (0, 1) for pid in held[index]]
    assert len(workers) == 2 and all(server in [p.pid for p in psutil.Process(pid).parents()] for pid in workers)

    # the API key guards /v1/* only
    assert health(node.port) == 200
    assert models(node.port, None)[0] == 401 and models(node.port, "sk-wrong")[0] == 401
    status, listing = models(node.port, KEY)
    assert status == 200 and [entry["id"] for entry in listing["data"]] == ["zai-org/GLM-5-GGUF"]

    # nothing that others can read holds a secret (record, log, anything under the host's state folder)
    found = files_with_secrets(node.state)
    assert all(mode & 0o077 == 0 for mode in found.values()), found
    for path in (record_file, node.state / "role" / ("vllm-%d.log" % node.port)):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path

    # the summary: the checked environment by name (a secret's value never), and a benchmark that completed requests
    text = flat(run.stdout)
    assert "HF_TOKEN (secret, as configured)" in text and "NCCL_PROTO=LL" in text, text[-3000:]
    summary = text[text.index("One line per host"):]
    completed = int(summary.split(" completed,", maxsplit=1)[0].rsplit(" ", 1)[1])
    assert "benchmark:" in summary and completed > 0, summary[:3000]
    assert " 0 failed" in summary


def test_a_restart_of_the_keyed_server_shows_no_secret(make_host, tmp_path):
    """The stop of a server started with --api-key (preflight, stop, reclaim of its tree) shows no secret either."""
    (node,) = hosts_with_ports(make_host, "gpu-node-01")
    entries = {node.name: role_host_vars(node, node.port, vllm_server_tensor_parallel_size=1,
                                         vllm_server_env={"HF_TOKEN": TOKEN}, vllm_server_args=["--api-key", KEY])}
    inventory = write_role_inventory(tmp_path / "inventory.json", entries)
    log = tmp_path / "ansible.log"
    first = play(inventory, log)
    assert first.returncode == 0, (first.stdout + first.stderr)[-6000:]
    server = json.loads((node.state / "role" / ("vllm-%d.json" % node.port)).read_text())["pid"]
    again = play(inventory, log)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output[-6000:]
    assert not pid_alive(server) and "RESTARTED" in again.stdout
    assert all(mode & 0o077 == 0 for mode in files_with_secrets(node.state).values())
    assert_no_secret(log.read_text(), "Ansible's log")
    assert_no_secret(output, "the second play's output")


@pytest.mark.parametrize("source", ["VLLM_API_KEY", "vllm_server_api_key"])
def test_key_from_the_environment_or_the_variable_reaches_ready_and_benchmark(make_host, tmp_path, source):
    """VLLM_API_KEY in vllm_server_env keys the server and the role; vllm_server_api_key alone is what the role sends
    (here to a server keyed through vllm_server_host_env, which the role also reads: it must match)."""
    (node,) = hosts_with_ports(make_host, "gpu-node-01")
    extra: t.Dict[str, t.Any] = dict(BENCH, vllm_server_tensor_parallel_size=1)
    if source == "VLLM_API_KEY":
        extra["vllm_server_env"] = {"VLLM_API_KEY": KEY}
    else:
        extra["vllm_server_api_key"] = KEY
        extra["vllm_server_args"] = ["--api-key=" + KEY]
    inventory = write_role_inventory(tmp_path / "inventory.json", {node.name: role_host_vars(node, node.port, **extra)})
    run = play(inventory, tmp_path / "ansible.log", "-e", "vllm_restart_benchmark=true")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    assert_no_secret(output, "the play's output")
    assert models(node.port, None)[0] == 401 and models(node.port, KEY)[0] == 200
    summary = flat(run.stdout)
    assert "benchmark:" in summary and " 0 failed" in summary, summary[-3000:]


def test_a_wrong_key_fails_the_ready_step_at_once_naming_the_option(make_host, tmp_path):
    (node,) = hosts_with_ports(make_host, "gpu-node-01")
    extra = dict(vllm_server_tensor_parallel_size=1, vllm_server_args=["--api-key", KEY], vllm_server_api_key="sk-not-it",
                 vllm_server_ready_timeout=120)
    inventory = write_role_inventory(tmp_path / "inventory.json", {node.name: role_host_vars(node, node.port, **extra)})
    run = play(inventory, tmp_path / "ansible.log")
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert_no_secret(output, "the play's output")
    assert "sk-not-it" not in output
    assert "api_key:" in flat(run.stdout) and "does not accept the API key" in flat(run.stdout), output[-4000:]


def listener_env(port: int) -> t.Tuple[int, int, t.Dict[str, str]]:
    """The process listening on the port (kernel's socket table): its PID, start time and /proc/PID/environ."""
    pid = server_pid_on(port)
    assert pid is not None, "nothing listens on port %d" % port
    raw = Path("/proc/%s/environ" % pid).read_bytes()
    env = dict(item.decode().partition("=")[::2] for item in raw.split(b"\0") if b"=" in item)
    return pid, starttime(pid), env


def server_pid_on(port: int) -> int:
    pid = listening_pid(port)
    assert pid is not None, "nothing listens on port %d" % port
    return pid


def test_env_overrides_keep_the_key_and_a_run_that_would_drop_it_stops_nothing(make_host, tmp_path):
    """A secured server is never opened by accident, on one host:
    (a) -e vllm_server_env_overrides changes one variable and keeps the inventory's VLLM_API_KEY and HF_TOKEN;
    (b) -e vllm_server_env (the whole dict replaced, the key lost) is refused before anything stops, in check mode too;
    (c) a secret (HF_TOKEN) that the new configuration drops is named in a warning, its value never shown;
    (d) vllm_server_allow_open (a boolean) opens it on purpose."""
    (node,) = hosts_with_ports(make_host, "gpu-node-01")
    entries = {node.name: role_host_vars(node, node.port, vllm_server_tensor_parallel_size=1,
                                         vllm_server_env={"VLLM_API_KEY": KEY, "HF_TOKEN": TOKEN, "NCCL_PROTO": "Simple"})}
    inventory = write_role_inventory(tmp_path / "inventory.json", entries)
    log = tmp_path / "ansible.log"

    # (a) the README's way to change one variable: the new server has the override and keeps the inventory's secrets
    run = play(inventory, log, "-e", json.dumps({"vllm_server_env_overrides": {"NCCL_PROTO": "LL"}}))
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    assert_no_secret(output, "the play's output")
    pid, start, env = listener_env(node.port)
    assert env.get("NCCL_PROTO") == "LL" and env.get("VLLM_API_KEY") == KEY and env.get("HF_TOKEN") == TOKEN, sorted(env)
    assert models(node.port, None)[0] == 401 and models(node.port, KEY)[0] == 200
    gpus_before = holders(node)
    assert gpus_before[0], gpus_before

    # (b) the whole dict replaced from the command line: the key would be lost; refused before anything is stopped
    replaced = json.dumps({"vllm_server_env": {"NCCL_PROTO": "LL"}})
    for extra in ((), ("--check",)):
        run = play(inventory, log, "-e", replaced, *extra)
        output = run.stdout + run.stderr
        text = flat(run.stdout)
        assert run.returncode != 0, output[-6000:]
        assert "VLLM_API_KEY" in text and "vllm_server_allow_open" in text and "nothing was stopped" in text, text[-4000:]
        assert_no_secret(output, "the refused play's output %s" % (extra,))
        assert pid_alive(pid, start) and server_pid_on(node.port) == pid, extra
        assert health(node.port) == 200 and models(node.port, KEY)[0] == 200 and models(node.port, None)[0] == 401
        assert holders(node) == gpus_before, extra
    assert_no_secret(log.read_text(), "Ansible's log")

    # (c) HF_TOKEN dropped, the key kept (given on the command line): a warning names HF_TOKEN, never its value
    run = play(inventory, log, "-e", json.dumps({"vllm_server_env": {"VLLM_API_KEY": KEY, "NCCL_PROTO": "LL"}}))
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    assert_no_secret(output, "the play's output")
    warnings = [line for line in flat(output).split("[WARNING]")[1:] if "HF_TOKEN" in line]
    assert warnings and "lacks" in warnings[0], flat(output)[-4000:]
    new_pid, _start, env = listener_env(node.port)
    assert new_pid != pid and not pid_alive(pid, start)
    assert "HF_TOKEN" not in env and env.get("VLLM_API_KEY") == KEY
    assert models(node.port, None)[0] == 401 and models(node.port, KEY)[0] == 200

    # vllm_server_allow_open must be a boolean (argument_specs), and nothing is stopped when it is not
    run = play(inventory, log, "-e", json.dumps({"vllm_server_env": {"NCCL_PROTO": "LL"}, "vllm_server_allow_open": "maybe"}))
    assert run.returncode != 0 and "vllm_server_allow_open" in flat(run.stdout + run.stderr), run.stdout[-3000:]
    assert server_pid_on(node.port) == new_pid and models(node.port, None)[0] == 401
    # (d) with vllm_server_allow_open=true the operator opens the server on purpose
    run = play(inventory, log, "-e", json.dumps({"vllm_server_env": {"NCCL_PROTO": "LL"}, "vllm_server_allow_open": True}))
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    assert_no_secret(output, "the play's output")
    opened, _start, env = listener_env(node.port)
    assert opened != new_pid and "VLLM_API_KEY" not in env and models(node.port, None)[0] == 200
