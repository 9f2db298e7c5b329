# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release a user reads: galaxy.yml's version is released in changelogs/changelog.yaml, CHANGELOG.rst is what
antsibull-changelog writes from it (never edited by hand, never stale), its breaking changes and deprecations stand
under their headings, and the README links it.

Every deprecation the code announces (a removal version in the modules' deprecated aliases or the role's warnings)
names a version later than the one released, so no old name is removed in the release that deprecates it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def galaxy_version() -> str:
    return str(yaml.safe_load((REPO / 'galaxy.yml').read_text(encoding='utf-8'))['version'])


def changes() -> dict:
    return yaml.safe_load((REPO / 'changelogs' / 'changelog.yaml').read_text(encoding='utf-8'))


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split('.'))


def test_the_version_galaxy_builds_is_released() -> None:
    releases = changes()['releases']
    version = galaxy_version()
    assert version in releases, 'galaxy.yml says %s, changelogs/changelog.yaml releases only %s' % (version, sorted(releases))
    assert max(releases, key=version_key) == version, 'a release newer than galaxy.yml\'s %s: %s' % (version, sorted(releases))
    assert releases[version].get('release_date'), releases[version]


def test_the_release_names_its_breaking_changes_and_deprecations() -> None:
    release = changes()['releases'][galaxy_version()]['changes']
    for section in ('release_summary', 'breaking_changes', 'deprecated_features'):
        assert release.get(section), 'the %s release has no %s' % (galaxy_version(), section)
    deprecated = ' '.join(release['deprecated_features'])
    # the names an operator's inventory may still use, each with the one that replaces it
    for old in ('vllm_restart_become', 'vllm_server_force_restart', 'vllm_restart_force', 'vllm_server_memory_threshold_mib',
                'vllm_server_verify_launch'):
        assert old in deprecated, '%s is not among the deprecated features' % old
    text = (REPO / 'CHANGELOG.rst').read_text(encoding='utf-8')
    head = text.split('\nv%s\n' % galaxy_version(), 1)
    assert len(head) == 2, 'CHANGELOG.rst has no section for v%s' % galaxy_version()
    this_release = re.split(r'\nv\d+\.\d+\.\d+\n', head[1], maxsplit=1)[0]
    for heading in ('Breaking Changes / Porting Guide', 'Deprecated Features'):
        assert '\n%s\n' % heading in this_release, '%r is not a heading of v%s in CHANGELOG.rst' % (heading, galaxy_version())


def test_changelog_rst_is_generated_from_the_changes_file(tmp_path: Path) -> None:
    copy = tmp_path / 'collection'
    (copy / 'changelogs').mkdir(parents=True)
    for name in ('changelog.yaml', 'config.yaml'):
        shutil.copy(REPO / 'changelogs' / name, copy / 'changelogs' / name)
    shutil.copy(REPO / 'galaxy.yml', copy / 'galaxy.yml')
    env = dict(os.environ, PATH='%s:%s' % (VENV_BIN, os.environ.get('PATH', '')))
    subprocess.run([str(VENV_BIN / 'antsibull-changelog'), 'generate'], cwd=copy, env=env,
                   capture_output=True, text=True, timeout=120, check=True)
    assert (copy / 'CHANGELOG.rst').read_text(encoding='utf-8') == (REPO / 'CHANGELOG.rst').read_text(encoding='utf-8'), (
        'CHANGELOG.rst differs from what `antsibull-changelog generate` writes: run it, never edit the file')


def test_the_readme_links_the_changelog() -> None:
    assert re.search(r'\]\((\./)?CHANGELOG\.rst\)', (REPO / 'README.md').read_text(encoding='utf-8')), (
        'README.md does not link CHANGELOG.rst')


def removal_versions() -> list[tuple[str, str]]:
    """(where, version) for every removal version the code announces."""
    found = []
    pattern = re.compile(r'''(?:version|removed_in|removal_version)['"]?\s*[:=]\s*['"](\d+\.\d+\.\d+)['"]''')
    for root in ('plugins', 'roles', 'playbooks', 'meta'):
        for path in sorted((REPO / root).rglob('*')):
            if path.suffix not in ('.py', '.yml', '.yaml') or not path.is_file():
                continue
            for line_no, line in enumerate(path.read_text(encoding='utf-8').splitlines(), 1):
                if 'deprecat' not in line and 'removed_in' not in line and 'removal_version' not in line:
                    continue
                for version in pattern.findall(line):
                    found.append(('%s:%d' % (path.relative_to(REPO), line_no), version))
    return found


def test_nothing_is_removed_in_the_release_that_deprecates_it() -> None:
    released = version_key(galaxy_version())
    assert removal_versions(), 'no removal version found: the deprecations moved where this test does not look'
    early = [(where, version) for where, version in removal_versions() if version_key(version) <= released]
    assert not early, 'removal versions not after %s: %s' % (galaxy_version(), early)
