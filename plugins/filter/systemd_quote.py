# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: systemd_quote
short_description: Quote a word for a systemd unit file, so it reaches the program exactly as written
version_added: 0.2.0
description:
  - Returns the word in double quotes with C(\\), C(") and control characters escaped C-style, C(%) doubled (no specifier
    expansion) and, unless O(expand_variables=false), C($) doubled (no environment variable expansion, which C(ExecStart=)
    would otherwise apply).
  - A word that is exactly C(;) becomes C(\;), which systemd reads as a literal semicolon, not as a command separator.
  - Use it for each word of C(ExecStart=) (or the filter P(gpuops.fleet.systemd_exec#filter) for a whole argv), and for
    C(Environment=) assignments with O(expand_variables=false).
author:
  - gpuops maintainers (@gpuops)
options:
  _input:
    description: The word.
    type: raw
    required: true
  expand_variables:
    description: Whether the target setting expands C($VAR) (V(true) for C(Exec*=) lines, where C($) is then doubled).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: An ExecStart word and an Environment assignment
  ansible.builtin.debug:
    msg:
      - "ExecStart=/usr/bin/vllm serve {{ 'my model; $HOME' | gpuops.fleet.systemd_quote }}"
      - "Environment={{ 'NCCL_PROTO=LL' | gpuops.fleet.systemd_quote(expand_variables=false) }}"
"""

RETURN = r"""
_value:
  description: The quoted word.
  type: str
"""

from ansible_collections.gpuops.fleet.plugins.plugin_utils._systemd_quote import systemd_quote


class FilterModule:
    def filters(self):
        return {"systemd_quote": systemd_quote}
