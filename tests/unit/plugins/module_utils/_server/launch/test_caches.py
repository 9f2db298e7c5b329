# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The launch makes the role's cache places (owned by the server's user) and mounts every place in a container."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import caches


def test_prepare_makes_the_missing_directories_and_keeps_what_is_there(tmp_path):
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "canary").write_text("compiled")
    made = caches.prepare([str(tmp_path / "vllm"), str(tmp_path / "deep" / "triton"), str(tmp_path / "deep" / "triton") + "/"])
    assert made == [str(tmp_path / "deep"), str(tmp_path / "deep" / "triton")]
    assert (tmp_path / "vllm" / "canary").read_text() == "compiled" and (tmp_path / "deep" / "triton").is_dir()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_prepare_gives_what_it_made_to_the_owner(tmp_path):
    caches.prepare([str(tmp_path / "a" / "b")], "nobody")
    caches.prepare([str(tmp_path / "c")], "4242")
    assert os.stat(tmp_path / "a").st_uid == 65534 and os.stat(tmp_path / "a" / "b").st_uid == 65534
    assert os.stat(tmp_path / "c").st_uid == 4242 and os.stat(tmp_path).st_uid == 0


@pytest.mark.parametrize("paths, owner, words", [
    (["relative/place"], "", "caches.paths: 'relative/place' is not an absolute path"),
    (["/proc/1/no-place"], "", "caches.paths: cannot make /proc/1/no-place"),
    (["/tmp"], "no-such-user-here", "caches.owner: no user 'no-such-user-here'"),
])
def test_prepare_names_the_option(paths, owner, words):
    with pytest.raises(caches.CacheError, match=words.replace("(", r"\(").replace(")", r"\)")):
        caches.prepare(paths, owner)


def test_a_file_in_the_way_is_named(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(caches.CacheError, match="is not a directory|cannot make"):
        caches.prepare([str(tmp_path / "file")])


def test_volumes_mount_each_place_at_its_own_path_once():
    assert caches.volumes(["/a/b", "/a/b/", "/c"]) == ["/a/b:/a/b", "/c:/c"]
