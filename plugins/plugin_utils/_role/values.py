# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Inventory values read as the role's YAML read them: Jinja's int, float, bool and to_json, on the controller.

An inventory value may be a string ("8" from an INI file), a number or a boolean; the role's decisions read it with the
same leniency the role always had, so that a value a run accepted before is accepted now, and a message shows the
value as the operator wrote it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import typing as t


def to_int(value: t.Any, default: int = 0) -> int:
    """Jinja's ``int``: a whole number, the whole part of a decimal, else ``default``."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip(), 10)
    except (TypeError, ValueError):
        pass
    try:
        return int(float(str(value).strip()))
    except (TypeError, ValueError, OverflowError):
        return default


def to_float(value: t.Any, default: float = 0.0) -> float:
    """Jinja's ``float``: a number, else ``default``."""
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


TRUE_WORDS = frozenset(("yes", "on", "1", "true", "y", "t"))


def to_bool(value: t.Any) -> bool:
    """Ansible's ``bool`` filter: true for a true boolean, a non-zero number, or yes/on/true/y/t/1 in any case."""
    if isinstance(value, bool):
        return value
    if value is None:
        return False
    if isinstance(value, (int, float)):
        return value == 1
    return str(value).strip().lower() in TRUE_WORDS


def to_json(value: t.Any) -> str:
    """How a message shows a value: JSON, as the ``to_json`` filter writes it."""
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return json.dumps(str(value))


def words(value: t.Any) -> t.List[str]:
    """A list of words, each as a string; anything else is no word."""
    if not isinstance(value, (list, tuple)):
        return []
    return [str(word) for word in value]


def mapping(value: t.Any) -> t.Dict[str, t.Any]:
    """A dict as it is; anything else is empty."""
    return dict(value) if isinstance(value, t.Mapping) else {}


def text(value: t.Any) -> str:
    """None as '', anything else as its string."""
    return "" if value is None else str(value)
