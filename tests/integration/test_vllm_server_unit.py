# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's systemd unit: accepted by `systemd-analyze verify`, and no inventory value becomes a second command,
a variable expansion or a specifier. The Makefile installs systemd-analyze (Debian package systemd)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from simfleet import PLAYBOOKS, run_playbook

MODEL = 'org/my model; touch /tmp/gpuops-injected $HOME `id` %h "q" \\ end'
ARGS = [";", "--served-model-name", "a$(id)", "--max-model-len", "8192"]


def render(tmp_path, **extra):
    unit = tmp_path / "gpuops-vllm-8000.service"
    extra_vars = dict({"unit_out": str(unit), "vllm_server_model": MODEL, "vllm_server_args": ARGS,
                       "vllm_server_command": [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"],
                       "vllm_server_env": {"NCCL_PROTO": "LL", "WEIRD": 'a b "$HOME" %h'},
                       "vllm_server_gpus": [4, 5], "vllm_server_tensor_parallel_size": 2,
                       "vllm_server_state_dir": str(tmp_path)}, **extra)
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps(extra_vars))
    run = run_playbook(PLAYBOOKS / "render_unit.yml", tmp_path / "none", "-e", "@%s" % vars_file)
    assert run.returncode == 0, run.stdout + run.stderr
    return unit


@pytest.fixture
def analyze():
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.fail("systemd-analyze is missing: the README's test command installs Debian's systemd package")
    return path


def test_unit_passes_systemd_analyze_verify(tmp_path, analyze):
    unit = render(tmp_path)
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr
    text = unit.read_text()
    assert "KillMode=control-group" in text and "TimeoutStopSec=30" in text
    assert 'Environment="CUDA_VISIBLE_DEVICES=4,5"' in text


def test_every_word_reaches_the_program_exactly(tmp_path, analyze):
    """systemd's own parse of ExecStart (its debug dump) gives back exactly the argv, as ONE command."""
    unit = render(tmp_path)
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, check=False,
                          env={"SYSTEMD_LOG_LEVEL": "debug", "PATH": "/usr/bin:/bin"})
    blocks = re.findall(r"-> ExecStart:\n((?:\t\t\t.*\n)+)", proc.stdout + proc.stderr)
    assert len(blocks) == 1, proc.stdout[-2000:]
    lines = re.findall(r"Command Line: (.*)", blocks[0])
    assert len(lines) == 1, "the ';' in the model or the arguments started a second command: %s" % lines
    # systemd prints $ and ` escaped (\$, \`) and keeps $$ until exec time, when $$ becomes $; % specifiers are
    # resolved at load; shlex undoes the quotes and the \" and \\ escapes
    words = [word.replace("\\$", "$").replace("\\`", "`").replace("$$", "$") for word in shlex.split(lines[0])]
    expected = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", MODEL,
                "--tensor-parallel-size", "2", "--port", "8000"] + ARGS
    assert words == expected


def test_environment_values_are_literal(tmp_path, analyze):
    unit = render(tmp_path)
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, check=False,
                          env={"SYSTEMD_LOG_LEVEL": "debug", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0
    assert 'Environment="WEIRD=a b \\"$HOME\\" %%h"' in unit.read_text()
