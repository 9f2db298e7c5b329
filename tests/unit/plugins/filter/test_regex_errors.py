# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The regex_errors filter: the patterns the modules would refuse, named with the variable, before any module runs."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.filter.regex_errors import FilterModule, regex_errors


def test_usable_patterns_give_no_message():
    assert regex_errors(["^VLLM::", r"vllm\.entrypoints\."]) == []
    assert FilterModule().filters()["regex_errors"] is regex_errors


def test_each_unusable_pattern_is_named_with_the_variable():
    errors = regex_errors(["^VLLM::", "(unclosed", " "], "vllm_server_reclaim_match")
    assert len(errors) == 2
    assert errors[0].startswith("vllm_server_reclaim_match: '(unclosed' is not a valid regular expression")
    assert errors[1].startswith("vllm_server_reclaim_match: ' ' is an empty pattern")


def test_a_string_instead_of_a_list_is_refused():
    with pytest.raises(AnsibleFilterError, match="expected a list of patterns, got str"):
        regex_errors("^VLLM::")
