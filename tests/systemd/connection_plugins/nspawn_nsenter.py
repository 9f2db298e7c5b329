# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only connection: run Ansible's commands inside a booted systemd-nspawn container, through nsenter."""

from __future__ import annotations

DOCUMENTATION = """
name: nspawn_nsenter
short_description: Run commands inside a booted systemd-nspawn container (tests only)
description:
  - Enters the mount, UTS, IPC, network and PID namespaces, the root and the working directory of the
    container's PID 1 with C(nsenter), so every module runs inside the container and C(systemctl) there
    talks to the container's own systemd.
  - Files are copied in and out through C(cat) inside the container.
  - Used by tests/systemd only; needs root on the controller, which must be the container's host.
author: gpuops.fleet contributors
options:
  leader_pid:
    description: The container's PID 1 as this machine sees it.
    type: int
    required: true
    vars:
      - name: nspawn_nsenter_leader_pid
"""

import shutil
import subprocess
import typing as t

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection import ConnectionBase

# the container's own environment, not the controller's (no PYTHONPATH, LD_LIBRARY_PATH or ANSIBLE_* leaks in)
INSIDE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}


class Connection(ConnectionBase):
    """Every command runs as `nsenter --target LEADER ... -- /bin/sh -c CMD` inside the container."""

    transport = "nspawn_nsenter"
    has_pipelining = True

    def __init__(self, *args: t.Any, **kwargs: t.Any) -> None:
        super().__init__(*args, **kwargs)
        self._nsenter: t.Optional[str] = None

    def _connect(self) -> "Connection":
        if not self._connected:
            self._nsenter = shutil.which("nsenter")
            if self._nsenter is None:
                raise AnsibleConnectionFailure("nsenter (util-linux) is not on PATH")
            self._connected = True
        return self

    def _enter(self) -> t.List[str]:
        leader = self.get_option("leader_pid")
        try:
            with open("/proc/%d/comm" % int(leader), encoding="utf-8") as comm:
                comm.read()
        except (OSError, ValueError) as exc:
            raise AnsibleConnectionFailure("the container's PID 1 (nspawn_nsenter_leader_pid=%r) does not run: %s" % (leader, exc)) from exc
        return [t.cast(str, self._nsenter), "--target", str(int(leader)), "--mount", "--uts", "--ipc", "--net", "--pid",
                "--root", "--wd", "--"]

    def _run(self, argv: t.List[str], stdin: t.Any = None, data: t.Optional[bytes] = None,
             stdout: t.Any = subprocess.PIPE) -> t.Tuple[int, bytes, bytes]:
        self._connect()
        with subprocess.Popen(self._enter() + argv, stdin=stdin if stdin is not None else subprocess.PIPE,
                              stdout=stdout, stderr=subprocess.PIPE, env=INSIDE_ENV) as proc:
            out, err = proc.communicate(data)
        return proc.returncode, out or b"", err or b""

    def exec_command(self, cmd: str, in_data: t.Optional[bytes] = None, sudoable: bool = True) -> t.Tuple[int, bytes, bytes]:
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        return self._run(["/bin/sh", "-c", to_text(cmd)], data=to_bytes(in_data) if in_data is not None else b"")

    def put_file(self, in_path: str, out_path: str) -> None:
        super().put_file(in_path, out_path)
        with open(to_bytes(in_path), "rb") as source:
            code, dummy, err = self._run(["/bin/sh", "-c", 'cat > "$1"', "sh", out_path], stdin=source)
        if code != 0:
            raise AnsibleError("could not write %s in the container: %s" % (out_path, to_text(err)))

    def fetch_file(self, in_path: str, out_path: str) -> None:
        super().fetch_file(in_path, out_path)
        with open(to_bytes(out_path), "wb") as target:
            code, dummy, err = self._run(["/bin/sh", "-c", 'cat -- "$1"', "sh", in_path], data=b"", stdout=target)
        if code != 0:
            raise AnsibleError("could not read %s in the container: %s" % (in_path, to_text(err)))

    def close(self) -> None:
        self._connected = False
