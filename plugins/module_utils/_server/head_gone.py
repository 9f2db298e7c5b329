# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The head of a server across hosts stops first: a headless node waits until the head's API no longer answers.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._http.request import http_get

POLL_S = 0.2


def answers(url: str, timeout: float = 2.0) -> bool:
    """Whether the head still runs at ``url``: any HTTP status (a head that lost a rank answers 503), or no answer in
    time (a head that hangs has not stopped); only a refused or reset connection means it is gone."""
    reply = http_get(url, timeout)
    return reply.status is not None or (reply.error or "").startswith("timed out")


def wait_gone(url: str, timeout: float, clock: t.Callable[[], float] = time.monotonic,
              sleep: t.Callable[[float], None] = time.sleep, probe: t.Callable[[str], bool] = answers) -> t.Dict[str, t.Any]:
    """Poll ``url`` until it no longer answers, for at most ``timeout`` seconds: the head's stop (its drain included)."""
    started = clock()
    while True:
        gone = not probe(url)
        waited = clock() - started
        if gone or waited >= timeout:
            return {"url": url, "gone": gone, "waited_s": round(waited, 3)}
        sleep(POLL_S)
