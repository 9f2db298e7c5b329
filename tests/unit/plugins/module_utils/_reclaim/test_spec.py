# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_reclaim's options: every bad value is refused, naming the option and the value."""

from __future__ import annotations

import re
import signal

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import (
    always_excluded, budget_warning, build_spec, DEFAULT_LAUNCHER_PATTERNS, DRIVER_HELPER, is_excluded, matches_any, parse_signal,
    RUNTIME_PROCESS, SpecError)

# what AnsibleModule hands build_spec when the task sets nothing
DEFAULTS = {"gpus": None, "match": None, "exclude": [], "kill_tree": True, "launcher_patterns": DEFAULT_LAUNCHER_PATTERNS,
            "signals": ["TERM", "KILL"], "grace": 10.0, "timeout": 60.0, "idle_threshold_mib": 1024, "ignore_foreign": False}


def spec(**options):
    return build_spec(dict(DEFAULTS, **options))


def test_defaults():
    got = spec()
    assert got.gpus is None
    assert got.signals == [("SIGTERM", 15), ("SIGKILL", 9)]
    assert (got.grace, got.timeout, got.memory_threshold_mib) == (10.0, 60.0, 1024)
    assert got.kill_tree is True and got.ignore_foreign is False
    assert got.match == []
    assert [p.pattern for p in got.launcher_patterns] == DEFAULT_LAUNCHER_PATTERNS


def test_gpus_indices_and_uuids_kept_in_order():
    uuid = "GPU-0000000a-1111-2222-3333-444455556666"
    assert spec(gpus=["3", "0", uuid]).gpus == [3, 0, uuid]


@pytest.mark.parametrize("options, named", [
    ({"signals": ["TERM", "SIGFOO"]}, ["signals", "'SIGFOO'"]),
    ({"signals": ["HUPP"]}, ["signals", "'HUPP'"]),
    ({"signals": ["0"]}, ["signals", "'0'"]),
    ({"signals": ["999"]}, ["signals", "'999'"]),
    ({"signals": ["-9"]}, ["signals", "'-9'"]),
    ({"signals": []}, ["signals", "empty"]),
    ({"signals": None}, ["signals", "empty"]),
    ({"grace": 0}, ["grace", "0"]),
    ({"grace": -1.5}, ["grace", "-1.5"]),
    ({"grace": float("nan")}, ["grace", "nan"]),
    ({"grace": "soon"}, ["grace", "'soon'"]),
    ({"timeout": 0.0}, ["timeout", "0.0"]),
    ({"timeout": -30}, ["timeout", "-30"]),
    ({"timeout": float("inf")}, ["timeout", "inf"]),
    ({"match": ["VLLM::(Worker"]}, ["match", "'VLLM::(Worker'"]),
    ({"exclude": ["[unclosed"]}, ["exclude", "'[unclosed'"]),
    ({"launcher_patterns": ["vllm", "*ray"]}, ["launcher_patterns", "'*ray'"]),
    ({"launcher_patterns": []}, ["launcher_patterns", "kill_tree"]),
    ({"idle_threshold_mib": -1}, ["idle_threshold_mib", "-1"]),
    ({"idle_threshold_mib": 1.5}, ["idle_threshold_mib", "1.5"]),
    ({"idle_threshold_mib": "1024"}, ["idle_threshold_mib", "'1024'"]),
    ({"idle_threshold_mib": True}, ["idle_threshold_mib", "True"]),
    # the deprecated name, as a caller without the module's alias handling passes it
    ({"memory_threshold_mib": -1}, ["idle_threshold_mib", "-1"]),
    ({"gpus": ["0", "eight"]}, ["gpus", "'eight'"]),
    ({"gpus": ["-1"]}, ["gpus", "'-1'"]),
    ({"gpus": ["GPU-123"]}, ["gpus", "'GPU-123'"]),
    ({"gpus": []}, ["gpus", "empty"]),
])
def test_bad_value_names_the_option_and_the_value(options, named):
    with pytest.raises(SpecError) as caught:
        spec(**options)
    message = str(caught.value)
    assert message.startswith(named[0] + ":"), message
    for word in named[1:]:
        assert word in message, message


def test_empty_launcher_patterns_are_fine_without_kill_tree():
    got = spec(kill_tree=False, launcher_patterns=[])
    assert got.kill_tree is False and got.launcher_patterns == []


def test_zero_threshold_is_allowed():
    assert spec(idle_threshold_mib=0).memory_threshold_mib == 0
    assert spec(memory_threshold_mib=0).memory_threshold_mib == 0


def test_driver_helpers_are_always_excluded():
    got = spec(exclude=["^my-monitor$"])
    for name in ("my-monitor", "nvidia-persistenced", "nv-hostengine", "dcgm-exporter", "nvidia-smi"):
        assert is_excluded(got, name, None), name
    assert not is_excluded(got, "VLLM::Worker_TP0", ["VLLM::Worker_TP0"])
    assert always_excluded("nv-hostengine", ["/usr/bin/nv-hostengine", "-n"]) == DRIVER_HELPER


@pytest.mark.parametrize("name, cmdline", [
    ("conmon", ["/usr/bin/conmon", "--api-version", "1", "-c", "a" * 64]),
    ("podman", ["/usr/bin/podman", "--root", "/var/lib/containers/storage", "container", "cleanup", "a" * 64]),
    ("docker", ["docker", "run", "--gpus", "all", "vllm/vllm-openai"]),
    ("runc:[2:INIT]", ["runc", "init"]),
    ("containerd-shim", ["/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-id", "b" * 64]),
    ("dockerd", ["/usr/sbin/dockerd", "-H", "fd://"]),
    ("catatonit", ["/usr/bin/catatonit", "-P"]),
    ("podman-init", ["/run/podman-init", "--", "python3", "-m", "vllm.entrypoints.openai.api_server"]),
])
def test_a_container_runtimes_own_processes_are_always_excluded(name, cmdline):
    assert always_excluded(name, cmdline) == RUNTIME_PROCESS
    assert is_excluded(spec(), name, cmdline), "whatever exclude says"


