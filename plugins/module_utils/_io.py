# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Files written whole or not at all: a reader never sees half a report.

A flat file of module_utils: it imports no package of this collection.
Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import tempfile
import typing as t


def write_atomic(path: str, content: t.Union[str, bytes], mode: int = 0o644, prefix: str = ".gpuops.") -> None:
    """Write ``content`` to a temporary file beside ``path`` with ``mode``, then rename it over ``path``."""
    handle, tmp = tempfile.mkstemp(prefix=prefix, dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(handle, "wb" if isinstance(content, bytes) else "w", **({} if isinstance(content, bytes) else {"encoding": "utf-8"})) as out:
            out.write(content)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_if_changed(path: str, content: t.Union[str, bytes], check_mode: bool = False, prefix: str = ".gpuops.") -> bool:
    """Write ``content`` (a str as UTF-8) to ``path`` with write_atomic (mode 0644, the folder made first when missing),
    unless the file already holds it; whether it changed. In check mode nothing is written: whether it would change."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    try:
        with open(path, "rb") as handle:
            if handle.read() == data:
                return False
    except OSError:
        pass
    if not check_mode:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        write_atomic(path, content, prefix=prefix)
    return True
