# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The state directory: where it is, its files, atomic writes and key=value files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional

STATE_ENV = "GPUOPS_SIM_STATE"


class StateError(Exception):
    """A state directory that is missing, malformed or asked for something impossible."""


class StateDir:
    """Paths of one simulated host's state directory."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    @property
    def host(self) -> Path:
        return self.root / "host"

    @property
    def gpus(self) -> Path:
        return self.root / "gpus"

    @property
    def allocs(self) -> Path:
        return self.root / "allocs"

    @property
    def procs(self) -> Path:
        return self.root / "procs"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def dev(self) -> Path:
        """The host's NVIDIA device files (plain files: nvidiactl, nvidia-uvm, nvidia<i>), never the machine's /dev."""
        return self.root / "dev"

    def exists(self) -> bool:
        return self.host.is_file()

    def require(self) -> "StateDir":
        if not self.exists():
            raise StateError(f"no simulated host in {self.root} (run: gpusim --state {self.root} create)")
        return self

    def make_dirs(self) -> None:
        for path in (self.root, self.allocs, self.procs, self.logs):
            path.mkdir(parents=True, exist_ok=True)


def resolve_state(arg: Optional[str]) -> StateDir:
    """The state directory from --state, else from GPUOPS_SIM_STATE."""
    value = arg or os.environ.get(STATE_ENV)
    if not value:
        raise StateError(f"no state directory: pass --state DIR or set {STATE_ENV}")
    return StateDir(Path(value))


def atomic_write(path: Path, text: str) -> None:
    """Write NAME.tmp.<pid>, then rename over NAME, so readers never see half a file."""
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def content_lines(path: Path) -> List[str]:
    """The lines of a state file that carry data (no blank lines, no # comments)."""
    lines: List[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            lines.append(line)
    return lines


def read_kv(path: Path) -> Dict[str, str]:
    values: Dict[str, str] = {}
    for line in content_lines(path):
        key, sep, value = line.partition("=")
        if not sep:
            raise StateError(f"{path}: not a key=value line: {line!r}")
        values[key.strip()] = value.strip()
    return values


def write_kv(path: Path, values: Dict[str, str]) -> None:
    atomic_write(path, "".join(f"{key}={value}\n" for key, value in values.items()))