def test_a_holder_that_names_a_runtime_in_its_arguments_is_not_excluded():
    assert always_excluded("python3", ["python3", "-m", "vllm.entrypoints.openai.api_server", "--served-model-name", "podman"]) is None


@pytest.mark.parametrize("title", ["/run/podman-init -- python3 serve.py", "/usr/bin/catatonit -- vllm serve m", "/sbin/docker-init -- x"])
def test_the_inits_runtimes_put_in_containers_adopt_orphans(title):
    assert matches_any(spec().subreapers, title.split()[0].rsplit("/", 1)[-1], title.split())


def test_containers_defaults_refuse_and_keep():
    got = spec()
    assert (got.containers, got.container_restart) == ("refuse", "keep")
    assert (spec(containers="stop", container_restart="disable").containers, spec(containers="stop").container_restart) == ("stop", "keep")


@pytest.mark.parametrize("args, words", [
    ({"containers": "kill"}, "containers: 'kill' is neither refuse nor stop"),
    ({"containers": True}, "containers: True is neither refuse nor stop"),
    ({"container_restart": "no"}, "container_restart: 'no' is neither keep nor disable"),
    ({"container_restart": False}, "container_restart: False is neither keep nor disable"),
    ({"container_restart": "disable"}, "container_restart: 'disable' applies to the containers a run stops, and containers is 'refuse': "
                                       "set containers: stop as well, or leave container_restart at keep"),
])
def test_bad_containers_options_name_the_option_and_the_value(args, words):
    with pytest.raises(SpecError) as caught:
        spec(**args)
    assert str(caught.value) == words


@pytest.mark.parametrize("value, expected", [
    ("TERM", ("SIGTERM", 15)),
    ("SIGTERM", ("SIGTERM", 15)),
    ("sigkill", ("SIGKILL", 9)),
    ("kill", ("SIGKILL", 9)),
    (" INT ", ("SIGINT", 2)),
    ("9", ("SIGKILL", 9)),
    (15, ("SIGTERM", 15)),
    ("USR1", ("SIGUSR1", int(signal.SIGUSR1))),
])
def test_parse_signal(value, expected):
    assert parse_signal("signals", value) == expected


@pytest.mark.parametrize("value", ["bogus", "SIG", "", "SIG_DFL", "SIG_IGN", "0", "65", "TERM KILL", "9.0"])
def test_parse_signal_refuses(value):
    with pytest.raises(SpecError, match=r"^signals: %s is not a signal" % re.escape(repr(value))):
        parse_signal("signals", value)


def test_matches_any_searches_name_and_joined_cmdline():
    patterns = [re.compile(r"vllm\.entrypoints"), re.compile(r"^VLLM::")]
    assert matches_any(patterns, "python3", ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server"])
    assert matches_any(patterns, "VLLM::Worker_TP3", None)
    assert not matches_any(patterns, "python3", ["/usr/bin/python3", "train.py"])
    assert not matches_any(patterns, None, None)
    # cmdline words are joined by spaces, so a pattern may span two words
    assert matches_any([re.compile(r"vllm serve\b")], "python3", ["vllm", "serve", "x"])


@pytest.mark.parametrize("text, is_launcher", [
    ("/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model m", True),
    ("/usr/local/bin/vllm serve /models/llama", True),
    ("VLLM::EngineCore", True),
    ("ray::RayWorkerWrapper", False),
    ("/usr/local/lib/ray/core/src/ray/raylet/raylet --node-manager-port=0", False),
    ("/usr/bin/python3 /usr/local/bin/ray start --head", False),
    ("/usr/bin/python3 /usr/local/bin/torchrun --nproc-per-node 8 train.py", True),
    ("python3 -m sglang.launch_server --model m", True),
    ("text-generation-launcher --model-id m", True),
    ("/opt/tritonserver/bin/tritonserver --model-repository /models", True),
    ("python3 my_vllm_notes.py", False),
    ("sleep 3600", False),
    ("bash -c vllm-serve-wrapper", False),
])
def test_default_launcher_patterns(text, is_launcher):
    assert matches_any(spec().launcher_patterns, None, text.split()) is is_launcher


def test_budget_warning_when_the_ladder_may_outlast_the_timeout():
    assert budget_warning(spec()) is None  # 10 s x 2 signals within 60 s
    text = budget_warning(spec(grace=30, timeout=20))
    assert "timeout 20 s" in text and "grace 30 s x 2 signals = 60 s" in text


def test_empty_match_is_refused_not_read_as_every_holder():
    with pytest.raises(SpecError, match="^match: the list is empty"):
        spec(match=[])


@pytest.mark.parametrize("value, keep", [("fail", False), ("keep", True)])
def test_live_jobs(value, keep):
    assert build_spec({"live_jobs": value}).keep_live_jobs is keep
    assert build_spec({}).keep_live_jobs is False


@pytest.mark.parametrize("value", ["Keep", "yes", True, None, ""])
def test_live_jobs_refuses_anything_but_fail_or_keep(value):
    with pytest.raises(SpecError, match=r"^live_jobs: %s is neither fail nor keep$" % re.escape(repr(value))):
        build_spec({"live_jobs": value})
