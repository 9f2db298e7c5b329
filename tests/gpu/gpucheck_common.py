# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the GPU checks share: read-only nvidia-smi, running the collection's modules, the output folder.

The modules run through Ansible when this Python has ansible-core (a one-task playbook on localhost),
else through the module_utils they call, with the modules' defaults.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

# nvidia-smi may only be asked questions: never -r (reset), -pm, -pl, -c, -mig, -e, -ac, ... (they change the GPU)
_SMI_ALLOWED = ("--query-gpu=", "--query-compute-apps=", "--format=")


class CheckError(Exception):
    """A check could not be done (as opposed to a check that found a difference)."""


def nvidia_smi(*args: str) -> List[List[str]]:
    """Rows of a read-only nvidia-smi CSV query (the arguments are checked against an allowlist first)."""
    for arg in args:
        if not arg.startswith(_SMI_ALLOWED):
            raise CheckError(f"refusing to run nvidia-smi {arg}: these checks only query")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise CheckError("nvidia-smi is not on PATH")
    done = subprocess.run([smi, *args], capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise CheckError(f"nvidia-smi {' '.join(args)} failed ({done.returncode}): {done.stdout.strip()} {done.stderr.strip()}")
    return [[cell.strip() for cell in row] for row in csv.reader(done.stdout.splitlines(), skipinitialspace=True) if row]


def smi_mib(cell: str) -> Optional[int]:
    """An integer MiB cell of a `nounits` query; None for [N/A], [Not Supported] and the like."""
    return int(cell) if cell.isdigit() else None


def smi_memory_used() -> Dict[int, int]:
    """GPU index -> memory.used MiB, as nvidia-smi reports it."""
    rows = nvidia_smi("--query-gpu=index,memory.used", "--format=csv,noheader,nounits")
    return {int(index): int(used) for index, used in rows}


def within(first: Optional[int], second: Optional[int], fraction: float = 0.01, floor_mib: int = 8) -> bool:
    """Equal within ``fraction`` of the larger value (and at least ``floor_mib``: near-idle values, MiB rounding)."""
    if first is None or second is None:
        return first is None and second is None
    return abs(first - second) <= max(fraction * max(first, second), floor_mib)


class Modules:
    """Runs gpu_facts / gpu_reclaim with ansible-playbook (when importable and not ``direct``) or through module_utils."""

    def __init__(self, work: Path, direct: bool) -> None:
        self.work = work
        collections = work / "collections"
        link = collections / "ansible_collections" / "gpuops" / "fleet"
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(REPO)
        self.collections = collections
        ansible = Path(sys.executable).parent / "ansible-playbook"
        self.ansible: Optional[Path] = None
        self._why_direct = "--direct" if direct else "no ansible-core in this Python"
        if not direct and importlib.util.find_spec("ansible") is not None and ansible.exists():
            self.ansible = ansible

    @property
    def how(self) -> str:
        return f"ansible-playbook ({self.ansible})" if self.ansible else f"module_utils directly ({self._why_direct})"

    def run(self, module: str, args: Dict[str, Any]) -> Dict[str, Any]:
        """The module's result; ``failed`` is true when the module failed."""
        if self.ansible:
            return self._ansible(module, args)
        return _DIRECT[module](args)

    def _config(self) -> Path:
        """An empty ansible.cfg: no user or project configuration changes how the module runs."""
        config = self.work / "ansible.cfg"
        if not config.exists():
            config.write_text("[defaults]\n", encoding="utf-8")
        return config

    def _ansible(self, module: str, args: Dict[str, Any]) -> Dict[str, Any]:
        tree = self.work / "ansible-tree"
        shutil.rmtree(tree, ignore_errors=True)
        env = dict(os.environ)
        env.update({
            "ANSIBLE_COLLECTIONS_PATH": str(self.collections),
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            "ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.tree",  # the result as JSON, one file per host
            "ANSIBLE_CALLBACK_TREE_DIR": str(tree),
            "ANSIBLE_HOME": str(self.work / "ansible-home"),
            "ANSIBLE_LOCAL_TEMP": str(self.work / "ansible-tmp"),
            "ANSIBLE_REMOTE_TEMP": str(self.work / "ansible-tmp"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_CONFIG": str(self._config()),
        })
        playbook = self.work / f"{module}.yml"
        task = {f"gpuops.fleet.{module}": args, "ignore_errors": True}
        # JSON is YAML: a one-task play on localhost, the module run by this Python
        playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}]), encoding="utf-8")
        argv = [str(self.ansible), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)]
        done = subprocess.run(argv, cwd=str(self.work), env=env, capture_output=True, text=True, timeout=300, check=False)
        try:
            result: Dict[str, Any] = json.loads((tree / "localhost").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CheckError(f"ansible-playbook with gpuops.fleet.{module} gave no result ({exc}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}") from None
        return result


def _missing(name: str) -> None:
    raise CheckError(f"{name} is not importable in this Python")


def _direct_facts(args: Dict[str, Any]) -> Dict[str, Any]:
    """gpu_facts without Ansible: the module's own steps (module_utils._gpu.facts.run_facts)."""
    import psutil  # pylint: disable=import-outside-toplevel
    import pynvml  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.facts import run_facts  # pylint: disable=import-outside-toplevel

    result, warnings, failed = run_facts(args, pynvml, psutil, _missing)
    return dict(result, failed=failed, warnings=warnings)


def _direct_reclaim(args: Dict[str, Any]) -> Dict[str, Any]:
    """gpu_reclaim without Ansible: the module's own steps (module_utils._reclaim.run.run_reclaim), its defaults."""
    import psutil  # pylint: disable=import-outside-toplevel
    import pynvml  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.run import run_reclaim  # pylint: disable=import-outside-toplevel

    result, warnings, failed = run_reclaim(args, False, False, lambda: (pynvml, psutil))
    return dict(result, failed=failed, warnings=warnings)


_DIRECT = {"gpu_facts": _direct_facts, "gpu_reclaim": _direct_reclaim}


def save(work: Path, name: str, data: Any) -> None:
    """Write an artefact into the work folder (and $OUT when set): JSON for objects, text for str."""
    text = data if isinstance(data, str) else json.dumps(data, indent=2, default=str) + "\n"
    for folder in filter(None, [str(work), os.environ.get("OUT")]):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / name).write_text(text, encoding="utf-8")


def table(headers: List[str], rows: List[List[Any]]) -> str:
    cells = [headers] + [["" if value is None else str(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(value.ljust(widths[i]) for i, value in enumerate(row)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
