# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""_host/secured: whether a new configuration opens a secured server or drops one of its secrets (names only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host.listener import ListenerError, listening_pid
from ansible_collections.gpuops.fleet.plugins.module_utils._host.secured import compare, dropped_warning, judge, key_source, Listener, new_key_source

KEY = "sk-secret456"
TOKEN = "hf_secret123"
SERVE = ["vllm", "serve", "org/model", "--port", "8000"]
# listens on a free loopback port, prints it, sleeps (its argv and environment are what judge() reads)
SERVER = """
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(60)
"""


def listener(argv=(), env=None, pid=4242):
    return Listener(pid, 1.0, SERVE + list(argv), env)


@pytest.mark.parametrize("argv, env, expected", [
    (["--api-key", KEY], {}, "--api-key"),
    (["--api-key=" + KEY], None, "--api-key"),
    (["--api-key", KEY], {"VLLM_API_KEY": "other"}, "--api-key"),  # vLLM: the argument wins
    ([], {"VLLM_API_KEY": KEY}, "VLLM_API_KEY"),
    ([], {"VLLM_API_KEY": ""}, None),  # an empty key requires nothing
    (["--api-key"], {}, None),  # an option without a value is no key
    (["--api-key="], {}, None),
    (["--hf-token", TOKEN], {"HF_TOKEN": TOKEN}, None),  # a secret that is not the API key
    ([], None, None),
])
def test_key_source_as_vllm_settles_it(argv, env, expected):
    assert key_source(SERVE + argv, env) == expected


def test_new_key_source_from_names_only():
    assert new_key_source(True, []) == "--api-key"
    assert new_key_source(False, ["NCCL_PROTO", "VLLM_API_KEY"]) == "VLLM_API_KEY"
    assert new_key_source(False, ["NCCL_PROTO"]) is None


def test_a_keyed_server_against_a_configuration_without_a_key_opens_it():
    running = listener(env={"VLLM_API_KEY": KEY, "HF_TOKEN": TOKEN, "NCCL_PROTO": "LL"})
    verdict = compare(running, False, ["NCCL_PROTO"])
    assert verdict.opens and verdict.running_key == "VLLM_API_KEY" and verdict.new_key is None
    # the key is the refusal's; HF_TOKEN is still a dropped secret
    assert verdict.dropped == ["HF_TOKEN"]
    verdict = compare(listener(["--api-key", KEY], {}), False, [])
    assert verdict.opens and verdict.running_key == "--api-key"


@pytest.mark.parametrize("api_key_arg, names", [(True, []), (False, ["VLLM_API_KEY"])])
def test_a_key_given_either_way_keeps_the_server_secured(api_key_arg, names):
    assert not compare(listener(env={"VLLM_API_KEY": KEY}), api_key_arg, names).opens
    assert not compare(listener(["--api-key", KEY], {}), api_key_arg, names).opens


def test_a_key_moved_from_the_environment_to_the_argument_warns_that_the_variable_goes():
    verdict = compare(listener(env={"VLLM_API_KEY": KEY}), True, [])
    assert not verdict.opens and verdict.dropped == ["VLLM_API_KEY"]


def test_an_open_server_stays_open_without_a_refusal():
    verdict = compare(listener(env={"NCCL_PROTO": "LL"}), False, [])
    assert not verdict.opens and verdict.running_key is None and verdict.dropped == []


def test_nothing_listening_is_nothing_to_judge():
    verdict = compare(None, False, [])
    assert not verdict.opens and verdict.dropped == [] and verdict.running_key is None


def test_dropped_secrets_by_name_word_and_by_the_callers_list():
    env = {"HF_TOKEN": TOKEN, "AWS_SECRET_ACCESS_KEY": "a", "MY_PAT": "p", "EMPTY_TOKEN": "", "TOKENIZERS_PARALLELISM": "false",
           "NCCL_PROTO": "LL"}
    verdict = compare(listener(env=env), False, ["AWS_SECRET_ACCESS_KEY"], extra_secret=["MY_PAT"])
    # by a word of the name (TOKENIZERS is no such word), by the caller's list; an empty one holds nothing to lose
    assert verdict.dropped == ["HF_TOKEN", "MY_PAT"]
    assert compare(listener(env=env), False, ["HF_TOKEN", "MY_PAT", "AWS_SECRET_ACCESS_KEY"], ["MY_PAT"]).dropped == []


def test_an_unreadable_environment_is_judged_by_the_command_line_and_said():
    verdict = compare(listener(["--api-key", KEY], None), False, [])
    assert verdict.opens and not verdict.env_known and verdict.dropped == []
    assert not compare(listener([], None), False, []).opens


