# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Whether the managed server must change, from one reading of what runs: the reason in words, '' when it is left alone.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

STATES = ("started", "restarted", "stopped")


def health_said(status: t.Mapping[str, t.Any]) -> str:
    """What /health said, after the crash loop when there is one: 'crash loop: ...; /health: connection refused'."""
    crash = status.get("crash_loop") or ""
    return ("%s; /health: " % crash if crash else "") + (status.get("health") or "no answer")


def _generation_failure(generation: t.Mapping[str, t.Any]) -> str:
    said = "the running server does not generate: %s after %s s" % (generation.get("problem"), generation.get("elapsed_s"))
    if generation.get("answer"):
        said += "; it answered: %s" % generation["answer"]
    return said


def reason(state: str, force: bool, status: t.Mapping[str, t.Any]) -> str:
    """Why the server must be stopped or replaced, in this order: a stop asked for, no managed server running (with its
    crash loop), a forced restart, another configuration, no answer on /health, a completion that failed; '' when the
    running server already matches, answers /health and generates (when asked to).

    ``status``: the keys of a reading (running, crash_loop, config_matches, healthy, health, generation); a missing or
    null config_matches or healthy counts as not matching, not healthy."""
    if state == "stopped":
        return "a stop was asked for"
    if not status.get("running"):
        crash = status.get("crash_loop") or ""
        return "no managed server ran" + (" (%s)" % crash if crash else "")
    if force or state == "restarted":
        return "a restart was forced"
    if not status.get("config_matches"):
        return "its configuration changed"
    if not status.get("healthy"):
        return "it does not answer /health (%s)" % health_said(status)
    generation = status.get("generation")
    if generation is not None and not generation.get("ok"):
        return _generation_failure(generation)
    return ""
