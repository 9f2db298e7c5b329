# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The listener on a port, its /proc readings, and how it was started (classify, how_started): real processes this test
starts (and ends by their Popen), cgroup strings as systemd, docker, podman and containerd write them, fake /proc trees."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import typing as t

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host import listener as L
from ansible_collections.gpuops.fleet.plugins.module_utils._host.listener import ListenerError, listening_pid, read_cgroup, read_environ
from ansible_collections.gpuops.fleet.tests.unit.plugins.loopback_http import refused_port

psutil = pytest.importorskip("psutil")

# a parent that listens, then forks a child that inherits the socket (as vLLM's engine core does); prints the port
SERVER = """
import os, socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 0)); s.listen()
if os.fork() == 0:
    time.sleep(60); os._exit(0)
print(s.getsockname()[1], flush=True); time.sleep(60)
"""


@pytest.fixture
def started():
    procs = []
    yield procs
    for proc in procs:
        for child in psutil.Process(proc.pid).children() if proc.poll() is None else []:
            child.kill()
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_the_listener_is_the_top_of_the_processes_holding_the_socket(started):
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, env=dict(os.environ, CANARY_VAR="x=y"))
    started.append(proc)
    port = int(proc.stdout.readline())
    deadline = time.monotonic() + 5
    while len(psutil.Process(proc.pid).children()) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert listening_pid(psutil, port) == proc.pid
    assert read_environ(proc.pid)["CANARY_VAR"] == "x=y"
    assert read_cgroup(proc.pid) is not None


def test_nothing_listening_is_none():
    with refused_port() as port:
        assert listening_pid(psutil, port) is None


def test_two_unrelated_listeners_are_an_error(started):
    code = ("import socket, sys, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1);"
            "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); print('ok', flush=True); time.sleep(60)")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        started.extend(subprocess.Popen([sys.executable, "-c", code, str(port)], stdout=subprocess.PIPE) for side in "ab")
        assert [proc.stdout.readline().strip() for proc in started] == [b"ok", b"ok"]
    with pytest.raises(ListenerError, match="port %d: 2 unrelated" % port):
        listening_pid(psutil, port)


def test_readings_of_a_missing_pid_are_none(tmp_path):
    assert read_environ(4242, proc_root=str(tmp_path)) is None
    assert read_cgroup(4242, proc_root=str(tmp_path)) is None


