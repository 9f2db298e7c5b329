# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""_server/unit: a unit's crash loop read from `systemctl show` (as systemd 252 writes it), and the ready step's watch of
a unit, which must not take a unit waiting to be restarted for a server that starts."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.unit import (
    SHOW_PROPERTIES, crash_loop, last_exit, parse_show, show_argv, watch_unit)

UNIT = "gpuops-vllm-8000.service"


def show(**props: str) -> str:
    base = {"ActiveState": "active", "SubState": "running", "LoadState": "loaded", "MainPID": "4242", "NRestarts": "0",
            "Result": "success", "ExecMainCode": "0", "ExecMainStatus": "0"}
    base.update(props)
    return "\n".join("%s=%s" % item for item in base.items()) + "\n"


def test_show_argv_reads_every_property_the_rules_use():
    argv = show_argv("/bin/systemctl", UNIT)
    assert argv[:2] == ["/bin/systemctl", "show"] and argv[-1] == UNIT
    assert sorted(arg.split("=", 1)[1] for arg in argv[2:-1]) == sorted(SHOW_PROPERTIES)
    assert {"NRestarts", "Result", "ActiveState", "SubState", "ExecMainStatus"} <= set(SHOW_PROPERTIES)


def test_parse_show_keeps_values_with_equal_signs_and_skips_junk():
    assert parse_show("A=1\nB=x=y\nnot a property\n\n") == {"A": "1", "B": "x=y"}
    assert parse_show("") == {}


def test_a_healthy_unit_never_restarted_is_no_crash_loop():
    props = parse_show(show())
    assert crash_loop(props) == ""
    assert watch_unit(UNIT, props) == (True, "")
    assert watch_unit(UNIT, parse_show(show(ActiveState="activating", SubState="start"))) == (True, "")


@pytest.mark.parametrize("props, said, why_says", [
    ({"ActiveState": "activating", "SubState": "auto-restart", "NRestarts": "3", "Result": "exit-code"},
     "crash loop: 3 restarts, last exit status 1 (Result=exit-code); systemd starts it again after RestartSec=", UNIT),
    ({"ActiveState": "failed", "SubState": "failed", "NRestarts": "5", "Result": "start-limit-hit"},
     "crash loop: 5 restarts, last exit status 1 (Result=start-limit-hit); systemd gave up (start limit hit)", "is failed"),
], ids=["waiting-to-be-restarted", "gave-up-at-the-start-limit"])
def test_a_crash_looping_unit_is_named_and_not_alive(props, said, why_says):
    props = parse_show(show(MainPID="0", ExecMainCode="1", ExecMainStatus="1", **props))
    assert crash_loop(props) == said
    alive, why = watch_unit(UNIT, props)
    assert not alive and why_says in why and said in why


def test_the_first_crash_is_seen_before_any_restart():
    # died once, systemd has not started it again yet: NRestarts is still 0
    props = parse_show(show(ActiveState="activating", SubState="auto-restart", MainPID="0", Result="signal", ExecMainCode="2",
                            ExecMainStatus="9"))
    assert crash_loop(props).startswith("crash loop: 0 restarts, last exit signal 9 (SIGKILL) (Result=signal)")
    assert watch_unit(UNIT, props)[0] is False


def test_a_unit_given_up_that_kept_its_last_result_still_says_so():
    # systemd 252 leaves Result=exit-code when it refuses the start after the burst
    props = parse_show(show(ActiveState="failed", SubState="failed", MainPID="0", NRestarts="3", Result="exit-code",
                            ExecMainCode="1", ExecMainStatus="1"))
    assert crash_loop(props) == "crash loop: 3 restarts, last exit status 1 (Result=exit-code); systemd gave up"


def test_a_restarted_server_running_again_is_named_with_its_pid():
    props = parse_show(show(NRestarts="1", MainPID="777"))
    assert crash_loop(props) == "crash loop: 1 restart; running again as PID 777"
    assert watch_unit(UNIT, props) == (True, "")


@pytest.mark.parametrize("code, status, said", [
    ("1", "0", "status 0"), ("1", "137", "status 137"), ("2", "15", "signal 15 (SIGTERM)"),
    ("3", "11", "signal 11 (SIGSEGV, core dumped)"), ("2", "250", "signal 250 (?)"), ("0", "0", ""), ("", "", ""),
])
def test_last_exit(code, status, said):
    assert last_exit({"ExecMainCode": code, "ExecMainStatus": status}) == said


def test_an_unreadable_unit_is_not_alive():
    alive, why = watch_unit(UNIT, {})
    assert not alive and why == "unit %s is unknown" % UNIT
