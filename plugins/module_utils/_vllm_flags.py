# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What a vLLM command line says about how its engine runs, read by the plan (the new server's) and the takeover (the
running one's).

A flat file of module_utils: it imports no package of this collection.
Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

BACKEND_FLAG = "--distributed-executor-backend"


def runs_on_ray(argv: t.Sequence[t.Any]) -> bool:
    """Whether the engine runs on a Ray cluster: ``--distributed-executor-backend ray`` (or ``=ray``)."""
    words = [str(word) for word in argv]
    for index, word in enumerate(words):
        if word == BACKEND_FLAG and words[index + 1:index + 2] == ["ray"]:
            return True
        if word == BACKEND_FLAG + "=ray":
            return True
    return False
