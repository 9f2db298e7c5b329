# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Quoting for systemd unit files, shared by the systemd_quote and systemd_exec filters.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

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
