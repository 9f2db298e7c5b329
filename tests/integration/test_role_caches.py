# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the server's caches live (the model download directory, vLLM's compiled graphs, Triton's and FlashInfer's
kernels): real `ansible-playbook restart_vllm.yml` runs on a simulated host.

- A server started by hand by another user (uid 65534, nobody, its HOME and HF_HOME in a home of its own) is taken over
  by a server that keeps those places: judged from the new server's /proc/PID/environ, not from the role's words.
- A takeover whose new server could not use the old one's model place (a container run as --user 65534, the model in
  root's private home) is refused before anything stops: the old server lives on with its start time, and the message
  names both places and the variables that decide.
- The role's own places survive its stop: a canary in the compile cache is there after stop and launch, and the new
  server is given the same places.
- --check says where the caches would be and makes nothing.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
import typing as t
from pathlib import Path

import psutil
import pytest

from ansible_run import flat, RESTART, run_playbook
from gpusim.api import FakeVllm, free_port, pid_alive, starttime, wait_for
from inventories import role_host_vars, write_role_inventory
from readings import assert_server_owns_gpus, health, holders, listening_pid
from simhost import SimHost

NOBODY = 65534
WORKER_MIB = 20000
SYSTEM_PYTHON = "/usr/bin/python3"
CACHES = ("HF_HOME", "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE")


def environ(pid: int) -> t.Dict[str, str]:
    """The environment a process started with, as the kernel keeps it."""
    raw = Path("/proc/%d/environ" % pid).read_bytes()
    return dict(item.split("=", 1) for item in raw.decode("utf-8", "replace").split("\0") if "=" in item)


def uid_of(pid: int) -> int:
    return psutil.Process(pid).uids().real


@pytest.fixture
def open_host() -> t.Iterator[SimHost]:
    """A simulated host that another user's processes can use too (its state world-writable, in a directory of its own
    under /tmp, not under pytest's private one); cleaned up and removed after."""
    base = Path(tempfile.mkdtemp(prefix="gpuops-caches-"))
    base.chmod(0o755)
    host = SimHost("gpu-node-01", base / "host")
    try:
        host.gpusim("create")
        for root, dirs, files in os.walk(host.state):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o777)
            for name in files:
                os.chmod(os.path.join(root, name), 0o666)
        host.state.chmod(0o777)
        host.port = free_port()
        host.base = base
        yield host
    finally:
        host.gpusim("cleanup", check=False)
        shutil.rmtree(base, ignore_errors=True)


def inventory_for(tmp_path: Path, host: SimHost, **extra: t.Any) -> Path:
    env = {"GPUOPS_SIM_STATE": str(host.state), "GPUOPS_SIM_WORKER_MIB": str(WORKER_MIB)}
    entries = {host.name: role_host_vars(host, host.port, vllm_server_host_env=env, **extra)}
    return write_role_inventory(tmp_path / "inventory.json", entries, vllm_server_tensor_parallel_size=2)


def start_in_bash(argv: t.Sequence[str], env: t.Mapping[str, str], log: Path, uid: int = 0,
                  cwd: t.Optional[Path] = None) -> "subprocess.Popen[bytes]":
    """A live bash (as ``uid``) that runs ``argv`` as its child and stays after it, as a shell in a pane does."""
    who = {"user": uid, "group": uid, "extra_groups": []} if uid else {}
    with open(log, "ab") as out:
        return subprocess.Popen(["bash", "-c", shlex.join(argv) + "; echo server exited $?; sleep 3600"], env=dict(env),  # pylint: disable=consider-using-with
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=str(cwd) if cwd else None, **who)


def end(proc: "subprocess.Popen[bytes]") -> None:
    """End a process this test started, by its Popen handle (the bash and what it still runs)."""
    if proc.poll() is None:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
    proc.wait(10)


def serving(shell: "subprocess.Popen[bytes]", node: SimHost) -> t.Tuple[int, t.Dict[int, t.Optional[int]]]:
    """The hand-started server below ``shell`` once it answers and its workers hold GPUs 0 and 1: its PID, and its tree
    with start times."""
    assert wait_for(lambda: health(node.port) == 200, 60, 0.1), "the hand-started server never answered /health"
    old = listening_pid(node.port)
    assert old is not None and psutil.Process(old).ppid() == shell.pid, (old, shell.pid)
    assert wait_for(lambda: len(holders(node)[0]) == 1 and len(holders(node)[1]) == 1, 30, 0.1), holders(node)
    pids = [old] + [child.pid for child in psutil.Process(old).children(recursive=True)]
    return old, {pid: starttime(pid) for pid in pids}


