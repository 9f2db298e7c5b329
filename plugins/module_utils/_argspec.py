# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""How every module of this collection checks its options: one error class and the shared checks.

A module's ``ARGUMENT_SPEC`` sits in the module, next to its DOCUMENTATION (sanity compares the two); its
``build_spec`` (or ``check_params``) in module_utils turns the parameters into what the module works with, or raises
``SpecError`` naming the option and the value. Where module_utils need an option's default (a missing parameter, when
code runs a module's steps without Ansible), they keep it in ``DEFAULTS`` and the module's ARGUMENT_SPEC names it from
there, so each default is written once. The module's main() goes params -> spec -> run -> result and ends in finish(),
its one exit; a SpecError fails it (failure()) before it touches anything.

A flat file: it imports no package of module_utils, and every package may import it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import re
import typing as t

# ASCII digits only: str.isdigit() also takes '²' (which int() refuses) and '٣' (which int() reads as 3)
ASCII_DIGITS = re.compile(r"^[0-9]+$")


class SpecError(ValueError):
    """An option value that cannot be used; the message names the option and the value."""


def between(option: str, value: t.Any, low: float, high: float, unit: str = "") -> t.Any:
    """``value`` when ``low <= value <= high``; else SpecError "option: expected LOW to HIGH[ unit], got VALUE"."""
    if value is None or not low <= value <= high:
        raise SpecError("%s: expected %g to %g%s, got %r" % (option, low, high, " " + unit if unit else "", value))
    return value


def http_url(option: str, value: str) -> str:
    """``value`` without a trailing slash, when it starts with http:// or https://; else SpecError naming it."""
    if not isinstance(value, str) or not value.rstrip("/").startswith(("http://", "https://")):
        raise SpecError("%s: expected an http:// or https:// URL, got %r" % (option, value))
    return value.rstrip("/")


def failure(msg: str, **result: t.Any) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """(result, warnings, failed) of a run that fails with ``msg``, for finish()."""
    return dict(result, msg=msg), [], True


def finish(module: t.Any, result: t.Dict[str, t.Any], warnings: t.Iterable[str], failed: bool) -> None:
    """End a module's run: its warnings, then fail_json or exit_json with ``result``."""
    for warning in warnings:
        module.warn(warning)
    if failed:
        module.fail_json(**result)
    module.exit_json(**result)
