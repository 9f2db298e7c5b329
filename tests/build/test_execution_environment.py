# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""execution-environment.yml: `ansible-builder create` writes a build context that holds this collection.

Building the image needs a container engine these machines lack; the context is what the engine would build,
so it is checked here: the Containerfile's stages, the pinned ansible-core, and the collection tarball inside,
which must install and be this collection.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_ansible_builder_creates_a_context_with_the_collection(tmp_path):
    work = tmp_path / "ee"
    work.mkdir()
    shutil.copy(REPO / "execution-environment.yml", work)
    shutil.copytree(REPO / "ee", work / "ee")
    build = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", str(REPO), "--force",
                            "--output-path", str(work / "build" / "ee")], capture_output=True, text=True, timeout=300, check=False)
    assert build.returncode == 0, build.stdout + build.stderr
    create = subprocess.run([str(BIN / "ansible-builder"), "create", "-f", "execution-environment.yml", "-c", "context",
                             "--output-filename", "Containerfile"], cwd=work, capture_output=True, text=True, timeout=300,
                            check=False)
    assert create.returncode == 0, create.stdout + create.stderr
    context = work / "context"
    containerfile = (context / "Containerfile").read_text()
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core==2.19.14 ansible-runner==' in containerfile
    assert "FROM $EE_BASE_IMAGE AS base" in containerfile and "FROM base AS final" in containerfile
    # the tarball is copied in and renamed before the galaxy stage installs it
    galaxy_stage = containerfile[containerfile.index("AS galaxy"):containerfile.index("AS builder")]
    assert galaxy_stage.index("COPY _build/collections/") < galaxy_stage.index("ansible-galaxy collection install")
    requirements = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert requirements["collections"] == [{"name": "/build/collections/gpuops-fleet.tar.gz", "type": "file"}]
    assert "matplotlib==" in (context / "_build" / "requirements.txt").read_text()
    assert "openssh-clients [platform:rpm]" in (context / "_build" / "bindep.txt").read_text()

    (tarball,) = list((context / "_build" / "collections").glob("gpuops-fleet-*.tar.gz"))
    with tarfile.open(tarball) as archive:
        manifest = yaml.safe_load(archive.extractfile("MANIFEST.json"))  # JSON is YAML
        names = archive.getnames()
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert manifest["collection_info"]["namespace"] == "gpuops" and manifest["collection_info"]["version"] == galaxy["version"]
    assert {"playbooks/gpu_cleanup.yml", "playbooks/restart_vllm.yml", "roles/vllm_server/tasks/main.yml"} <= set(names)
    installed = tmp_path / "collections"
    install = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "--force", str(tarball), "-p", str(installed)],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert install.returncode == 0, install.stdout + install.stderr
    assert (installed / "ansible_collections" / "gpuops" / "fleet" / "plugins" / "modules" / "gpu_reclaim.py").exists()
