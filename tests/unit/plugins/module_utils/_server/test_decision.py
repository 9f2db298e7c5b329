# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""decision.reason: the role's words for why a server must change, in their order, '' when it is left alone."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.decision import reason

GOOD = {"running": True, "config_matches": True, "healthy": True, "health": "HTTP 200", "crash_loop": "",
        "generation": {"ok": True, "tokens": 4, "elapsed_s": 0.1, "status": 200}}
DEAD = {"ok": False, "tokens": 0, "elapsed_s": 0.25, "status": 500, "problem": "HTTP 500", "answer": '{"error": "EngineDeadError"}'}
CRASH = "crash loop: 3 restarts, last exit status 1 (Result=exit-code); systemd gave up"


@pytest.mark.parametrize("state, force, status, expected", [
    ("started", False, GOOD, ""),
    ("started", False, dict(GOOD, generation=None), ""),
    ("stopped", False, GOOD, "a stop was asked for"),
    ("stopped", True, dict(GOOD, running=False), "a stop was asked for"),
    ("started", False, dict(GOOD, running=False), "no managed server ran"),
    ("restarted", True, dict(GOOD, running=False, crash_loop=CRASH), "no managed server ran (%s)" % CRASH),
    ("restarted", False, GOOD, "a restart was forced"),
    ("started", True, GOOD, "a restart was forced"),
    ("started", False, dict(GOOD, config_matches=False), "its configuration changed"),
    ("started", False, dict(GOOD, config_matches=None), "its configuration changed"),
    ("started", False, dict(GOOD, healthy=False, health="HTTP 503"), "it does not answer /health (HTTP 503)"),
    ("started", False, dict(GOOD, healthy=None, health=None), "it does not answer /health (no answer)"),
    ("started", False, dict(GOOD, healthy=False, health="connection refused", crash_loop=CRASH),
     "it does not answer /health (%s; /health: connection refused)" % CRASH),
    ("started", False, dict(GOOD, generation=DEAD),
     'the running server does not generate: HTTP 500 after 0.25 s; it answered: {"error": "EngineDeadError"}'),
    ("started", False, dict(GOOD, generation=dict(DEAD, answer="")), "the running server does not generate: HTTP 500 after 0.25 s"),
    # the order: a configuration change is named before a failing /health or generation
    ("started", False, dict(GOOD, config_matches=False, healthy=False, generation=DEAD), "its configuration changed"),
])
def test_reason(state, force, status, expected):
    assert reason(state, force, status) == expected
