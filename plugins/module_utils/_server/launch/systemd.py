# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The ``systemd`` launch mode: the server runs as a systemd unit (Restart=on-failure), with a configuration record.

The unit holds no secret: the environment, and every secret argument (as a ``${GPUOPS_SECRET_ARG_N}`` reference in
its ExecStart=), come from the environment file beside the record, mode 0600. The environment file and the record are
created 0600 before anything is written to them. The unit's text is rendered by the role and written here only when it
differs, with a daemon-reload then. status(), stop() and launch() take the arguments and return the keys of
process.py's.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import os
import re
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._io import write_atomic
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.process import (
    LaunchSpec, ServerError, Target, base_reading, drain_first, with_health,
)
from ansible_collections.gpuops.fleet.plugins.module_utils._server.process import Member, alive, snapshot
from ansible_collections.gpuops.fleet.plugins.module_utils._server.record import read_unit_record, string_env, write_record
from ansible_collections.gpuops.fleet.plugins.module_utils._server.unit import (
    ALIVE_STATES, ENABLED_STATES, crash_loop, main_pid, parse_show, show_argv, start_time, unknown_unit,
)

MODE = "systemd"
UNIT_DIR = "/etc/systemd/system"
UNIT_MODE = 0o644
STATE_DIR_MODE = 0o755
PRIVATE_MODE = 0o600  # the environment file (secrets) and the record
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENV_HEADER = ("# Ansible managed\n"
              "# Environment of vLLM server %s, read by its unit's EnvironmentFile=: secrets may be in it,\n"
              "# so only its owner reads it (mode 0600). Values are double-quoted; \\, \", $ and ` are escaped, as systemd reads them.\n")
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def systemctl(module: t.Any, *args: str, tolerate_unknown: bool = False) -> t.Tuple[int, str, str]:
    """Run ``systemctl ARGS``; a failure is a ServerError naming the command and what systemctl said, except, with
    ``tolerate_unknown``, one that says systemd does not know the unit."""
    argv = [module.get_bin_path("systemctl", required=True)] + list(args)
    rc, out, err = module.run_command(argv)
    if rc != 0 and not (tolerate_unknown and unknown_unit({}, err + out)):
        raise ServerError("systemctl %s failed (rc %s): %s" % (" ".join(args), rc, (err or out).strip() or "no message"))
    return rc, out, err


def show(module: t.Any, unit: str) -> t.Dict[str, str]:
    """The unit's properties of unit.SHOW_PROPERTIES (LoadState=not-found for a unit systemd does not know)."""
    argv = show_argv(module.get_bin_path("systemctl", required=True), unit)
    rc, out, err = module.run_command(argv)
    if rc != 0:
        raise ServerError("systemctl show %s failed (rc %s): %s" % (unit, rc, (err or out).strip() or "no message"))
    return parse_show(out)


def _need_unit(target: Target) -> str:
    if not target.unit:
        raise ServerError("unit: the systemd mode needs the unit's name")
    return target.unit


def _reading(psutil: t.Any, target: Target, props: t.Mapping[str, str], record: t.Optional[t.Mapping[str, t.Any]]) -> t.Dict[str, t.Any]:
    running = props.get("ActiveState", "") in ALIVE_STATES
    pid = main_pid(props) if running else None
    reading = base_reading(MODE, target, record, pid, start_time(psutil, pid), record.get("config_hash") if record else None)
    # a unit is running while systemd says it is active, even between its main process and the next
    reading["running"] = running
    return reading


def status(module: t.Any, psutil: t.Any, target: Target, health_url: t.Optional[str] = None,
           generate: t.Optional[t.Mapping[str, t.Any]] = None) -> t.Dict[str, t.Any]:
    """What runs now: the unit's state and main PID (``systemctl show``), the configuration record, /health (asked
    whatever the unit's state: a server between two restarts answers nothing) and the generation check when asked.
    A unit that systemd restarts after crashes and that does not answer /health has its crash loop in ``crash_loop``."""
    unit = _need_unit(target)
    props = show(module, unit)
    reading = with_health(_reading(psutil, target, props, read_unit_record(target.state_file)), health_url, generate)
    if reading["healthy"] is not True:
        reading["crash_loop"] = crash_loop(props)
        if reading["crash_loop"]:
            module.warn("unit %s: %s (journalctl -u %s shows why)" % (unit, reading["crash_loop"], unit))
    return reading


def tree_snapshot(psutil: t.Any, pid: t.Optional[int]) -> t.List[Member]:
    """The unit's main process and its descendants, with their start times and names (none without a main process)."""
    if pid is None:
        return []
    try:
        main = psutil.Process(pid)
    except psutil.Error:
        return []
    return snapshot(psutil, main)


