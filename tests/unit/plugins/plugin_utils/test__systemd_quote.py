# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Quoting words for systemd unit files."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.plugin_utils._systemd_quote import systemd_exec, systemd_quote


@pytest.mark.parametrize("word, expected", [
    ("plain", '"plain"'),
    ("my model", '"my model"'),
    ("a;b", '"a;b"'),
    (";", "\\;"),
    ("$HOME", '"$$HOME"'),
    ("${X}", '"$${X}"'),
    ("%h", '"%%h"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("back\\slash", '"back\\\\slash"'),
    ("line\nbreak", '"line\\nbreak"'),
    ("bell\x07", '"bell\\a"'),
    ("esc\x1b", '"esc\\x1b"'),
    (8000, '"8000"'),
    ("", '""'),
])
def test_exec_words(word, expected):
    assert systemd_quote(word) == expected


def test_environment_values_keep_dollars():
    assert systemd_quote("A=$HOME %h", expand_variables=False) == '"A=$HOME %%h"'


@pytest.mark.parametrize("bad", [["a"], {"a": 1}, "nul\x00"])
def test_refused_words(bad):
    with pytest.raises(AnsibleFilterError):
        systemd_quote(bad)


def test_exec_line():
    assert systemd_exec(["/usr/bin/vllm", "serve", "org/m; rm -rf $HOME", ";"]) == \
        '"/usr/bin/vllm" "serve" "org/m; rm -rf $$HOME" \\;'
    with pytest.raises(AnsibleFilterError):
        systemd_exec([])
    with pytest.raises(AnsibleFilterError):
        systemd_exec("vllm serve")
