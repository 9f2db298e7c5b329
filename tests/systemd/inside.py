# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run INSIDE the container (`python3 - ARGS_JSON`, this text on stdin): the test's own readings, as JSON.

Nothing here asks the collection: the simulator's view of the GPUs (gpusim), /proc (PIDs, start times, control
groups, environments), systemd's own `systemctl show`, and an HTTP GET of /health.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

from gpusim.api import Host, starttime


def health(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5) as reply:
            return reply.status
    except OSError:
        return -1


def cgroup_members(unit):
    """PID -> [start time, title] of every process whose control group is the unit's (any hierarchy)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            lines = Path("/proc", entry, "cgroup").read_text(encoding="utf-8").splitlines()
            title = Path("/proc", entry, "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        if any(line.split(":", 2)[-1].endswith("/" + unit) for line in lines):
            found[entry] = [starttime(int(entry)), title]
    return found


def environ(pid):
    try:
        raw = Path("/proc", str(pid), "environ").read_bytes()
    except OSError:
        return {}
    return dict(item.decode("utf-8", "replace").partition("=")[::2] for item in raw.split(b"\0") if item)


def argv_of(pid):
    """The process's command line as the kernel keeps it (the API server never retitles itself)."""
    try:
        raw = Path("/proc", str(pid), "cmdline").read_bytes()
    except OSError:
        return []
    return [item.decode("utf-8", "replace") for item in raw.split(b"\0")[:-1]]


def exec_argv(unit):
    """The unit's ExecStart= command line as systemd read it from the unit file."""
    show = subprocess.run(["systemctl", "show", "--property=ExecStart", "--value", unit], capture_output=True, text=True, check=False)
    found = re.search(r"argv\[\]=(.*?) ;", show.stdout)
    return found.group(1).split(" ") if found else []


def file_facts(path):
    """Mode, content hash and modification time of a file, None when it is missing."""
    try:
        info = os.stat(path)
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None
    return {"mode": "%04o" % stat.S_IMODE(info.st_mode), "sha256": digest, "mtime_ns": info.st_mtime_ns, "uid": info.st_uid}


def listener(port):
    """The PID that listens on the TCP port (the socket's holder whose parent does not hold it), None when none does."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text(encoding="utf-8").splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if int(fields[1].rpartition(":")[2], 16) == port and fields[3] == "0A":
                inodes.add("socket:[%s]" % fields[9])
    holders = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if any(os.readlink("/proc/%s/fd/%s" % (entry, fd)) in inodes for fd in os.listdir("/proc/%s/fd" % entry)):
                holders.add(int(entry))
        except OSError:
            continue
    tops = [pid for pid in holders if proc_facts(pid)["ppid"] not in holders]
    return tops[0] if len(tops) == 1 else None


def proc_facts(pid):
    """Start time, parent, control group (raw) and command line of a process; start None when it is gone."""
    try:
        stat = Path("/proc", str(pid), "stat").read_text(encoding="utf-8", errors="replace")
        cgroup = Path("/proc", str(pid), "cgroup").read_text(encoding="utf-8")
    except OSError:
        return {"start": None, "ppid": None, "cgroup": None, "argv": []}
    return {"start": starttime(pid), "ppid": int(stat[stat.rfind(")") + 2:].split()[1]), "cgroup": cgroup.strip(), "argv": argv_of(pid)}


def tree(pid):
    """PID -> start time of the process and all its descendants."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            children.setdefault(proc_facts(int(entry))["ppid"], []).append(int(entry))
    found, todo = {}, [pid]
    while todo:
        current = todo.pop()
        found[str(current)] = starttime(current)
        todo.extend(children.get(current, []))
    return found


def main():
    args = json.loads(sys.argv[1])
    unit = args["unit"]
    show = subprocess.run(["systemctl", "show", "--property=ActiveState,SubState,MainPID,KillMode,ControlGroup,FragmentPath,"
                           "NRestarts,Result,ExecMainCode,ExecMainStatus,UnitFileState", unit], capture_output=True, text=True, check=False)
    enabled = subprocess.run(["systemctl", "is-enabled", unit], capture_output=True, text=True, check=False)
    props = dict(line.partition("=")[::2] for line in show.stdout.splitlines())
    main_pid = int(props.get("MainPID") or 0)
    snapshot = {
        "systemd": props,
        "is_enabled": enabled.stdout.strip(),
        "main_pid": main_pid,
        "main_start": starttime(main_pid) if main_pid else None,
        "main_env": environ(main_pid) if main_pid else {},
        "main_argv": argv_of(main_pid) if main_pid else [],
        "exec_argv": exec_argv(unit),
        "files": {path: file_facts(path) for path in args.get("files", [])},
        "members": cgroup_members(unit),
        "alive": {str(pid): starttime(pid) for pid in args.get("pids", [])},
        "health": health(args["port"]),
        "gpus": Host(Path(args["state"])).status()["gpus"],
        "unit_file": Path("/etc/systemd/system", unit).read_text(encoding="utf-8") if Path("/etc/systemd/system", unit).exists() else None,
    }
    listening = listener(args["port"])
    snapshot["listener"] = listening
    snapshot["listener_tree"] = tree(listening) if listening else {}
    snapshot["procs"] = {str(pid): proc_facts(pid) for pid in args.get("facts", []) + ([listening] if listening else [])}
    print(json.dumps(snapshot))


if __name__ == "__main__":
    main()
