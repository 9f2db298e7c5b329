# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module harness: every result carries ``failed`` and that run's own warnings, on success and on failure."""

from __future__ import annotations

import types

import pytest

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import call_main, capture, run_module


def _main():
    module = AnsibleModule(argument_spec={"fail": {"type": "bool", "default": False}, "value": {"type": "float", "default": 1.0}})
    module.warn("first")
    module.warn("second")
    if module.params["fail"]:
        module.fail_json(msg="asked to fail")
    module.exit_json(changed=False, value=module.params["value"])


FAKE = types.SimpleNamespace(main=_main)


def test_success_and_failure_both_carry_their_warnings(monkeypatch):
    ok = run_module(FAKE, {}, monkeypatch)
    assert ok == {"changed": False, "value": 1.0, "failed": False, "warnings": ["first", "second"]}
    failed = run_module(FAKE, {"fail": True}, monkeypatch)
    assert failed["failed"] is True and failed["msg"] == "asked to fail" and failed["warnings"] == ["first", "second"]


def test_each_run_keeps_its_own_warnings(monkeypatch):
    capture(monkeypatch)
    assert call_main(FAKE, {})["warnings"] == ["first", "second"]
    assert call_main(FAKE, {})["warnings"] == ["first", "second"], "a second run must not see the first run's warnings"


def test_a_result_that_is_not_strict_json_fails_the_test(monkeypatch):
    with pytest.raises(ValueError):
        run_module(FAKE, {"value": float("nan")}, monkeypatch)
