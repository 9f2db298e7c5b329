# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fake ``systemctl`` on PATH for unit tests: every call is logged, units live in a JSON file.

A unit is known once its file is in ``unit_dir`` and a ``daemon-reload`` ran (or when the test puts it in the state).
``start`` runs a real detached ``sleep`` as the unit's main process (so a stop has processes to end); ``stop`` ends it.
Unknown units answer as systemd does: ``show`` says LoadState=not-found, ``stop`` and ``reset-failed`` fail saying
"not loaded".
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import typing as t

SCRIPT = r'''#!%(python)s
import json, os, signal, subprocess, sys
home = %(home)r
unit_dir = %(unit_dir)r
path = os.path.join(home, "units.json")
with open(os.path.join(home, "calls.jsonl"), "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
units = json.load(open(path)) if os.path.exists(path) else {}
args = [a for a in sys.argv[1:] if not a.startswith("--")]
verb, names = args[0], args[1:]
def save():
    json.dump(units, open(path, "w"))
def known(name):
    return name in units and units[name].get("LoadState") == "loaded"
if verb == "daemon-reload":
    for name in os.listdir(unit_dir):
        units.setdefault(name, {"LoadState": "loaded", "ActiveState": "inactive", "SubState": "dead", "MainPID": 0,
                                "UnitFileState": "disabled", "NRestarts": 0})
    save(); sys.exit(0)
name = names[0]
if verb == "show":
    props = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--property=")]
    unit = units.get(name, {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead", "MainPID": 0})
    for prop in props:
        print("%%s=%%s" %% (prop, unit.get(prop, "")))
    sys.exit(0)
if not known(name):
    sys.stderr.write("Failed to %%s %%s: Unit %%s not loaded.\n" %% (verb, name, name))
    sys.exit(5)
unit = units[name]
if verb == "start":
    child = subprocess.Popen(["sleep", "60"], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    unit.update(ActiveState="active", SubState="running", MainPID=child.pid, NRestarts=0)
elif verb == "stop":
    if unit.get("MainPID"):
        try:
            os.kill(int(unit["MainPID"]), signal.SIGTERM)
        except OSError:
            pass
        import time
        for _ in range(100):
            try:
                state = open("/proc/%%d/stat" %% int(unit["MainPID"])).read().rsplit(")", 1)[1].split()[0]
            except OSError:
                break
            if state == "Z":
                break
            time.sleep(0.05)
    unit.update(ActiveState="inactive", SubState="dead", MainPID=0)
elif verb == "enable":
    unit["UnitFileState"] = "enabled"
elif verb == "disable":
    unit["UnitFileState"] = "disabled"
elif verb == "reset-failed":
    unit["NRestarts"] = 0
save()
'''


class FakeSystemctl:
    """The fake's home: ``calls()`` what it was asked, ``units()`` / ``set_unit()`` its state."""

    def __init__(self, home: str, unit_dir: str) -> None:
        self.home = home
        self.unit_dir = unit_dir
        self.bin = os.path.join(home, "bin")
        os.makedirs(self.bin, exist_ok=True)
        os.makedirs(unit_dir, exist_ok=True)
        script = os.path.join(self.bin, "systemctl")
        with open(script, "w", encoding="utf-8") as handle:
            handle.write(SCRIPT % {"python": sys.executable, "home": home, "unit_dir": unit_dir})
        os.chmod(script, os.stat(script).st_mode | stat.S_IXUSR)

    def calls(self) -> t.List[t.List[str]]:
        try:
            with open(os.path.join(self.home, "calls.jsonl"), encoding="utf-8") as handle:
                return [json.loads(line) for line in handle]
        except FileNotFoundError:
            return []

    def verbs(self) -> t.List[str]:
        """Each call's verb and unit, such as 'stop x.service', except the readings (show)."""
        return [" ".join(a for a in call if not a.startswith("--")) for call in self.calls() if call[0] != "show"]

    def units(self) -> t.Dict[str, t.Dict[str, t.Any]]:
        try:
            with open(os.path.join(self.home, "units.json"), encoding="utf-8") as handle:
                return json.load(handle)
        except FileNotFoundError:
            return {}

    def set_unit(self, name: str, **props: t.Any) -> None:
        units = self.units()
        unit = {"LoadState": "loaded", "ActiveState": "inactive", "SubState": "dead", "MainPID": 0, "UnitFileState": "disabled",
                "NRestarts": 0}
        unit.update(units.get(name, {}))
        unit.update(props)
        units[name] = unit
        with open(os.path.join(self.home, "units.json"), "w", encoding="utf-8") as handle:
            json.dump(units, handle)

    def end_all(self) -> None:
        """End every main process the fake started (a test's finally)."""
        for unit in self.units().values():
            pid = int(unit.get("MainPID") or 0)
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


class FakeModule:
    """What the launch backends use of an AnsibleModule: check_mode, warn, get_bin_path (PATH), run_command."""

    def __init__(self, check_mode: bool = False) -> None:
        self.check_mode = check_mode
        self.warnings: t.List[str] = []

    def warn(self, warning: str) -> None:
        self.warnings.append(warning)

    @staticmethod
    def get_bin_path(name: str, required: bool = False) -> t.Optional[str]:
        import shutil  # pylint: disable=import-outside-toplevel
        found = shutil.which(name)
        if found is None and required:
            raise AssertionError("%s is not on PATH" % name)
        return found

    @staticmethod
    def run_command(argv: t.Sequence[str]) -> t.Tuple[int, str, str]:
        import subprocess  # pylint: disable=import-outside-toplevel
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
        return done.returncode, done.stdout, done.stderr
