# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Each of this collection's module_utils compiled once, not twice, when a module runs from its AnsiballZ zip.

A module runs on the host from a zip (Ansible's AnsiballZ payload), without bytecode: every module run compiles from
source each file it imports. Python's zipimport (3.8 to 3.13, as tried) compiles each file twice: once when it finds
the module, only to learn its file name (``zipimporter.find_spec`` asks ``get_filename``, which compiles), then again
to run it. For a module run that imports most of this collection (the lock's or the stop's run of vllm_process: about
380 KB of source) that first compile is thrown away.

Importing this file puts ``Finder`` on ``sys.meta_path``, just before the path finder. For a name of this
collection found inside a zip, it returns the spec zipimport would return (the same zipimporter as loader, origin,
package path and cached name) without compiling; zipimport's ``exec_module`` then compiles the file once, as before.
Anything else (another name, a file that is not in a zip: a unit test, a checkout, the controller) it leaves to the
import system (it returns None). Importing it twice installs it once. A module imports it before its other
module_utils (vllm_process does). Measured (2026-12-06, one lock's run of vllm_process): about 0.06-0.1 s of CPU less.

A flat file: it imports no package of module_utils.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import sys
import typing as t
import zipimport
from importlib.machinery import ModuleSpec, PathFinder

# the names it answers for: this collection's
PREFIX = "ansible_collections.gpuops.fleet."


def _importer(entry: str) -> t.Optional[zipimport.zipimporter]:
    """The zipimporter for the search path ``entry`` (a folder inside a zip), as the path finder would cache it; None
    when ``entry`` is not inside a zip."""
    cached = sys.path_importer_cache.get(entry)
    if cached is not None or entry in sys.path_importer_cache:
        return cached if isinstance(cached, zipimport.zipimporter) else None
    try:
        importer = zipimport.zipimporter(entry)
    except (zipimport.ZipImportError, OSError):
        return None  # not a zip: nothing cached, the path finder decides as usual
    sys.path_importer_cache[entry] = importer
    return importer


class Finder:
    """A meta path finder: this collection's modules in a zip, found without the compile that zipimport's own
    find_spec makes to name the file."""

    @classmethod
    def find_spec(cls, fullname: str, path: t.Optional[t.Sequence[str]] = None,
                  target: t.Any = None) -> t.Optional[ModuleSpec]:  # pylint: disable=unused-argument
        if not fullname.startswith(PREFIX) or not path:
            return None
        tail = fullname.rpartition(".")[2]
        for entry in path:
            importer = _importer(entry)
            if importer is None:
                return None  # a search path that is not a zip: the usual import, unchanged
            try:
                package = importer.is_package(fullname)
            except zipimport.ZipImportError:
                continue  # not in this part of the path
            where = os.path.join(importer.archive, importer.prefix + tail)
            spec = ModuleSpec(fullname, importer, origin=os.path.join(where, "__init__.py") if package else where + ".py",
                              is_package=package)
            spec.has_location = True  # __file__ and __cached__, as zipimport sets them
            if package:
                spec.submodule_search_locations = [where]
            return spec
        return None

    @classmethod
    def invalidate_caches(cls) -> None:
        """Nothing cached here (the zipimporters are in sys.path_importer_cache)."""


def install() -> None:
    """Put Finder on sys.meta_path just before the path finder (which would ask zipimport), once; the finders before it
    (built-in and frozen modules, and whatever put itself first) keep their place."""
    if Finder in sys.meta_path:
        return
    at = sys.meta_path.index(PathFinder) if PathFinder in sys.meta_path else len(sys.meta_path)
    sys.meta_path.insert(at, Finder)


install()
