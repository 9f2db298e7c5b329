# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A systemd unit's state as ``systemctl show`` reads it, and what it says about a server that crashes.

The role's unit has ``Restart=on-failure``: a server that dies is started again by systemd after ``RestartSec=``, until
``StartLimitBurst=`` starts within ``StartLimitIntervalSec=``. Between two tries the unit is ``activating`` (sub-state
``auto-restart``), which a plain reading of ``ActiveState`` takes for a server that is starting; ``NRestarts``,
``Result`` and the last exit of the main process (``ExecMainCode``, ``ExecMainStatus``) tell a crash loop apart.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import signal
import typing as t

# what the launch backend and vllm_ready read with `systemctl show --property=...` (UnitFileState: enabled or not)
SHOW_PROPERTIES = ("ActiveState", "SubState", "LoadState", "MainPID", "NRestarts", "Result", "ExecMainCode", "ExecMainStatus",
                   "UnitFileState")
# a unit in these states still runs its server, or is about to (but see crash_loop: activating may be auto-restart)
ALIVE_STATES = ("active", "activating", "reloading")
# a unit file in these states is started at boot; `systemctl disable` ends that
ENABLED_STATES = ("enabled", "enabled-runtime")
# what systemctl says of a unit it has no file for
_UNKNOWN = ("not loaded", "could not find", "not-found", "not found", "does not exist")


def unknown_unit(props: t.Mapping[str, str], stderr: str = "") -> bool:
    """Whether systemd does not know the unit: LoadState=not-found, or systemctl's error says so."""
    said = (stderr or "").lower()
    return props.get("LoadState") == "not-found" or any(words in said for words in _UNKNOWN)


# ExecMainCode: the si_code of the main process's end (waitid(2))
_CLD_EXITED, _CLD_KILLED, _CLD_DUMPED = 1, 2, 3


def show_argv(systemctl: str, unit: str) -> t.List[str]:
    """``systemctl show`` of every property this file reads."""
    return [systemctl, "show"] + ["--property=" + name for name in SHOW_PROPERTIES] + [unit]


def main_pid(props: t.Mapping[str, str]) -> t.Optional[int]:
    """The unit's main PID (MainPID=); None when it has none (0) or the value is not a number."""
    return _int(props.get("MainPID")) or None


def start_time(psutil: t.Any, pid: t.Optional[int]) -> t.Optional[float]:
    """The start time of ``pid`` as psutil reads it; None without a PID or such a process."""
    if pid is None:
        return None
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def parse_show(text: str) -> t.Dict[str, str]:
    """``NAME=VALUE`` lines as a dict (a value may hold '=')."""
    props = {}
    for line in (text or "").splitlines():
        name, sep, value = line.partition("=")
        if sep:
            props[name.strip()] = value.strip()
    return props


def _int(value: t.Any) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return 0


def last_exit(props: t.Mapping[str, str]) -> str:
    """How the unit's main process last ended: 'status 1', 'signal 9 (SIGKILL)'; '' when it has not ended (it runs)."""
    code, status = _int(props.get("ExecMainCode")), _int(props.get("ExecMainStatus"))
    if code == _CLD_EXITED:
        return "status %d" % status
    if code in (_CLD_KILLED, _CLD_DUMPED):
        try:
            name = signal.Signals(status).name
        except ValueError:
            name = "?"
        return "signal %d (%s%s)" % (status, name, ", core dumped" if code == _CLD_DUMPED else "")
    return ""


def crash_loop(props: t.Mapping[str, str]) -> str:
    """'crash loop: N restarts, last exit ...' when systemd restarted the unit after its server failed, or is about to;
    '' when it never did (since the unit was last started by hand or by the role, which resets NRestarts)."""
    restarts = _int(props.get("NRestarts"))
    waiting = props.get("SubState") == "auto-restart"
    if restarts == 0 and not waiting:
        return ""
    said = "crash loop: %d restart%s" % (restarts, "" if restarts == 1 else "s")
    ended = last_exit(props)
    result = props.get("Result") or "?"
    if ended:
        said += ", last exit %s (Result=%s)" % (ended, result)
    elif result != "success":
        said += " (Result=%s)" % result
    if waiting:
        return said + "; systemd starts it again after RestartSec="
    if props.get("ActiveState") == "failed":
        return said + "; systemd gave up%s" % (" (start limit hit)" if result == "start-limit-hit" else "")
    pid = _int(props.get("MainPID"))
    return said + ("; running again as PID %d" % pid if pid else "")


def watch_unit(unit: str, props: t.Mapping[str, str]) -> t.Tuple[bool, str]:
    """(alive, why not) of a unit whose server is starting: it must stay active or activating, and not be waiting to be
    restarted (a server that died at start is a failed launch, not a slow one)."""
    state = props.get("ActiveState") or "unknown"
    looping = crash_loop(props)
    if props.get("SubState") == "auto-restart":
        return False, "unit %s died and systemd restarts it (%s)" % (unit, looping)
    if state not in ALIVE_STATES:
        return False, "unit %s is %s%s" % (unit, state, " (%s)" % looping if looping else "")
    return True, ""
