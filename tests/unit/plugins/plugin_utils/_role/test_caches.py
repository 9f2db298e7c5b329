# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the new server keeps its caches: the inventory's, else the places of the server it replaces, else the role's;
refused where the new user could not use the model's place, or where the old server's places are unknown."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.plugin_utils._role import caches
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.plan import build
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.preflight import refusal

from .conftest import role_variables

HOME = "/home/ops"
OLD_LOCATIONS = {"HF_HOME": HOME + "/.cache/huggingface", "HF_HUB_CACHE": HOME + "/.cache/huggingface/hub",
                 "VLLM_CACHE_ROOT": HOME + "/.cache/vllm", "TRITON_CACHE_DIR": HOME + "/.triton/cache",
                 "FLASHINFER_WORKSPACE_BASE": HOME}
ROOT = {"user": "root", "uid": 0, "gids": [0]}


def plan_of(**given):
    return build(role_variables(vllm_server_name="llm", **given))


def old(usable=True, read=True, env=None, download_dir=None, **locations):
    where = dict(OLD_LOCATIONS, **locations)
    return {"pid": 42, "uid": 65534, "user": "nobody", "home": HOME, "env": env or {"HOME": HOME}, "download_dir": download_dir,
            "read": read, "locations": where if read else {},
            "usable": {name: usable if isinstance(usable, bool) else name not in usable for name in where}}


def reading(found=None, mode="process", taken=True, new=None, **extra):
    return dict({"new": new or ROOT, "old": found, "mode": mode, "taken": taken, "in_container": False, "creatable": {}}, **extra)


def test_the_plan_names_the_roles_places_per_server_and_what_the_inventory_sets():
    plan = plan_of(vllm_server_env={"HF_HOME": "/data/hf"}, vllm_server_args=["--download-dir", "/data/weights"])
    assert plan["caches"]["dir"] == "/var/cache/gpuops-fleet/llm"
    assert plan["caches"]["default"]["VLLM_CACHE_ROOT"] == "/var/cache/gpuops-fleet/llm/vllm"
    assert plan["caches"]["explicit"] == {"HF_HOME": "/data/hf", "HF_HUB_CACHE": "--download-dir /data/weights"}
    assert plan_of(vllm_server_cache_dir="/srv/caches/")["caches"]["default"]["HF_HOME"] == "/srv/caches/huggingface"
    # the role's places are not the configuration: they change no hash (a running server is not restarted for them)
    assert plan_of()["config_hash"] == plan_of(vllm_server_cache_dir="/srv/caches")["config_hash"]
    assert "VLLM_CACHE_ROOT" not in plan_of()["env"]


def test_with_nothing_to_replace_the_roles_places_are_made_and_given():
    chosen = caches.choose(plan_of(), reading(None))
    assert chosen["env"] == {"HF_HOME": "/var/cache/gpuops-fleet/llm/huggingface", "VLLM_CACHE_ROOT": "/var/cache/gpuops-fleet/llm/vllm",
                             "TRITON_CACHE_DIR": "/var/cache/gpuops-fleet/llm/triton",
                             "FLASHINFER_WORKSPACE_BASE": "/var/cache/gpuops-fleet/llm/flashinfer"}
    assert chosen["paths"] == list(chosen["env"].values()) and chosen["mounts"] == [] and chosen["refusal"] == ""
    assert chosen["shown"].startswith("in vllm_server_cache_dir: HF_HOME=/var/cache/gpuops-fleet/llm/huggingface, VLLM_CACHE_ROOT=")


def test_a_takeover_keeps_the_old_servers_places_and_makes_none():
    chosen = caches.choose(plan_of(), reading(old()))
    assert chosen["env"] == {name: OLD_LOCATIONS[name] for name in ("HF_HOME", "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE")}
    # never made nor given to the new server's user: they are another user's
    assert chosen["paths"] == [] and chosen["mounts"] == list(chosen["env"].values()) and chosen["owner"] == ""
    assert chosen["shown"].startswith("kept from the server taken over, PID 42 (user nobody): HF_HOME=/home/ops/.cache/huggingface")


def test_the_inventory_wins_and_its_hf_home_takes_the_hub_along():
    plan = plan_of(vllm_server_env={"HF_HOME": "/data/hf"})
    chosen = caches.choose(plan, reading(old(env={"HOME": HOME, "HF_HUB_CACHE": "/old/hub"}, HF_HUB_CACHE="/old/hub")))
    assert "HF_HOME" not in chosen["env"] and "HF_HUB_CACHE" not in chosen["env"]
    assert chosen["places"]["HF_HOME"] == {"path": "/data/hf", "from": "the inventory"}
    assert chosen["env"]["VLLM_CACHE_ROOT"] == OLD_LOCATIONS["VLLM_CACHE_ROOT"]


