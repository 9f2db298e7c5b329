# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one playbook runner of the integration, fleet and systemd tests: real `ansible-playbook` runs with this
checkout's ansible.cfg and collection path, and the two readings of its output every suite uses.

Found through pytest's `pythonpath` setting (each suite's pytest.ini names tests/support).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import typing as t
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv's ansible-playbook, next to the interpreter running the tests
PLAYBOOKS = REPO / "playbooks"

__all__ = ["REPO", "BIN", "PLAYBOOKS", "ansible_env", "run_playbook", "flat", "recap"]


def ansible_env(**extra: str) -> t.Dict[str, str]:
    """This process's environment with ansible.cfg and .collections/ of this checkout, no colour, the venv first."""
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": "%s:%s" % (BIN, env.get("PATH", "")),
    })
    env.update(extra)
    return env


def run_playbook(playbook: t.Union[str, Path], inventory: Path, *extra: str, timeout: int = 300,
                 env: t.Optional[t.Dict[str, str]] = None) -> "subprocess.CompletedProcess[str]":
    """Run the real ansible-playbook (a relative name is one of the collection's playbooks/); returns the completed
    process, stdout and stderr as text, whatever its exit status."""
    path = Path(playbook) if os.path.isabs(playbook) else PLAYBOOKS / playbook
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(path), *extra],
                          env=env or ansible_env(), capture_output=True, text=True, timeout=timeout, check=False)


def flat(output: str) -> str:
    """The output with every run of whitespace made one space (the YAML callback wraps long lines)."""
    return " ".join(output.split())


def recap(output: str) -> t.Dict[str, t.Dict[str, int]]:
    """PLAY RECAP counters per host: {host: {"ok": n, "changed": n, ...}}."""
    found = {}
    for host, counters in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M):
        found[host] = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", counters)}
    return found
