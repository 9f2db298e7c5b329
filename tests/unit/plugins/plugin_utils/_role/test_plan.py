# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plan of a run: what the server is and what each step is given, from the role's variables."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.plan import PlanError, build, rollback_refusal, settled

# Hashes that the role's Jinja gave these configurations before the plan moved into Python: a server launched then keeps
# its hash, so a rerun that converges (vllm_server_state=started) leaves it alone.
SECRET_ENV = {"NCCL_PROTO": "LL", "HF_TOKEN": "s3cret", "B": 1, "a": "x"}
EARLIER_HASH = "f21bc2f3467d97ea4b44dcf11f8a24a6f8b27aa881d68308c27506b48c889945"
EARLIER_CONTAINER_HASH = "b4ab2de035e7eb4c8aa35291dfaabf82df6231b46c6e427e3f50f3230f0d2a24"


def test_the_hash_of_a_configuration_is_the_one_its_server_was_launched_with(variables):
    plan = build(variables(vllm_server_model="org/m", vllm_server_tensor_parallel_size=2, vllm_server_port=8011, vllm_server_env=SECRET_ENV,
                           vllm_server_args=["--max-model-len", 4096], vllm_server_gpus=[2, 3]))
    assert plan["config_hash"] == EARLIER_HASH
    assert plan["argv"] == ["vllm", "serve", "org/m", "--tensor-parallel-size", "2", "--port", "8011", "--max-model-len", "4096"]
    assert plan["env"]["CUDA_VISIBLE_DEVICES"] == "2,3" and plan["gpus"] == [2, 3]
    # sorted without case, secrets masked, CUDA_VISIBLE_DEVICES (the GPUs) not among the operator's variables
    assert plan["env_shown"] == ["a=x", "B=1", "HF_TOKEN=********", "NCCL_PROTO=LL"]


