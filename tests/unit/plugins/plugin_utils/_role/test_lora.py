# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_server_lora_adapters on the controller: the list checked, and how the plan carries it (out of the hash and read
by the reading when the server takes adapters at run time; --lora-modules in the hashed argv otherwise)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.plugin_utils._role import lora
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.plan import PlanError, build

RUNTIME = {"vllm_server_args": ["--enable-lora"], "vllm_server_env": {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}}
TWO = [{"name": "sql", "path": "/a/sql"}, {"name": "chat", "path": "/a/chat"}]


@pytest.mark.parametrize("value,args,said", [
    ("sql", ["--enable-lora"], 'vllm_server_lora_adapters="sql" must be a list of {name, path}'),
    ([{"name": "a"}], ["--enable-lora"], "item 0 (a) needs a non-empty path"),
    ([{"name": "a", "path": " "}], ["--enable-lora"], "item 0 (a) needs a non-empty path"),
    ([{"path": "/a"}], ["--enable-lora"], 'item 0 needs a name without spaces or \'=\', got null'),
    ([{"name": "a=b", "path": "/a"}], ["--enable-lora"], "item 0 needs a name without spaces or '='"),
    ([{"name": "a", "path": "/a"}, {"name": "a", "path": "/b"}], ["--enable-lora"], 'the name "a" is given twice'),
    ([{"name": "a", "path": "/a", "rank": 8}], ["--enable-lora"], "item 0 must be a dict with the keys name and path only"),
    (["a=/a"], ["--enable-lora"], "item 0 must be a dict with the keys name and path only"),
    ([{"name": "a", "path": "/a"}], [], "needs --enable-lora in vllm_server_args"),
    ([{"name": "a", "path": "/a"}], ["--enable-lora", "--lora-modules", "b=/b"], "and --lora-modules in vllm_server_args"),
])
def test_a_bad_list_is_refused_naming_the_variable_and_the_value(value, args, said):
    found = lora.problems(value, args)
    assert any(said in problem for problem in found), found
    assert all(problem.startswith("vllm_server_lora_adapters=") for problem in found)


def test_a_good_list_and_none_pass():
    assert lora.problems(TWO, ["--enable-lora"]) == []
    assert lora.problems([], []) == [] and lora.problems(None, []) == []


@pytest.mark.parametrize("args,env,whole,managed", [
    (["--enable-lora"], {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}, False, True),
    (["--enable-lora"], {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": " 1 "}, False, True),
    (["--enable-lora"], {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "yes"}, False, False),  # vLLM reads 1 or true only
    (["--enable-lora"], {}, False, False),
    ([], {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}, False, False),
    (["--enable-lora"], {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}, True, False),  # across hosts: a change restarts
    (["--enable-lora", "--lora-modules", "a=/a"], {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true"}, False, False),
])
def test_managed_only_with_runtime_updating_on_one_host(args, env, whole, managed):
    assert lora.managed(args, env, whole) is managed


def test_the_hashed_argv_of_a_managed_server_leaves_out_its_adapters():
    argv = ["vllm", "serve", "m", "--lora-modules", "a=/a", "b=/b", "--max-loras", "4"]
    assert lora.hashed_argv(argv, True) == ["vllm", "serve", "m", "--max-loras", "4"]
    assert lora.hashed_argv(argv, False) == argv
    assert lora.launch_words(TWO) == ["--lora-modules", "sql=/a/sql", "chat=/a/chat"] and lora.launch_words([]) == []


def test_a_managed_server_s_adapters_change_neither_its_hash_nor_its_reading_s_gate(variables):
    without = build(variables(**RUNTIME), host="gpu-1")
    plan = build(variables(vllm_server_lora_adapters=TWO, **RUNTIME), host="gpu-1")
    assert plan["lora_managed"] and plan["config_hash"] == without["config_hash"]
    # launched with them all the same, so that a restart for another reason serves them from its start
    assert plan["argv"][-3:] == ["--lora-modules", "sql=/a/sql", "chat=/a/chat"]
    option = plan["status"]["adapters"]
    assert option["wanted"] == TWO and option["url"] == plan["url"] and option["lock"] == {"path": plan["files"]["lock"]}
    assert option["result"] == {"host": "gpu-1", "name": plan["name"], "url": plan["url"]}
    assert plan["good_config"]["lora_adapters"] == TWO and plan["good_config"]["lora_managed"]
    assert without["status"]["adapters"] == {**option, "wanted": []}


def test_the_api_key_goes_with_the_adapter_requests(variables):
    plan = build(variables(vllm_server_lora_adapters=TWO, vllm_server_args=["--enable-lora"],
                           vllm_server_env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_API_KEY": "sk-1"}))
    assert plan["status"]["adapters"]["api_key"] == "sk-1"


def test_without_runtime_updating_the_adapters_are_arguments_in_the_hash(variables):
    args = {"vllm_server_args": ["--enable-lora"]}
    one = build(variables(vllm_server_lora_adapters=TWO[:1], **args))
    two = build(variables(vllm_server_lora_adapters=TWO, **args))
    assert not one["lora_managed"] and one["status"]["adapters"] is None
    assert one["config_hash"] != two["config_hash"]
    assert two["argv"][-3:] == ["--lora-modules", "sql=/a/sql", "chat=/a/chat"]


def test_no_adapters_keep_the_hash_of_a_server_launched_before_the_variable(variables):
    before = build(variables(vllm_server_args=["--enable-lora"]))
    assert "--lora-modules" not in before["argv"]
    assert build(variables(vllm_server_args=["--enable-lora"], vllm_server_lora_adapters=[]))["config_hash"] == before["config_hash"]


def test_a_bad_list_fails_the_plan(variables):
    with pytest.raises(PlanError) as caught:
        build(variables(vllm_server_lora_adapters=[{"name": "a", "path": ""}], **RUNTIME))
    assert "vllm_server_lora_adapters=" in str(caught.value) and "nothing was stopped" in str(caught.value)


def test_a_rollback_takes_the_adapters_of_the_good_configuration(variables):
    good = build(variables(vllm_server_lora_adapters=TWO, **RUNTIME))["good_config"]
    plan = build(variables(vllm_server_lora_adapters=[{"name": "new", "path": "/new"}], **RUNTIME), good)
    assert plan["config_hash"] == good["config_hash"] and plan["lora_adapters"] == TWO
    assert plan["status"]["adapters"]["wanted"] == TWO
