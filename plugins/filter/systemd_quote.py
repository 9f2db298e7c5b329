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

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\a": "\\a", "\b": "\\b", "\f": "\\f", "\v": "\\v"}


def systemd_quote(word, expand_variables=True):
    """One word for a unit file (see DOCUMENTATION)."""
    if isinstance(word, (list, dict)):
        raise AnsibleFilterError("systemd_quote: expected one word, got a %s: %r" % (type(word).__name__, word))
    text = to_text(word)
    if "\x00" in text:
        raise AnsibleFilterError("systemd_quote: a NUL character cannot be passed to a program: %r" % text)
    if text == ";":
        return "\\;"
    out = []
    for char in text:
        if char in _C_ESCAPES:
            out.append(_C_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append("\\x%02x" % ord(char))
        elif char == "%":
            out.append("%%")
        elif char == "$" and expand_variables:
            out.append("$$")
        else:
            out.append(char)
    return '"%s"' % "".join(out)


def systemd_exec(argv):
    """A whole command line for ExecStart= (see the systemd_exec filter's documentation)."""
    if not isinstance(argv, (list, tuple)) or not argv:
        raise AnsibleFilterError("systemd_exec: expected a non-empty list of words, got %r" % (argv,))
    return " ".join(systemd_quote(word) for word in argv)


class FilterModule:
    def filters(self):
        return {"systemd_quote": systemd_quote, "systemd_exec": systemd_exec}
