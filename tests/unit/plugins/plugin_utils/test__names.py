# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One name per idea: each old name still feeds its setting, with a deprecation naming the new name and 0.3.0."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.plugin_utils._names import OLD, deprecation, settle

BECOME = ["vllm_restart_become", "gpu_cleanup_become", "vllm_benchmark_become", "vllm_rollout_become", "gpuops_fleet_prepare_become"]
IDLE = ["vllm_server_memory_threshold_mib", "gpu_reclaim_memory_threshold_mib", "gpu_report_threshold_mib", "gpu_facts_idle_mib"]
FORCE = ["vllm_server_force_restart", "vllm_restart_force"]


def test_every_old_name_of_the_issue_is_known():
    assert set(OLD) == set(BECOME + IDLE + FORCE + ["vllm_server_verify_launch"])


@pytest.mark.parametrize("old", BECOME)
def test_an_old_become_variable_still_becomes_and_says_what_replaces_it(old):
    assert settle({}, [old]) == ({"become": None}, [])
    settled, warnings = settle({old: "yes"}, [old])
    assert settled == {"become": True}
    assert warnings == ["The variable %s is deprecated and will be removed in gpuops.fleet 0.3.0; use Ansible's become (-b, or"
                        " ansible_become=true in the inventory) instead" % old]
    assert settle({old: False}, [old])[0] == {"become": False}


@pytest.mark.parametrize("old", IDLE)
def test_one_idle_threshold_the_old_names_still_read(old):
    assert settle({}, [old]) == ({"idle_threshold_mib": 1024}, [])
    assert settle({old: 64}, [old]) == ({"idle_threshold_mib": 64}, [deprecation(old)])
    assert "use gpuops_fleet_idle_threshold_mib instead" in deprecation(old)
    # the new name wins, the old one is still warned about
    assert settle({old: 64, "gpuops_fleet_idle_threshold_mib": 2048}, [old]) == ({"idle_threshold_mib": 2048}, [deprecation(old)])
    assert settle({"gpuops_fleet_idle_threshold_mib": 512}, [old]) == ({"idle_threshold_mib": 512}, [])


@pytest.mark.parametrize("old", FORCE)
def test_an_old_force_variable_means_restarted(old):
    assert settle({}, [old])[0] == {"state": "started"}
    assert settle({old: True}, [old]) == ({"state": "restarted"}, [deprecation(old)])
    assert "use vllm_server_state=restarted instead" in deprecation(old)
    assert settle({old: True, "vllm_server_state": "stopped"}, [old])[0] == {"state": "stopped"}
    assert settle({old: "false"}, [old])[0] == {"state": "started"}


def test_the_check_s_old_name():
    assert settle({}, ["vllm_server_verify_launch"])[0] == {"check": True}
    assert settle({"vllm_server_verify_launch": False}, ["vllm_server_verify_launch"])[0] == {"check": False}
    assert settle({"vllm_server_verify_launch": False, "vllm_server_check": True}, ["vllm_server_verify_launch"])[0] == {"check": True}