def test_the_container_mode_hashes_how_the_container_runs_and_numbers_its_gpus_from_zero(variables):
    plan = build(variables(vllm_server_model="org/m", vllm_server_tensor_parallel_size="2", vllm_server_launch_mode="container",
                           vllm_server_container_image="img:1", vllm_server_container_volumes=["/a:/a:ro"], vllm_server_env={"ü": "é"}))
    assert plan["config_hash"] == EARLIER_CONTAINER_HASH
    assert plan["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert plan["container"]["name"] == "gpuops-vllm-8000" and plan["container"]["gpus"] == [0, 1]
    assert plan["container"]["env_file"] == plan["files"]["env"] and plan["status"]["container"] == {"name": "gpuops-vllm-8000", "runtime": None}
    other = build(variables(vllm_server_model="org/m", vllm_server_tensor_parallel_size="2", vllm_server_launch_mode="container",
                            vllm_server_container_image="img:2", vllm_server_container_volumes=["/a:/a:ro"], vllm_server_env={"ü": "é"}))
    assert other["config_hash"] != plan["config_hash"], "a new image is a new configuration"


@pytest.mark.parametrize("given, gpus", [
    ({"vllm_server_tensor_parallel_size": 4}, [0, 1, 2, 3]),
    ({"vllm_server_tensor_parallel_size": "2", "vllm_server_gpus": ["6", 7]}, [6, 7]),
])
def test_the_gpus_are_the_listed_ones_else_the_first_of_the_size(variables, given, gpus):
    assert build(variables(**given))["gpus"] == gpus


def test_files_url_and_the_reading_s_options(variables):
    plan = build(variables(vllm_server_port=8123, vllm_server_state_dir="/srv/s", vllm_server_log_dir="/var/log/v", vllm_server_health_host="10.0.0.5"))
    assert plan["files"] == {"state": "/srv/s/vllm-8123.json", "lock": "/srv/s/vllm-8123.lock", "log": "/var/log/v/vllm-8123.log",
                             "env": "/srv/s/vllm-8123.env", "unit": "gpuops-vllm-8123.service"}
    assert plan["url"] == "http://10.0.0.5:8123" and plan["status"]["health_url"] == "http://10.0.0.5:8123/health"
    # what a preflight refusal names, as the operator wrote it
    assert plan["given"]["vllm_server_gpus"] == [] and plan["given"]["gpuops_fleet_idle_threshold_mib"] == 1024
    assert plan["status"]["listener"]["port"] == 8123 and plan["status"]["decide"] == {"state": "started", "force": False}


@pytest.mark.parametrize("given, asked", [
    ({}, True),
    ({"vllm_server_state": "restarted"}, False),
    ({"vllm_server_force_restart": "yes"}, False),
    ({"vllm_server_state": "stopped"}, False),
    ({"vllm_server_ready_generate_timeout": 0}, False),
])
def test_a_server_that_may_be_left_alone_is_asked_to_generate(variables, given, asked):
    plan = build(variables(**given))
    assert (plan["generate"] is not None) is asked
    assert plan["status"]["generate"] == plan["generate"]


@pytest.mark.parametrize("given, key", [
    ({"vllm_server_args": ["--api-key", "from-argv"], "vllm_server_env": {"VLLM_API_KEY": "from-env"}}, "from-argv"),
    ({"vllm_server_env": {"VLLM_API_KEY": "from-env"}}, "from-env"),
    ({"vllm_server_host_env": {"VLLM_API_KEY": "from-host"}}, "from-host"),
    ({"vllm_server_api_key": "given", "vllm_server_env": {"VLLM_API_KEY": "from-env"}}, "given"),
    ({}, ""),
])
def test_the_key_sent_to_the_server(variables, given, key):
    plan = build(variables(**given))
    assert plan["api_key"] == key
    assert plan["generate"]["api_key"] == (key or None)


def test_a_secret_argument_is_masked_and_a_unit_reference(variables):
    plan = build(variables(vllm_server_args=["--api-key", "k3y"]))
    assert "k3y" not in " ".join(plan["argv_masked"]) and plan["api_key_arg"] is True
    assert "k3y" not in plan["exec_start"] and "k3y" in plan["exec_env"].values()


@pytest.mark.parametrize("given, check, mark", [
    ({}, True, True),
    ({"vllm_server_check": False}, False, False),
    ({"vllm_server_verify_launch": False}, False, False),
    # the new name wins over the old one
    ({"vllm_server_check": True, "vllm_server_verify_launch": False}, True, True),
    ({"vllm_server_mark_good": False}, True, False),
])
def test_the_launch_check_and_the_last_known_good_mark(variables, given, check, mark):
    plan = build(variables(**given))
    assert (plan["check"], plan["mark_good"]) == (check, mark)
    assert build(variables(**given), check_mode=True)["check"] is False


def test_every_holder_reclaimed_drops_the_pattern(variables):
    assert build(variables())["reclaim"]["match"] and build(variables())["reclaim"]["orphans_only"] is True
    every = build(variables(vllm_server_reclaim_all_holders=True))["reclaim"]
    assert every["match"] is None and every["orphans_only"] is False


def test_a_rollback_takes_every_launch_input_from_the_good_configuration(variables):
    good = {"argv": ["vllm", "serve", "old/model", "--port", "8000"], "env": {"NCCL_PROTO": "LL128", "CUDA_VISIBLE_DEVICES": "0,1"},
            "gpus": [0, 1], "served_name": "old", "model": "old/model", "container": None}
    plan = build(variables(vllm_server_tensor_parallel_size=2, vllm_server_env_overrides={"NCCL_PROTO": "LEAK"}), good)
    assert plan["argv"] == good["argv"] and plan["env"] == good["env"] and plan["served_name"] == "old" and plan["rollback"]
    assert "NCCL_PROTO=LL128" in plan["env_shown"] and "LEAK" not in str(plan)


@pytest.mark.parametrize("summary, mode, state, expected", [
    (None, "process", "started", "no last known-good configuration is kept for vllm-8000 (/var/lib/gpuops-fleet/vllm/vllm-8000.last-good)"),
    ({"mode": "process", "gpus": [0], "port": 8000}, "process", "stopped", "a rollback starts the server"),
    ({"mode": "systemd", "gpus": [0], "port": 8000}, "process", "started", "ran in launch mode systemd, this run uses process"),
    ({"mode": "process", "gpus": [0, 1], "tensor_parallel_size": 2, "port": 8000}, "process", "started",
     "has tensor_parallel_size=2 (GPU 0, 1), vllm_server_tensor_parallel_size=1"),
    ({"mode": "process", "gpus": [0], "port": 9000}, "process", "started", "listens on port 9000, vllm_server_port=8000"),
    ({"mode": "process", "gpus": [0], "port": 8000}, "process", "started", ""),
])
def test_a_rollback_that_would_move_the_server_is_refused(variables, summary, mode, state, expected):
    refusal = rollback_refusal(variables(vllm_server_state=state, vllm_server_tensor_parallel_size=1), summary, mode)
    assert (expected in refusal) if expected else refusal == ""


def test_bad_variables_are_all_named_with_their_values(variables):
    with pytest.raises(PlanError) as caught:
        build(variables(vllm_server_port=70000, vllm_server_name="a b", vllm_server_gpus=[1, 1], vllm_server_tensor_parallel_size=1))
    text = str(caught.value)
    assert text.startswith("vllm_server: bad variables (nothing was stopped or touched): ")
    assert 'vllm_server_port=70000 must be 1-65535' in text and 'vllm_server_name="a b" must be letters' in text
    assert "vllm_server_gpus=[1, 1] names a GPU twice" in text and len(caught.value.problems) == 4  # and [1, 1] is 2 GPUs for size 1


# ---- no silent size, one name per idea --------------------------------------------------------------------------------

def test_an_unset_size_is_the_number_of_listed_gpus(variables):
    plan = build(variables(vllm_server_gpus=[4, 5, 6, 7]))
    assert plan["tensor_parallel_size"] == 4 and plan["gpus"] == [4, 5, 6, 7]
    assert plan["argv"][3:5] == ["--tensor-parallel-size", "4"]


def test_a_size_given_explicitly_keeps_the_hash_its_server_was_launched_with(variables):
    """The derived size writes the argv an explicit size wrote: a server launched with TP given keeps its hash, and one
    whose inventory now leaves the size to the GPU list too."""
    given = dict(vllm_server_model="org/m", vllm_server_port=8011, vllm_server_env=SECRET_ENV,
                 vllm_server_args=["--max-model-len", 4096], vllm_server_gpus=[2, 3])
    assert build(variables(vllm_server_tensor_parallel_size=2, **given))["config_hash"] == EARLIER_HASH
    assert build(variables(**given))["config_hash"] == EARLIER_HASH


def test_neither_size_nor_gpus_is_refused_naming_both(variables):
    with pytest.raises(PlanError) as caught:
        build(variables(vllm_server_tensor_parallel_size=None, vllm_server_gpus=[]))
    assert caught.value.problems == [
        "vllm_server_tensor_parallel_size and vllm_server_gpus are both unset: set vllm_server_gpus to the server's GPUs (the"
        " tensor-parallel size is then their number) or vllm_server_tensor_parallel_size (the server then uses GPUs 0 to size-1)"]


def test_the_model_is_required_and_named(variables):
    with pytest.raises(PlanError) as caught:
        build(variables(vllm_server_model=None))
    assert "vllm_server_model is required to start a server" in str(caught.value)
    assert build(variables(vllm_server_model=None, vllm_server_state="stopped"))["state"] == "stopped"


@pytest.mark.parametrize("given, state, force", [
    ({}, "started", False),
    ({"vllm_server_state": "restarted"}, "restarted", True),
    ({"vllm_server_force_restart": True}, "restarted", True),
    # restart_vllm.yml's deprecated force variable, which the role reads as the playbook passes vllm_server_state through
    ({"vllm_restart_force": "true"}, "restarted", True),
    ({"vllm_server_force_restart": "false"}, "started", False),
    ({"vllm_server_force_restart": True, "vllm_server_state": "stopped"}, "stopped", False),
])
def test_one_force_variable_the_old_one_means_restarted(variables, given, state, force):
    plan = build(variables(**given))
    assert (plan["state"], plan["force"]) == (state, force)
    assert plan["status"]["decide"] == {"state": state, "force": force}


@pytest.mark.parametrize("given, mib", [
    ({}, 1024),
    ({"gpuops_fleet_idle_threshold_mib": 2048}, 2048),
    ({"vllm_server_memory_threshold_mib": 512}, 512),
    ({"vllm_server_memory_threshold_mib": 512, "gpuops_fleet_idle_threshold_mib": 2048}, 2048),
])
def test_one_idle_threshold_the_old_name_still_read(variables, given, mib):
    plan = build(variables(**given))
    assert plan["memory_threshold_mib"] == mib and plan["reclaim"]["memory_threshold_mib"] == mib


def test_each_old_name_set_is_a_deprecation_naming_the_new_one_and_the_version(variables):
    _values, warnings = settled(variables(vllm_server_force_restart=False, vllm_server_verify_launch=True,
                                          vllm_server_memory_threshold_mib=1))
    assert warnings == [
        "The variable vllm_server_memory_threshold_mib is deprecated and will be removed in gpuops.fleet 0.3.0; use"
        " gpuops_fleet_idle_threshold_mib instead",
        "The variable vllm_server_force_restart is deprecated and will be removed in gpuops.fleet 0.3.0; use"
        " vllm_server_state=restarted instead",
        "The variable vllm_server_verify_launch is deprecated and will be removed in gpuops.fleet 0.3.0; use vllm_server_check"
        " instead",
    ]
    assert settled(variables())[1] == []