def snapshot_then_drain(module: t.Any, psutil: t.Any, reading: t.Dict[str, t.Any], drain_url: t.Optional[str],
                        drain_timeout: float) -> t.List[Member]:
    """The server's tree (its main process ``reading['pid']`` and descendants, to tell later which ended), then, when it
    runs, the drain before its stop (into ``reading['drained']`` when drained)."""
    members = tree_snapshot(psutil, reading["pid"])
    if reading["running"]:
        drained = drain_first(module, drain_url, drain_timeout)
        if drained is not None:
            reading["drained"] = drained
    return members


def ended_members(psutil: t.Any, members: t.Sequence[Member], seconds: float) -> t.List[t.Dict[str, t.Any]]:
    """Each process of ``members`` that no longer runs (systemd signalled it: ``signal`` is null)."""
    ended = [{"pid": member.pid, "name": name, "signal": None, "seconds": seconds}
             for member, created, name in members if not alive(psutil, member, created)]
    return sorted(ended, key=lambda entry: entry["pid"])


def stop_unit(module: t.Any, unit: str, disable: bool) -> t.Dict[str, t.Any]:
    """``systemctl stop`` the unit when it runs and ``systemctl disable`` it when asked and enabled; a unit systemd does
    not know is no error. Returns changed, known, was_running, disabled (each a would-be in check mode)."""
    props = show(module, unit)
    if unknown_unit(props):
        return {"changed": False, "known": False, "was_running": False, "disabled": False, "props": props}
    running = props.get("ActiveState", "") in ALIVE_STATES
    disabling = disable and props.get("UnitFileState", "") in ENABLED_STATES
    if not module.check_mode:
        if running:
            systemctl(module, "stop", unit, tolerate_unknown=True)
        if disabling:
            systemctl(module, "disable", unit, tolerate_unknown=True)
    return {"changed": running or disabling, "known": True, "was_running": running, "disabled": disabling, "props": props}


def stop(module: t.Any, psutil: t.Any, target: Target, drain_url: t.Optional[str] = None, drain_timeout: float = 60.0,
         stop_timeout: float = 30.0, disable: bool = False) -> t.Dict[str, t.Any]:
    """Drain the unit's server (when ``drain_url`` and it runs), ``systemctl stop`` the unit (KillMode=control-group
    ends every worker with it; systemd's own TimeoutStopSec= bounds it), and ``systemctl disable`` it with ``disable``.
    The record stays (it describes the unit). Returns the reading before the stop updated: changed, stopped (the
    unit's processes that ended), drained (when drained), msg."""
    del stop_timeout
    unit = _need_unit(target)
    props = show(module, unit)
    result = dict(_reading(psutil, target, props, read_unit_record(target.state_file)), changed=False, stopped=[])
    if unknown_unit(props):
        result["msg"] = "systemd does not know the unit %s: nothing to stop" % unit
        return result
    members = snapshot_then_drain(module, psutil, result, drain_url, drain_timeout)
    began = time.monotonic()
    done = stop_unit(module, unit, disable)
    result["changed"] = done["changed"]
    what = []
    if done["was_running"]:
        what.append(("stop", "stopped", "unit %s (PID %s)" % (unit, result["pid"])))
    if done["disabled"]:
        what.append(("disable", "disabled", "it" if what else "unit %s" % unit))
    if module.check_mode:
        result["running"] = False
        result["msg"] = ("would " + " and ".join("%s %s" % (verb, whom) for verb, _done, whom in what)) if what \
            else "unit %s is not running" % unit
        return result
    result["stopped"] = ended_members(psutil, members, round(time.monotonic() - began, 3))
    result.update(running=False, pid=None, create_time=None,
                  msg=" and ".join("%s %s" % (done_, whom) for _verb, done_, whom in what) if what else "unit %s is not running" % unit)
    return result


def check_env_names(env: t.Mapping[str, t.Any]) -> None:
    """Each name of ``env`` must be an environment variable's (a line of the unit's environment file)."""
    bad = [str(name) for name in env if not ENV_NAME.match(str(name))]
    if bad:
        raise ServerError("vllm_server_env / vllm_server_host_env: %s are not environment variable names (letters, digits and _, "
                          "not starting with a digit)" % json.dumps(bad))


def _quoted(value: t.Any) -> str:
    text = "" if value is None else str(value)
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")


def env_file_text(name: str, env: t.Mapping[str, t.Any], exec_env: t.Mapping[str, t.Any]) -> str:
    """The unit's environment file: a header naming the server, then ``KEY="value"`` for ``env`` and then ``exec_env``
    (the secret arguments' variables), each sorted by name; \\, ", $ and ` escaped, as systemd reads them."""
    lines = [ENV_HEADER % _CONTROL.sub(" ", name)]
    for key, value in sorted(env.items()) + sorted(exec_env.items()):
        lines.append("%s=%s\n" % (key, _quoted(value)))
    return "".join(lines)


