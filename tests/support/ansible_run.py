# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one playbook runner of the integration, fleet and systemd tests: real `ansible-playbook` runs with this
checkout's ansible.cfg and collection path (to its end, `run_playbook`, or in the background, `start_playbook`), one
module run through the integration suite's probe playbooks (`run_module`), and the two readings of its output every
suite uses.

Found through pytest's `pythonpath` setting (each suite's pytest.ini names tests/support).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import typing as t
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv's ansible-playbook, next to the interpreter running the tests
PLAYBOOKS = REPO / "playbooks"
RESTART = PLAYBOOKS / "restart_vllm.yml"
PROBES = REPO / "tests" / "integration" / "playbooks"  # probe_<module>.yml: one module run, its result in a file

__all__ = ["REPO", "BIN", "PLAYBOOKS", "RESTART", "PROBES", "ansible_env", "playbook_argv", "run_playbook", "start_playbook", "run_module", "flat", "recap"]


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


def playbook_argv(playbook: t.Union[str, Path], inventory: Path, *extra: str) -> t.List[str]:
    """The ansible-playbook command line (a relative name is one of the collection's playbooks/)."""
    path = Path(playbook) if os.path.isabs(playbook) else PLAYBOOKS / playbook
    return [str(BIN / "ansible-playbook"), "-i", str(inventory), str(path), *extra]


def run_playbook(playbook: t.Union[str, Path], inventory: Path, *extra: str, timeout: int = 300,
                 env: t.Optional[t.Dict[str, str]] = None) -> "subprocess.CompletedProcess[str]":
    """Run the real ansible-playbook to its end; returns the completed process, stdout and stderr as text, whatever
    its exit status."""
    return subprocess.run(playbook_argv(playbook, inventory, *extra), env=env or ansible_env(), capture_output=True,
                          text=True, timeout=timeout, check=False)


def start_playbook(playbook: t.Union[str, Path], inventory: Path, *extra: str, env: t.Optional[t.Dict[str, str]] = None,
                   **popen: t.Any) -> "subprocess.Popen":
    """Start the real ansible-playbook in the background (the caller waits for it or ends it by its PID); `popen`
    are subprocess.Popen's other arguments (stdout, stderr, text, start_new_session, ...)."""
    return subprocess.Popen(playbook_argv(playbook, inventory, *extra), env=env or ansible_env(), **popen)  # pylint: disable=consider-using-with


def run_module(module: str, inventory: Path, result_dir: Path, args: t.Optional[t.Dict[str, t.Any]] = None,
               *extra: str) -> t.Dict[str, t.Any]:
    """Run one gpuops.fleet module on every host with ansible-playbook; return {host: result}."""
    result_dir.mkdir(parents=True, exist_ok=True)
    vars_file = result_dir / "probe-vars.json"
    vars_file.write_text(json.dumps({"probe_args": args or {}, "probe_result_dir": str(result_dir)}))
    proc = run_playbook(PROBES / ("probe_%s.yml" % module), inventory, "-e", "@%s" % vars_file, *extra)
    results = {}
    for path in sorted(result_dir.glob("*.result.json")):
        results[path.name[:-len(".result.json")]] = json.loads(path.read_text())
        path.unlink()
    if not results:
        raise AssertionError("module probe produced no result:\n%s\n%s" % (proc.stdout, proc.stderr))
    return results


def flat(output: str) -> str:
    """The output with every run of whitespace made one space (the YAML callback wraps long lines)."""
    return " ".join(output.split())


def recap(output: str) -> t.Dict[str, t.Dict[str, int]]:
    """PLAY RECAP counters per host: {host: {"ok": n, "changed": n, ...}}."""
    found = {}
    for host, counters in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M):
        found[host] = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", counters)}
    return found