def test_cgroup_prefers_the_unified_hierarchy(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text("12:pids:/user.slice\n1:name=systemd:/system.slice/x.service\n0::/system.slice/vllm.service\n")
    assert read_cgroup(7, proc_root=str(tmp_path)) == "/system.slice/vllm.service"
    (tmp_path / "7" / "cgroup").write_text("12:pids:/a\n1:name=systemd:/system.slice/x.service\n")
    assert read_cgroup(7, proc_root=str(tmp_path)) == "/system.slice/x.service"


SERVE = ["/opt/vllm/bin/python", "/opt/vllm/bin/vllm", "serve", "org/model", "--port", "8000", "--api-key", "sk-secret"]


BASH = L.Proc(4100, "bash", ["-bash"])


SSHD = L.Proc(4000, "sshd", ["sshd: alice@pts/0"])


INIT = L.Proc(1, "systemd", ["/sbin/init"])


TMUX = L.Proc(3000, "tmux: server", ["tmux", "new", "-s", "llm"])


SCREEN = L.Proc(3100, "screen", ["SCREEN", "-S", "llm"])


USER_SCOPE = "/user.slice/user-1000.slice/session-3.scope"


def adopts(proc: L.Proc) -> bool:
    return proc.pid == 1 or proc.name == "systemd"


@pytest.mark.parametrize("cgroup, container", [
    ("/system.slice/docker-4f1c2a9e8b7d6c5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f.scope", "docker 4f1c2a9e8b7d"),
    ("/docker/4f1c2a9e8b7d6c5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f", "docker 4f1c2a9e8b7d"),
    ("/machine.slice/libpod-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope/container",
     "podman 0123456789ab"),
    ("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope",
     "podman 0123456789ab"),
    ("/kubepods.slice/kubepods-burstable.slice/cri-containerd-89abcdef0123456789abcdef0123456789abcdef0123456789abcdef01234567.scope",
     "containerd 89abcdef0123"),
    ("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/"
     "crio-89abcdef0123456789abcdef0123456789abcdef0123456789abcdef01234567.scope", "crio 89abcdef0123"),
    ("/kubepods/burstable/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/89abcdef0123456789abcdef0123456789abcdef0123456789abcdef01234567",
     "kubernetes 89abcdef0123"),
])
def test_a_container_is_named_by_its_runtime_and_short_id_whatever_its_parents(cgroup, container):
    started = L.classify(cgroup, [BASH, TMUX, INIT], adopts=adopts)
    assert (started.how, started.container) == (L.CONTAINER, container)
    assert container in started.words and started.how not in L.TAKEN_OVER


def test_libpod_conmon_is_not_the_container():
    assert L.cgroup_container("/machine.slice/libpod-conmon-0123456789abcdef0123456789abcdef.scope") is None


def test_another_tools_unit_and_the_roles_own_unit():
    other = L.classify("/system.slice/vllm-llama.service", [INIT], own_unit="gpuops-llm.service", adopts=adopts)
    assert (other.how, other.unit) == (L.UNIT, "vllm-llama.service") and "vllm-llama.service" in other.words
    assert other.how not in L.TAKEN_OVER
    own = L.classify("/system.slice/gpuops-llm.service", [INIT], own_unit="gpuops-llm.service", adopts=adopts)
    assert (own.how, own.unit) == (L.OWN_UNIT, "gpuops-llm.service")


@pytest.mark.parametrize("cgroup", [
    USER_SCOPE,                                                         # an ssh login
    "/user.slice/user-1000.slice/user@1000.service/app.slice/tmux-spawn-1b2c.scope",  # tmux under the user's manager
    "/user.slice/user-1000.slice/user@1000.service",                    # the user's manager itself
    "/", "", None,                                                      # no cgroup namespace to read, or unreadable
])
def test_a_login_session_scope_or_the_users_manager_is_no_unit(cgroup):
    assert L.cgroup_unit(cgroup) is None
    assert L.classify(cgroup, [BASH, TMUX, INIT], adopts=adopts).how == L.BY_HAND_TMUX


def test_tmux_and_screen_are_found_above_the_pane_shell():
    tmux = L.classify(USER_SCOPE, [BASH, TMUX, INIT], adopts=adopts)
    assert (tmux.how, tmux.by) == (L.BY_HAND_TMUX, TMUX.pid)
    assert tmux.words.startswith("by hand in tmux (PID 3000 (tmux new -s llm), pane shell PID 4100 (-bash)")
    screen = L.classify(USER_SCOPE, [BASH, SCREEN, BASH._replace(pid=2900), SSHD, INIT], adopts=adopts)
    assert (screen.how, screen.by) == (L.BY_HAND_SCREEN, SCREEN.pid)


def test_a_shell_a_nohup_and_another_parent():
    shell = L.classify(USER_SCOPE, [BASH, SSHD, INIT], adopts=adopts)
    assert (shell.how, shell.by) == (L.BY_HAND_SHELL, BASH.pid) and "PID 4100 (-bash)" in shell.words
    assert L.classify(USER_SCOPE, [INIT], adopts=adopts).how == L.NOHUP
    assert L.classify(USER_SCOPE, [], adopts=adopts).how == L.NOHUP
    user_manager = L.classify(USER_SCOPE, [L.Proc(900, "systemd", ["/lib/systemd/systemd", "--user"]), INIT], adopts=adopts)
    assert user_manager.how == L.NOHUP and "adopted by PID 900" in user_manager.words
    supervisor = L.Proc(700, "python3", ["python3", "/opt/supervise.py"])
    other = L.classify(USER_SCOPE, [supervisor, INIT], adopts=adopts)
    assert (other.how, other.by) == (L.PARENT, 700) and other.how in L.TAKEN_OVER


def test_tmux_above_an_adopter_does_not_count():
    """The climb stops at PID 1 or an adopter: a tmux above it (a container's PID 1 is not the host's) is not the pane."""
    tini = L.Proc(50, "tini", ["tini", "--"])
    started = L.classify(USER_SCOPE, [L.Proc(60, "python3", ["python3", "run.py"]), tini, TMUX], adopts=lambda p: p.name == "tini")
    assert started.how == L.PARENT


def test_a_parents_command_line_is_shown_with_its_secrets_masked():
    shell = L.Proc(4200, "bash", ["bash", "-c", "vllm serve m --api-key sk-verysecret; sleep 1"])
    words = L.classify(USER_SCOPE, [shell, TMUX, INIT], adopts=adopts).words
    assert "sk-verysecret" not in words and "********" in words


def write_proc(root: str, pid: int, ppid: int, comm: str, cmdline: t.Sequence[str], cgroup: str = "0::/user.slice/x.scope\n") -> None:
    path = os.path.join(root, str(pid))
    os.makedirs(path)
    with open(os.path.join(path, "stat"), "w", encoding="utf-8") as handle:
        handle.write("%d (%s) S %d %d %d 0 -1 4194560 100 0 0 0 1 1 0 0 20 0 1 0 12345 0 0\n" % (pid, comm, ppid, pid, pid))
    with open(os.path.join(path, "cmdline"), "wb") as handle:
        handle.write(b"".join(word.encode() + b"\0" for word in cmdline))
    with open(os.path.join(path, "cgroup"), "w", encoding="utf-8") as handle:
        handle.write(cgroup)


def test_how_started_reads_a_fake_proc_tree(tmp_path):
    """tmux server -> pane shell -> vllm serve, from /proc files: the parents' chain, the comm with spaces and parentheses."""
    root = str(tmp_path)
    write_proc(root, 1, 0, "systemd", ["/sbin/init"])
    write_proc(root, 3000, 1, "tmux: server", ["tmux", "new", "-s", "llm"])
    write_proc(root, 4100, 3000, "bash", ["-bash"])
    write_proc(root, 5000, 4100, "vllm (serve)", SERVE, cgroup="12:pids:/user.slice\n0::" + USER_SCOPE + "\n")
    assert [p.pid for p in L.parents_of(5000, root)] == [4100, 3000, 1]
    assert L.read_proc(5000, root) == (L.Proc(5000, "vllm (serve)", SERVE), 4100)
    started = L.how_started(5000, adopts=adopts, proc_root=root)
    assert (started.how, started.by) == (L.BY_HAND_TMUX, 3000)
    # nohup'd: the shell exited, PID 1 adopted the server
    write_proc(root, 5100, 1, "vllm", SERVE)
    assert L.how_started(5100, adopts=adopts, proc_root=root).how == L.NOHUP
    # a parent gone between two reads: no chain, as nohup'd
    write_proc(root, 5200, 4999, "vllm", SERVE)
    assert L.how_started(5200, adopts=adopts, proc_root=root).how == L.NOHUP
    # another tool's unit, from the unified hierarchy's line
    write_proc(root, 5300, 1, "vllm", SERVE, cgroup="0::/system.slice/vllm-old.service\n")
    assert L.how_started(5300, adopts=adopts, proc_root=root).unit == "vllm-old.service"