def _read_text(path: str) -> t.Optional[str]:
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def create_private(path: str) -> None:
    """Create ``path`` mode 0600 when missing, and make an existing one 0600, before anything is written to it."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), PRIVATE_MODE)
    try:
        if os.fstat(descriptor).st_mode & 0o7777 != PRIVATE_MODE:
            os.fchmod(descriptor, PRIVATE_MODE)
    finally:
        os.close(descriptor)


def state_dir(path: str) -> None:
    """The record's directory, mode 0755."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=STATE_DIR_MODE, exist_ok=True)
    if os.stat(folder).st_mode & 0o7777 != STATE_DIR_MODE:
        os.chmod(folder, STATE_DIR_MODE)


def write_if_changed(path: str, content: str, mode: int) -> bool:
    """Write ``content`` (atomically, with ``mode``) unless the file holds it already; whether it was written."""
    if _read_text(path) == content:
        if os.stat(path).st_mode & 0o7777 != mode:
            os.chmod(path, mode)
        return False
    write_atomic(path, content, mode=mode, prefix=".gpuops.")
    return True


def set_enabled(module: t.Any, unit: str, props: t.Mapping[str, str], enabled: bool) -> bool:
    """Enable or disable the unit as ``enabled`` says; return whether that changed it (check mode changes nothing)."""
    now = props.get("UnitFileState", "") in ENABLED_STATES
    if now == bool(enabled):
        return False
    if not module.check_mode:
        systemctl(module, "enable" if enabled else "disable", unit)
    return True


def launch(module: t.Any, psutil: t.Any, target: Target, spec: LaunchSpec, unit_dir: t.Optional[str] = None) -> t.Dict[str, t.Any]:
    """Write the environment file, the unit (``spec.systemd['content']``, only when it differs, then daemon-reload),
    clear the unit's failed state, start it, enable or disable it (``spec.systemd['enabled']``), read its main PID and
    write the configuration record. A unit that runs with this configuration is left as it is; one that runs with
    another is a ServerError (stop it first). Check mode writes and starts nothing."""
    unit = _need_unit(target)
    options = dict(spec.systemd or {})
    for key in ("content", "env_file"):
        if not options.get(key):
            raise ServerError("systemd.%s: the systemd mode needs it to launch" % key)
    check_env_names(spec.env)
    props = show(module, unit)
    reading = _reading(psutil, target, props, read_unit_record(target.state_file))
    result = dict(reading, changed=False, launched=False, log_file=None, unit_changed=False)
    if reading["running"]:
        if target.config_hash is not None and reading["config_hash"] != target.config_hash:
            raise ServerError("unit %s already runs (PID %s) with another configuration (hash %s, wanted %s): stop it first"
                              % (unit, reading["pid"], reading["config_hash"], target.config_hash), result)
        result["msg"] = "unit %s already runs (PID %s) with this configuration" % (unit, reading["pid"])
        return result
    unit_path = os.path.join(unit_dir or UNIT_DIR, unit)
    result["changed"] = True
    if module.check_mode:
        result.update(running=True, unit_changed=_read_text(unit_path) != options["content"],
                      msg="would launch %s as unit %s" % (" ".join(spec.shown_argv), unit))
        return result
    state_dir(target.state_file)
    env_file = options["env_file"]
    os.makedirs(os.path.dirname(env_file) or ".", exist_ok=True)
    for path in (env_file, target.state_file):
        create_private(path)
    name = str((spec.metadata or {}).get("name") or unit)
    write_if_changed(env_file, env_file_text(name, spec.env, options.get("exec_env") or {}), PRIVATE_MODE)
    result["unit_changed"] = write_if_changed(unit_path, options["content"], UNIT_MODE)
    if result["unit_changed"]:
        systemctl(module, "daemon-reload")
    # an earlier crash loop's failed state (start limit hit) refuses a start; a unit not loaded yet has none
    systemctl(module, "reset-failed", unit, tolerate_unknown=True)
    props = show(module, unit)
    set_enabled(module, unit, props, options.get("enabled", True))
    if props.get("ActiveState", "") not in ALIVE_STATES:
        try:
            systemctl(module, "start", unit)
        except ServerError as exc:
            raise ServerError("%s (journalctl -u %s shows why)" % (exc, unit), result) from None
    props = show(module, unit)
    pid = main_pid(props)
    write_record(target.state_file, {
        "unit": unit, "config_hash": target.config_hash, "argv": list(spec.shown_argv),
        "env_keys": sorted(string_env(spec.env)), "env_file": env_file,
    })
    result.update(running=props.get("ActiveState", "") in ALIVE_STATES, pid=pid, create_time=start_time(psutil, pid),
                  config_hash=target.config_hash, config_matches=True if target.config_hash else None, launched=True,
                  record=read_unit_record(target.state_file),
                  msg="launched unit %s (PID %s)" % (unit, pid))
    return result
