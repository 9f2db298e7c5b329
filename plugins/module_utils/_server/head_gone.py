# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The head of a server across hosts stops first: a headless node waits until the head's API no longer answers.

A flat file of module_utils: it imports no package of this collection.
Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import socket
import time
import typing as t
import urllib.error
import urllib.request

POLL_S = 0.2


def answers(url: str, timeout: float = 2.0) -> bool:
    """Whether anything answers HTTP at ``url`` (any status: a head that lost a rank answers 503 and still runs)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:  # nosec: the head's own URL, from the role's plan
            reply.read(0)
        return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError, socket.timeout, ValueError):
        return False


def wait_gone(url: str, timeout: float, clock: t.Callable[[], float] = time.monotonic,
              sleep: t.Callable[[float], None] = time.sleep, probe: t.Callable[[str], bool] = answers) -> t.Dict[str, t.Any]:
    """Poll ``url`` until it no longer answers, for at most ``timeout`` seconds: the head's stop (its drain included)."""
    started = clock()
    while True:
        if not probe(url):
            return {"url": url, "gone": True, "waited_s": round(clock() - started, 3)}
        if clock() - started >= timeout:
            return {"url": url, "gone": False, "waited_s": round(clock() - started, 3)}
        sleep(POLL_S)