def home_of(base: Path, name: str, uid: int, mode: int) -> t.Tuple[Path, Path]:
    """A home directory of ``uid`` (``mode``) with a model in its Hugging Face cache: (home, HF_HOME)."""
    home = base / name
    hf_home = home / ".cache" / "huggingface"
    (hf_home / "hub" / "models--zai-org--GLM-5-GGUF").mkdir(parents=True)
    (hf_home / "hub" / "models--zai-org--GLM-5-GGUF" / "weights.canary").write_text("the weights\n")
    for root, dirs, files in os.walk(home):
        for entry in dirs + files:
            os.chown(os.path.join(root, entry), uid, uid)
    os.chown(home, uid, uid)
    home.chmod(mode)
    return home, hf_home


def test_a_server_started_by_another_user_is_taken_over_by_one_that_keeps_its_caches(open_host, tmp_path):
    if not os.access(SYSTEM_PYTHON, os.X_OK) or os.geteuid() != 0:
        pytest.skip("needs root and %s (a server started as nobody)" % SYSTEM_PYTHON)
    node = open_host
    home, hf_home = home_of(node.base, "home-nobody", NOBODY, 0o700)
    hand = FakeVllm(node, tmp_path / "hand.log", gpus="0,1", port=node.port, worker_mib=WORKER_MIB, engine_core=True,
                    model="zai-org/GLM-5-GGUF")
    env = {key: value for key, value in hand.env.items() if key not in ("XDG_CACHE_HOME",) + CACHES}
    env.update(HOME=str(home), HF_HOME=str(hf_home), USER="nobody", LOGNAME="nobody")
    # the system's python: this one may live in root's private home (the fake vLLM needs only the standard library)
    # with this one's packages (setproctitle), which nobody may read
    argv = [SYSTEM_PYTHON] + list(hand.argv[1:])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), sysconfig.get_paths()["purelib"]]))
    shell = start_in_bash(argv, env, tmp_path / "hand.log", uid=NOBODY, cwd=home)
    try:
        old, old_tree = serving(shell, node)
        assert uid_of(old) == NOBODY
        run = run_playbook(RESTART, inventory_for(tmp_path, node))
        text = flat(run.stdout)
        assert run.returncode == 0, text[-4000:]
        assert [pid for pid, start in old_tree.items() if pid_alive(pid, start)] == [], "the server taken over still runs"
        server = int(assert_server_owns_gpus(node, [0, 1], 2)[0])
        assert server not in old_tree
        got = environ(server)
        # the same places as the server taken over, though the new one runs as root with root's HOME
        assert uid_of(server) == 0 and got.get("HOME") != str(home), (uid_of(server), got.get("HOME"))
        assert got.get("HF_HOME") == str(hf_home), got.get("HF_HOME")
        assert got.get("VLLM_CACHE_ROOT") == str(home / ".cache" / "vllm")
        assert got.get("TRITON_CACHE_DIR") == str(home / ".triton" / "cache")
        assert got.get("FLASHINFER_WORKSPACE_BASE") == str(home)
        assert "HF_HUB_CACHE" not in got, got.get("HF_HUB_CACHE")
        assert (hf_home / "hub" / "models--zai-org--GLM-5-GGUF" / "weights.canary").read_text() == "the weights\n"
        # the role's own places were not made: nothing of the server's is there
        assert not (node.state / "caches").exists()
        assert "caches: kept from the server taken over, PID %s (user nobody): HF_HOME=%s, VLLM_CACHE_ROOT=" % (old, hf_home) in text, text[-4000:]
    finally:
        end(shell)


