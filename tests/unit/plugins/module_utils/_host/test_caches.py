# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a running server keeps its caches (its environment, else each tool's default under its HOME), read from a /proc
of the test's own, and whether a user could use a place (the permission bits of real directories)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host import caches


@pytest.mark.parametrize("env, downloads, expected", [
    ({}, None, {"HF_HOME": "/h/.cache/huggingface", "HF_HUB_CACHE": "/h/.cache/huggingface/hub", "VLLM_CACHE_ROOT": "/h/.cache/vllm",
                "TRITON_CACHE_DIR": "/h/.triton/cache", "FLASHINFER_WORKSPACE_BASE": "/h"}),
    ({"XDG_CACHE_HOME": "/x", "TRITON_HOME": "/t"}, None,
     {"HF_HOME": "/x/huggingface", "HF_HUB_CACHE": "/x/huggingface/hub", "VLLM_CACHE_ROOT": "/x/vllm", "TRITON_CACHE_DIR": "/t/.triton/cache",
      "FLASHINFER_WORKSPACE_BASE": "/h"}),
    ({"HF_HOME": "~/hf", "VLLM_CACHE_ROOT": "/v", "TRITON_CACHE_DIR": "/tc", "FLASHINFER_WORKSPACE_BASE": "/f"}, "/weights",
     {"HF_HOME": "/h/hf", "HF_HUB_CACHE": "/weights", "VLLM_CACHE_ROOT": "/v", "TRITON_CACHE_DIR": "/tc", "FLASHINFER_WORKSPACE_BASE": "/f"}),
    ({"HUGGINGFACE_HUB_CACHE": "/old-name"}, None, {"HF_HUB_CACHE": "/old-name"}),
])
def test_locations_as_each_tool_settles_them(env, downloads, expected):
    found = caches.locations(env, "/h", downloads)
    assert {name: found[name] for name in expected} == expected


def fake_proc(root, pid, env, argv, uid):
    where = root / str(pid)
    where.mkdir(parents=True)
    if env is not None:
        (where / "environ").write_bytes(b"".join(("%s=%s" % item).encode() + b"\0" for item in env.items()))
    (where / "cmdline").write_bytes(b"\0".join(word.encode() for word in argv) + b"\0")
    (where / "status").write_text("Name:\tvllm\nUid:\t%d\t%d\t%d\t%d\n" % (uid, uid, uid, uid))


def test_read_server_from_proc(tmp_path):
    fake_proc(tmp_path, 42, {"HOME": "/home/ops", "HF_HOME": "/data/hf", "PATH": "/bin", "HF_TOKEN": "hf_secret"},
              ["vllm", "serve", "m", "--download-dir", "/data/w"], 65534)
    found = caches.read_server(42, str(tmp_path))
    assert found["uid"] == 65534 and found["user"] == "nobody" and found["read"] and found["home"] == "/home/ops"
    # only the variables that place caches: never a secret
    assert found["env"] == {"HOME": "/home/ops", "HF_HOME": "/data/hf"} and found["download_dir"] == "/data/w"
    assert found["locations"]["HF_HOME"] == "/data/hf" and found["locations"]["HF_HUB_CACHE"] == "/data/w"


def test_an_unreadable_environment_says_so(tmp_path):
    fake_proc(tmp_path, 43, None, ["vllm", "serve", "m"], 0)
    found = caches.read_server(43, str(tmp_path))
    assert found["read"] is False and found["locations"] == {} and found["user"] == "root"


def test_the_user_the_new_server_runs_as():
    assert caches.run_as("process")["uid"] == os.geteuid()
    assert caches.run_as("systemd", "")["user"] == "root" and caches.run_as("systemd", "nobody")["uid"] == 65534
    assert caches.run_as("container", "", "65534:65534") == {"user": "nobody", "uid": 65534, "gids": [65534]}
    assert caches.run_as("container", "", "4242") == {"user": "uid 4242", "uid": 4242, "gids": []}
    assert caches.run_as("systemd", "no-such-user-here")["uid"] is None


@pytest.fixture
def open_dir():
    """A directory every user may reach (pytest's own tmp_path is private to its user)."""
    where = Path(tempfile.mkdtemp(prefix="gpuops-usable-"))
    where.chmod(0o755)
    yield where
    shutil.rmtree(where)


def test_usable_reads_the_permission_bits(open_dir):
    tmp_path = open_dir
    private = tmp_path / "private"
    (private / "hf").mkdir(parents=True)
    private.chmod(0o700)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    owner = os.stat(private).st_uid
    other = 65534 if owner != 65534 else 65533
    assert caches.usable(str(private / "hf"), 0, [0])
    assert caches.usable(str(private / "hf"), owner, [])
    assert not caches.usable(str(private / "hf"), other, [other])
    # a place not made yet: where the nearest directory that exists lets the user make it
    assert caches.usable(str(shared / "a" / "b"), other, [other])
    assert not caches.usable(str(private / "new"), other, [other])
    assert not caches.usable(str(private / "hf"), None, [])


def test_reading_names_the_places_this_user_may_not_make(tmp_path):
    fake_proc(tmp_path, 44, {"HOME": "/home/ops"}, ["vllm", "serve", "m"], 65534)
    found = caches.reading(44, "process", "", ["/proc/1/no-such-place"], proc_root=str(tmp_path))
    assert found["old"]["pid"] == 44 and set(found["old"]["usable"]) == set(caches.CACHES)
    assert found["creatable"] == ({} if os.geteuid() == 0 else {"/proc/1/no-such-place": False})
    assert caches.reading(None, "process", "")["old"] is None