def test_the_warning_names_the_variable_never_its_value():
    text = dropped_warning(listener(env={"HF_TOKEN": TOKEN}), "HF_TOKEN")
    assert "HF_TOKEN" in text and "4242" in text and TOKEN not in text


@pytest.fixture
def keyed_listener():
    """(port, PID) of a real process started with --api-key KEY and HF_TOKEN in its environment (ended by its Popen)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin"), "HF_TOKEN": TOKEN, "NCCL_PROTO": "LL"}
    proc = subprocess.Popen([sys.executable, "-c", SERVER, "--api-key", KEY], stdout=subprocess.PIPE, env=env)
    try:
        yield int(proc.stdout.readline()), proc.pid
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_judge_reads_the_real_listener_and_shows_no_value(keyed_listener):
    psutil = pytest.importorskip("psutil")
    port, pid = keyed_listener
    result, warnings = judge(psutil, {"port": port, "env_names": ["NCCL_PROTO"]})
    assert result["opens"] is True and result["running_key"] == "--api-key" and result["new_key"] is None
    assert result["dropped_secret_env"] == ["HF_TOKEN"] and result["error"] is None
    assert result["listener"]["pid"] == pid and result["listener"]["env_read"] is True
    assert "********" in result["listener"]["cmdline"]
    assert len(warnings) == 1 and "HF_TOKEN" in warnings[0] and str(pid) in warnings[0]
    text = json.dumps([result, warnings])
    assert KEY not in text and TOKEN not in text


def test_judge_counts_what_a_detached_server_inherits(keyed_listener):
    psutil = pytest.importorskip("psutil")
    port, _pid = keyed_listener
    options = {"port": port, "env_names": ["VLLM_API_KEY"], "inherit_env": True}
    result, warnings = judge(psutil, options, environ={"HF_TOKEN": "inherited", "EMPTY_TOKEN": ""})
    assert result["opens"] is False and result["new_key"] == "VLLM_API_KEY" and result["dropped_secret_env"] == [] and warnings == []
    # a systemd unit inherits nothing: HF_TOKEN goes, and the warning says so
    result, warnings = judge(psutil, dict(options, inherit_env=False), environ={"HF_TOKEN": "inherited"})
    assert result["dropped_secret_env"] == ["HF_TOKEN"] and len(warnings) == 1


def test_judge_nothing_listening_and_a_bad_port():
    psutil = pytest.importorskip("psutil")
    port = next(candidate for candidate in range(47000, 47100) if listening_pid(psutil, candidate) is None)
    result, warnings = judge(psutil, {"port": port})
    assert result["listener"] is None and result["opens"] is False and result["error"] is None and warnings == []
    result, _warnings = judge(psutil, {"port": 70000})
    assert "secured.port" in result["error"] and "70000" in result["error"]


def test_judge_reads_the_server_behind_a_runtimes_port_holder(keyed_listener):
    """A container's published port is held by the runtime's process (no key on its command line, no environment of the
    server's): with ``behind`` naming the container's server, that server is judged, and the holder is named."""
    psutil = pytest.importorskip("psutil")
    port, keyed = keyed_listener
    holder = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, env={"PATH": os.environ.get("PATH", "/usr/bin")})
    try:
        held = int(holder.stdout.readline())
        asked = []

        def behind(on_port, name, cmdline):
            asked.append((on_port, name))
            return keyed

        result, warnings = judge(psutil, {"port": held, "env_names": ["NCCL_PROTO"]}, behind=behind)
        assert asked == [(held, psutil.Process(holder.pid).name())]
        assert result["opens"] is True and result["running_key"] == "--api-key" and result["error"] is None
        assert result["listener"]["pid"] == keyed and result["listener"]["port_held_by"] == {"pid": holder.pid, "name": asked[0][1]}
        assert result["dropped_secret_env"] == ["HF_TOKEN"] and KEY not in json.dumps([result, warnings])
        # without it, the holder itself is read: it requires no key
        alone, _warnings = judge(psutil, {"port": held})
        assert alone["listener"]["pid"] == holder.pid and alone["running_key"] is None and alone["listener"]["port_held_by"] is None

        def unreadable(on_port, name, cmdline):
            raise ListenerError("port %d is held by conmon for a container that its runtime does not name" % on_port)

        failed, _warnings = judge(psutil, {"port": held}, behind=unreadable)
        assert failed["listener"] is None and failed["opens"] is False and "does not name" in failed["error"]
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