def test_a_model_the_new_user_could_not_read_is_refused_before_anything_stops(open_host, tmp_path):
    """The new server runs in a container as --user 65534 (nobody); the server on the port keeps its model in root's
    private home. Refused by the preflight, before the stop: the container is never even created."""
    if shutil.which("podman") is None or os.geteuid() != 0:
        pytest.skip("needs root's podman (the container mode's reading)")
    node = open_host
    home, hf_home = home_of(node.base, "home-root", 0, 0o700)
    hand = FakeVllm(node, tmp_path / "hand.log", gpus="0,1", port=node.port, worker_mib=WORKER_MIB, engine_core=True,
                    model="zai-org/GLM-5-GGUF")
    env = {key: value for key, value in hand.env.items() if key not in ("XDG_CACHE_HOME",) + CACHES}
    env.update(HOME=str(home), HF_HOME=str(hf_home))
    shell = start_in_bash(hand.argv, env, tmp_path / "hand.log")
    name = "gpuops-caches-%d" % node.port
    try:
        old, old_tree = serving(shell, node)
        before = node.snapshot()
        inventory = inventory_for(tmp_path, node, vllm_server_launch_mode="container", vllm_server_name=name,
                                  vllm_server_container_name=name, vllm_server_container_image="localhost/gpuops-never-pulled:test",
                                  vllm_server_container_runtime="podman", vllm_server_container_run_options=["--user", str(NOBODY)])
        run = run_playbook(RESTART, inventory)
        text = flat(run.stdout)
        assert run.returncode != 0, text[-4000:]
        assert "nothing was stopped" in text and "keeps its model where the new server's user nobody" in text, text[-4000:]
        # both places, and the variables that decide
        assert "HF_HOME=%s" % hf_home in text and "HF_HOME=%s/caches/huggingface" % node.state in text, text[-4000:]
        assert "vllm_server_env" in text and "--user in vllm_server_container_run_options (%d)" % NOBODY in text, text[-4000:]
        assert [pid for pid, start in old_tree.items() if not pid_alive(pid, start)] == [], "the old server was touched"
        assert listening_pid(node.port) == old and node.snapshot() == before
        assert not (node.state / "caches").exists()
        listed = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True, timeout=60, check=False)
        assert name not in listed.stdout.split(), listed.stdout
    finally:
        end(shell)


def test_the_roles_caches_survive_its_stop_and_check_mode_makes_nothing(open_host, tmp_path):
    node = open_host
    inventory = inventory_for(tmp_path, node)
    caches = node.state / "caches"

    # --check on an empty host: says where the caches would be, makes nothing
    check = run_playbook(RESTART, inventory, "--check")
    text = flat(check.stdout)
    assert check.returncode == 0, text[-4000:]
    assert ("would keep its caches: in vllm_server_cache_dir: HF_HOME=%s/huggingface" % caches) in text, text[-4000:]
    assert "VLLM_CACHE_ROOT=%s/vllm" % caches in text and "TRITON_CACHE_DIR=%s/triton" % caches in text, text[-4000:]
    assert not caches.exists() and listening_pid(node.port) is None

    run = run_playbook(RESTART, inventory)
    assert run.returncode == 0, flat(run.stdout)[-4000:]
    first = int(assert_server_owns_gpus(node, [0, 1], 2)[0])
    first_start = starttime(first)
    for name, sub in (("HF_HOME", "huggingface"), ("VLLM_CACHE_ROOT", "vllm"), ("TRITON_CACHE_DIR", "triton"),
                      ("FLASHINFER_WORKSPACE_BASE", "flashinfer")):
        assert environ(first).get(name) == str(caches / sub), (name, environ(first).get(name))
        assert (caches / sub).is_dir()
    # the fake vLLM compiled into its cache root (its own record); beside its entry, a canary of ours
    compiled = [json.loads(line) for line in (node.state / "startups.jsonl").read_text().splitlines()]
    assert compiled[-1]["compiled"] is True and compiled[-1]["cache_dir"].startswith(str(caches / "vllm")), compiled[-1]
    canary = caches / "vllm" / "torch_compile_cache" / "canary"
    canary.parent.mkdir(parents=True, exist_ok=True)
    canary.write_text("compiled\n")

    stopped = run_playbook(RESTART, inventory, "-e", "vllm_server_state=stopped")
    assert stopped.returncode == 0, flat(stopped.stdout)[-4000:]
    assert wait_for(lambda: listening_pid(node.port) is None, 30, 0.1) and not pid_alive(first, first_start)
    assert canary.read_text() == "compiled\n"

    again = run_playbook(RESTART, inventory)
    assert again.returncode == 0, flat(again.stdout)[-4000:]
    second = int(assert_server_owns_gpus(node, [0, 1], 2)[0])
    assert second != first and environ(second).get("VLLM_CACHE_ROOT") == str(caches / "vllm")
    assert canary.read_text() == "compiled\n"
    # and the new server loaded the graphs its predecessor compiled, from the cache that outlived the stop
    loaded = json.loads((node.state / "startups.jsonl").read_text().splitlines()[-1])
    assert (loaded["pid"], loaded["compiled"], loaded["cache"]) == (second, False, "hit"), loaded
    places = {name: environ(second).get(name) for name in CACHES}

    # a forced restart of the role's own server keeps the same places
    forced = run_playbook(RESTART, inventory, "-e", "vllm_server_state=restarted")
    assert forced.returncode == 0, flat(forced.stdout)[-4000:]
    third = int(assert_server_owns_gpus(node, [0, 1], 2)[0])
    assert third != second and {name: environ(third).get(name) for name in CACHES} == places
    assert "kept from the server that runs now, PID %d (user root)" % second in flat(forced.stdout), flat(forced.stdout)[-3000:]
