# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's systemd unit: accepted by `systemd-analyze verify`, and no inventory value becomes a second command,
a variable expansion or a specifier; its environment comes from an EnvironmentFile= of mode 0600, and no secret is
in the unit. The Makefile installs systemd-analyze (Debian package systemd)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_run import PROBES as PLAYBOOKS, run_playbook

from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.systemd import (
    create_private, env_file_text, PRIVATE_MODE, write_if_changed,
)

MODEL = 'org/my model; touch /tmp/gpuops-injected $HOME `id` %h "q" \\ end'
ARGS = [";", "--served-model-name", "a$(id)", "--max-model-len", "8192"]
TOKEN = "hf_secret123"
KEY = "sk-secret456"


def render(tmp_path, **extra):
    unit = tmp_path / "gpuops-vllm-8000.service"
    extra_vars = dict({"unit_out": str(unit), "env_out": str(tmp_path / "vllm-8000.env"),
                       "vllm_server_model": MODEL, "vllm_server_args": ARGS,
                       "vllm_server_command": [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"],
                       "vllm_server_env": {"NCCL_PROTO": "LL", "WEIRD": 'a b "$HOME" %h'},
                       "vllm_server_gpus": [4, 5], "vllm_server_tensor_parallel_size": 2,
                       "vllm_server_state_dir": str(tmp_path)}, **extra)
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps(extra_vars))
    run = run_playbook(PLAYBOOKS / "render_unit_files.yml", tmp_path / "none", "-e", "@%s" % vars_file)
    assert run.returncode == 0, run.stdout + run.stderr
    # the environment file as vllm_process writes it in systemd mode, from what the role hands it
    env = Path(extra_vars["env_out"])
    inputs = json.loads(Path(str(env) + ".inputs.json").read_text())
    create_private(str(env))
    write_if_changed(str(env), env_file_text("vllm-8000", inputs["env"], inputs["exec_env"]), PRIVATE_MODE)
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
    assert "EnvironmentFile=%s/vllm-8000.env\n" % tmp_path in text and "Environment=" not in text.replace("EnvironmentFile=", "")
    assert env_file(tmp_path)["CUDA_VISIBLE_DEVICES"] == "4,5"


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


def env_file(folder):
    """NAME -> value of the environment file, read as systemd reads an EnvironmentFile= whose values are all in double
    quotes: within them, a backslash before one of \\ " $ ` stands for that character (systemd's SHELL_NEED_ESCAPE)."""
    found = {}
    for line in (folder / "vllm-8000.env").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', line)
        assert match, "not a NAME=\"value\" line: %r" % line
        found[match.group(1)] = re.sub(r'\\([\\"$`])', r"\1", match.group(2))
    return found


def test_environment_values_are_literal(tmp_path, analyze):
    unit = render(tmp_path)
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, check=False,
                          env={"SYSTEMD_LOG_LEVEL": "debug", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0
    # systemd parsed the setting (its dump names the file); the file holds each value exactly
    assert "EnvironmentFile: %s/vllm-8000.env" % tmp_path in proc.stdout + proc.stderr
    assert 'WEIRD="a b \\"\\$HOME\\" %h"' in (tmp_path / "vllm-8000.env").read_text()
    assert env_file(tmp_path) == {"CUDA_VISIBLE_DEVICES": "4,5", "NCCL_PROTO": "LL", "WEIRD": 'a b "$HOME" %h'}


def test_no_secret_in_the_unit(tmp_path, analyze):
    """HF_TOKEN and --api-key's value reach the server through the 0600 environment file only: the unit (which
    systemctl shows every user) has the EnvironmentFile= and a ${VAR} reference, as systemd's own parse shows."""
    unit = render(tmp_path, vllm_server_env={"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL"},
                  vllm_server_args=["--api-key", KEY, "--hf-token=%s$x" % TOKEN, "--max-model-len", "8192"])
    text = unit.read_text()
    assert TOKEN not in text and KEY not in text
    assert "EnvironmentFile=%s/vllm-8000.env" % tmp_path in text
    env = tmp_path / "vllm-8000.env"
    assert os.stat(env).st_mode & 0o777 == 0o600
    values = env_file(tmp_path)
    assert values["HF_TOKEN"] == TOKEN and values["NCCL_PROTO"] == "LL"
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, check=False,
                          env={"SYSTEMD_LOG_LEVEL": "debug", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and TOKEN not in proc.stdout + proc.stderr and KEY not in proc.stdout + proc.stderr
    assert "EnvironmentFile: %s/vllm-8000.env" % tmp_path in proc.stdout + proc.stderr
    (line,) = re.findall(r"-> ExecStart:\n\t\t\tCommand Line: (.*)", proc.stdout + proc.stderr)
    words = shlex.split(line)
    # one word each, expanded by systemd at exec time from the environment file: a $ left single (\$), not $$
    assert words[-5:] == ["--api-key", "\\${GPUOPS_SECRET_ARG_10}", "--hf-token=\\${GPUOPS_SECRET_ARG_11}", "--max-model-len", "8192"]
    assert values["GPUOPS_SECRET_ARG_10"] == KEY and values["GPUOPS_SECRET_ARG_11"] == TOKEN + "$x"
