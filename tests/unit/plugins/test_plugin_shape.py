# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""No class in plugins/ grows past MAX_CLASS_LINES, read from every file's source (ast, no code run): a class that long
holds what the files beside it are named for; its logic belongs there, as small functions or small classes."""

from __future__ import annotations

import ast
import os
import typing as t

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGINS_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "plugins"))
MAX_CLASS_LINES = 300


def long_classes(relpath: str, source: str, limit: int = MAX_CLASS_LINES) -> t.List[str]:
    """Each class of ``source`` (nested ones too) longer than ``limit`` lines, decorators included, as "PATH:LINE NAME (N lines)"."""
    found = []
    for node in ast.walk(ast.parse(source, relpath)):
        if isinstance(node, ast.ClassDef):
            first = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
            lines = t.cast(int, node.end_lineno) - first + 1
            if lines > limit:
                found.append("%s:%d %s (%d lines, at most %d)" % (relpath, node.lineno, node.name, lines, limit))
    return found


def python_files() -> t.List[str]:
    """Every .py under plugins/, relative to it."""
    found = []
    for folder, _dirs, files in os.walk(PLUGINS_DIR):
        found += [os.path.relpath(os.path.join(folder, name), PLUGINS_DIR) for name in files if name.endswith(".py")]
    return sorted(found)


def test_the_files_are_where_the_test_looks():
    files = python_files()
    assert os.path.join("modules", "gpu_reclaim.py") in files and os.path.join("module_utils", "_reclaim", "reclaim.py") in files


def test_a_long_class_is_named():
    source = "class Short:\n    pass\n\n\n@decorated\nclass Long:\n" + "    x = 1\n" * 5
    assert long_classes("x.py", source, limit=5) == ["x.py:6 Long (7 lines, at most 5)"]
    assert long_classes("x.py", source, limit=7) == []


def test_no_class_in_plugins_is_longer_than_the_limit():
    found = []
    for relpath in python_files():
        with open(os.path.join(PLUGINS_DIR, relpath), encoding="utf-8") as handle:
            found += long_classes(relpath, handle.read())
    assert found == [], "split these classes into the files their logic belongs to: %s" % "; ".join(found)
