# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: systemd_exec
short_description: Turn an argv list into a systemd ExecStart= value that no word can break out of
version_added: 0.2.0
description:
  - Quotes each word with P(gpuops.fleet.systemd_quote#filter) and joins them with spaces, so each element arrives as one
    argument, exactly as written, whatever it contains (spaces, quotes, C(;), C($), C(%)).
author:
  - gpuops maintainers (@gpuops)
options:
  _input:
    description: The command, one word per element.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Render an ExecStart line
  ansible.builtin.debug:
    msg: "ExecStart={{ ['/usr/bin/vllm', 'serve', 'org/model name'] | gpuops.fleet.systemd_exec }}"
"""

RETURN = r"""
_value:
  description: The quoted command line.
  type: str
"""

from ansible_collections.gpuops.fleet.plugins.plugin_utils._systemd_quote import systemd_exec


class FilterModule:
    def filters(self):
        return {"systemd_exec": systemd_exec}