@pytest.mark.parametrize("env, download_dir, hub", [
    ({"HOME": HOME, "HF_HUB_CACHE": "/models/hub"}, None, "/models/hub"),
    ({"HOME": HOME}, "/models/weights", "/models/weights"),
    ({"HOME": HOME}, None, None),
])
def test_the_hub_of_the_old_server_is_kept_only_where_it_set_one(env, download_dir, hub):
    chosen = caches.choose(plan_of(), reading(old(env=env, download_dir=download_dir, HF_HUB_CACHE=hub or OLD_LOCATIONS["HF_HUB_CACHE"])))
    assert chosen["env"].get("HF_HUB_CACHE") == hub


def test_the_roles_own_running_server_keeps_its_places_on_a_forced_restart():
    chosen = caches.choose(plan_of(), reading(old(), taken=False))
    assert chosen["env"]["HF_HOME"] == OLD_LOCATIONS["HF_HOME"] and "the server that runs now, PID 42" in chosen["shown"]


def test_a_model_the_new_user_cannot_use_is_refused_naming_both_places_and_the_variables():
    plan = plan_of(vllm_server_launch_mode="systemd", vllm_server_systemd_user="vllm")
    said = caches.choose(plan, reading(old(usable=False), mode="systemd", new={"user": "vllm", "uid": 990, "gids": [990]}))["refusal"]
    assert said.startswith("vllm_server: nothing was stopped: the server taken over, PID 42 (user nobody) keeps its model")
    assert "HF_HOME=/home/ops/.cache/huggingface (the model download directory)" in said
    assert "HF_HOME=/var/cache/gpuops-fleet/llm/huggingface" in said
    assert "vllm_server_systemd_user=vllm" in said and "vllm_server_env" in said


def test_a_compiled_cache_the_new_user_cannot_use_moves_to_the_roles_place():
    chosen = caches.choose(plan_of(), reading(old(usable=["VLLM_CACHE_ROOT"]), new={"user": "vllm", "uid": 990, "gids": [990]}))
    assert chosen["refusal"] == "" and chosen["env"]["VLLM_CACHE_ROOT"] == "/var/cache/gpuops-fleet/llm/vllm"
    assert chosen["paths"] == ["/var/cache/gpuops-fleet/llm/vllm"]
    assert "user vllm may not use /home/ops/.cache/vllm" in chosen["places"]["VLLM_CACHE_ROOT"]["from"]


def test_an_unreadable_old_server_is_refused_unless_the_inventory_places_the_model():
    said = caches.choose(plan_of(), reading(old(read=False)))["refusal"]
    assert "cannot be read by this user" in said and "HF_HOME in vllm_server_env" in said and "/var/cache/gpuops-fleet/llm/huggingface" in said
    assert caches.choose(plan_of(vllm_server_env={"HF_HOME": "/data/hf"}), reading(old(read=False)))["refusal"] == ""


def test_a_container_mounts_only_the_model_of_another_server_and_gives_the_roles_to_its_user():
    plan = plan_of(vllm_server_launch_mode="container", vllm_server_container_image="img",
                   vllm_server_container_run_options=["--user=1000:1000"])
    assert plan["caches"]["container_user"] == "1000:1000"
    chosen = caches.choose(plan, reading(old(), mode="container", new={"user": "uid 1000", "uid": 1000, "gids": [1000]}))
    assert chosen["mounts"] == [OLD_LOCATIONS["HF_HOME"]] and chosen["env"]["VLLM_CACHE_ROOT"] == "/var/cache/gpuops-fleet/llm/vllm"
    assert chosen["owner"] == "1000"
    # a taken-over container's places are inside it: not read, the role's
    boxed = caches.choose(plan, reading(old(), mode="container", in_container=True))
    assert boxed["env"]["HF_HOME"] == "/var/cache/gpuops-fleet/llm/huggingface"


def test_places_this_user_cannot_make_are_refused_naming_the_variable():
    said = caches.choose(plan_of(), reading(None, creatable={"/var/cache/gpuops-fleet/llm/vllm": False}))["refusal"]
    assert "vllm_server_cache_dir=/var/cache/gpuops-fleet/llm" in said and "/var/cache/gpuops-fleet/llm/vllm" in said


def test_the_preflight_refuses_with_the_cache_refusal_after_its_own():
    plan = plan_of(vllm_server_launch_mode="systemd", vllm_server_systemd_user="vllm")
    found = reading(old(usable=False), mode="systemd", new={"user": "vllm", "uid": 990, "gids": [990]})
    assert "keeps its model where" in refusal(plan, {"would_fail": [], "caches": found})
    assert refusal(dict(plan, state="stopped"), {"would_fail": [], "caches": found}) == ""
    assert "would not free" in refusal(plan, {"would_fail": ["GPU 0: pid 5"], "caches": found})


@pytest.mark.parametrize("options, user", [
    (["--user", "vllm"], "vllm"), (["-u", "1000:1000"], "1000:1000"), (["--user=5"], "5"), (["--ipc=host"], ""),
])
def test_the_containers_user(options, user):
    assert caches.container_user(options) == user


def test_a_download_dir_in_the_inventory_places_the_model_too():
    plan = plan_of(vllm_server_args=["--download-dir", "/data/weights"])
    assert caches.choose(plan, reading(old(read=False)))["refusal"] == ""
