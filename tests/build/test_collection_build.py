# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build the collection as a release would, check the tarball, install it, use it.

`make build-test` runs this with the fake NVML built (`make sim`). The installed
copy is the only gpuops.fleet on the collections path, so ansible-doc and the
module run from the tarball's content, not from this checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import typing as t
from pathlib import Path

import pytest
import yaml

from gpusim.api import pid_alive, starttime  # simulator/ is on sys.path through pytest.ini's pythonpath

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
SIM_LIB_DIR = REPO / 'simulator' / 'build' / 'lib'

# paths (from the collection root) that are build or test output, never product
JUNK_PATHS = (
    '.ansible', '.ci', '.collections', '.git', '.pytest_cache', '.venv',
    'bench/results', 'build', 'dist', 'simulator/build', 'tests/output',
)
JUNK_DIR_NAMES = ('__pycache__', '.pytest_cache', '.mypy_cache', '.ruff_cache')
# written by ansible-galaxy itself
BUILD_METADATA = ('MANIFEST.json', 'FILES.json')
JUNK_SUFFIXES = ('.pyc', '.retry', '.tar.gz')

PRODUCT_FILES = (
    'MANIFEST.json', 'FILES.json', 'README.md', 'COPYING', 'LICENSES/GPL-3.0-or-later.txt',
    'meta/runtime.yml', 'changelogs/changelog.yaml', 'requirements/managed-host.txt', 'playbooks/prepare_hosts.yml',
    'plugins/modules/gpu_facts.py', 'simulator/nvml/Makefile', 'simulator/gpusim/__main__.py',
)

GPU_COUNT = 8
GPU_TOTAL_MIB = 97887
HOLDER_GPU = 3
HOLDER_MIB = 4096


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, '%s failed (%d):\n%s\n%s' % (' '.join(args), result.returncode, result.stdout, result.stderr)
    return result


def ansible_env(home: Path, collections_path: Path) -> dict[str, str]:
    """An environment that sees only the installed collection, not the checkout's ansible.cfg."""
    env = {key: value for key, value in os.environ.items() if not key.startswith('ANSIBLE_')}
    config = home / 'ansible.cfg'
    config.write_text('[defaults]\n', encoding='utf-8')
    env.update(
        PATH='%s:%s' % (VENV_BIN, env.get('PATH', '')),
        ANSIBLE_CONFIG=str(config),
        ANSIBLE_HOME=str(home / 'ansible-home'),
        ANSIBLE_COLLECTIONS_PATH=str(collections_path),
    )
    return env


@pytest.fixture(name='workdir', scope='module')
def workdir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp('collection-build')


@pytest.fixture(name='tarball', scope='module')
def tarball_fixture(workdir: Path) -> Path:
    env = ansible_env(workdir, workdir / 'unused')
    run(['ansible-galaxy', 'collection', 'build', '--output-path', str(workdir), str(REPO)], env, workdir)
    built = sorted(workdir.glob('gpuops-fleet-*.tar.gz'))
    assert len(built) == 1, built
    return built[0]


@pytest.fixture(name='members', scope='module')
def members_fixture(tarball: Path) -> list[str]:
    with tarfile.open(tarball) as archive:
        return [name[2:] if name.startswith('./') else name for name in archive.getnames()]


@pytest.fixture(name='installed_env', scope='module')
def installed_env_fixture(workdir: Path, tarball: Path) -> dict[str, str]:
    collections_path = workdir / 'collections'
    env = ansible_env(workdir, collections_path)
    run(['ansible-galaxy', 'collection', 'install', '--offline', '-p', str(collections_path), str(tarball)], env, workdir)
    assert (collections_path / 'ansible_collections' / 'gpuops' / 'fleet' / 'MANIFEST.json').is_file()
    return env


def is_junk(member: str) -> bool:
    parts = member.split('/')
    return (
        any(member == path or member.startswith(path + '/') for path in JUNK_PATHS)
        or any(part in JUNK_DIR_NAMES for part in parts)
        or member.endswith(JUNK_SUFFIXES)
    )


def test_tarball_has_no_build_junk(members: list[str]) -> None:
    junk = [member for member in members if is_junk(member)]
    assert not junk, 'build output in the collection tarball (extend build_ignore in galaxy.yml): %s' % junk


def source_files() -> set[str]:
    """Files a commit of this checkout would hold: tracked, or untracked and not ignored by git."""
    listing = subprocess.run(
        ['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True).stdout
    return {path for path in listing.split('\0') if path}


@pytest.mark.skipif(not (REPO / '.git').exists(), reason='not a git checkout')
def test_tarball_holds_only_source_files(tarball: Path) -> None:
    """Anything git ignores (caches, venvs, build output) is junk, whatever its name."""
    with tarfile.open(tarball) as archive:
        files = [member.name for member in archive.getmembers() if not member.isdir()]
    sources = source_files()
    extra = [name for name in files if name not in sources and name not in BUILD_METADATA]
    assert not extra, 'files git ignores are in the collection tarball (extend build_ignore in galaxy.yml): %s' % extra


def test_tarball_holds_the_product(members: list[str]) -> None:
    missing = [path for path in PRODUCT_FILES if path not in members]
    assert not missing, 'missing from the collection tarball: %s' % missing


def test_manifest_describes_the_collection(tarball: Path) -> None:
    with tarfile.open(tarball) as archive:
        member = archive.extractfile('MANIFEST.json')
        assert member is not None
        info = json.load(member)['collection_info']
    galaxy = yaml.safe_load((REPO / 'galaxy.yml').read_text(encoding='utf-8'))
    assert (info['namespace'], info['name'], info['version']) == ('gpuops', 'fleet', galaxy['version'])
    assert info['license'] == ['GPL-3.0-or-later']
    assert 'infrastructure' in info['tags']


def test_ansible_doc_renders_from_installed_copy(workdir: Path, installed_env: dict[str, str]) -> None:
    text = run(['ansible-doc', 'gpuops.fleet.gpu_facts'], installed_env, workdir).stdout
    assert 'gpuops.fleet.gpu_facts' in text
    assert 'OPTIONS' in text

    doc = json.loads(run(['ansible-doc', '--json', 'gpuops.fleet.gpu_facts'], installed_env, workdir).stdout)
    filename = doc['gpuops.fleet.gpu_facts']['doc']['filename']
    assert filename.startswith(str(workdir / 'collections') + os.sep), filename


def process_start_time(pid: int) -> str:
    """Field 22 of /proc/PID/stat (gpusim's reading): what the simulator compares to tell a reused PID."""
    start = starttime(pid)
    assert start is not None, 'PID %d is gone' % pid
    return str(start)


def write_state_dir(state: Path, holder_pid: int) -> None:
    """A simulated 8-GPU host (docs/simulator.md) with one process holding memory on one GPU."""
    (state / 'allocs').mkdir(parents=True)
    (state / 'host').write_text('driver_loaded=1\n', encoding='ascii')
    gpu_lines = [
        '\t'.join((
            str(index), 'GPU-%08x-0000-4000-8000-%012x' % (index, index), '00000000:%02X:00.0' % (0x18 + index),
            str(GPU_TOTAL_MIB), '512', '0', '0', 'NVIDIA RTX PRO 6000 Blackwell Server Edition',
        ))
        for index in range(GPU_COUNT)
    ]
    (state / 'gpus').write_text('\n'.join(gpu_lines) + '\n', encoding='ascii')
    (state / 'allocs' / ('%d-%d' % (holder_pid, HOLDER_GPU))).write_text(
        '%d %s %d %d C -\n' % (holder_pid, process_start_time(holder_pid), HOLDER_GPU, HOLDER_MIB), encoding='ascii')


@pytest.fixture(name='holder')
def holder_fixture() -> t.Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(['sleep', '600'])  # pylint: disable=consider-using-with
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def test_installed_module_reads_simulated_host(
        workdir: Path, installed_env: dict[str, str], holder: subprocess.Popen[bytes], tmp_path: Path) -> None:
    assert (SIM_LIB_DIR / 'libnvidia-ml.so.1').is_file(), 'fake NVML not built: run `make sim`'
    write_state_dir(tmp_path / 'state', holder.pid)
    env = dict(
        installed_env,
        LD_LIBRARY_PATH=str(SIM_LIB_DIR),
        GPUOPS_SIM_STATE=str(tmp_path / 'state'),
    )
    # --one-line: "localhost | SUCCESS => {...result as JSON...}"
    output = run(['ansible', 'localhost', '--one-line', '-m', 'gpuops.fleet.gpu_facts'], env, workdir).stdout
    result = json.loads(output.split(' => ', 1)[1])

    assert result.get('changed') is False
    gpus = result['ansible_facts']['gpus']
    assert [gpu['index'] for gpu in gpus] == list(range(GPU_COUNT))
    assert {gpu['memory_total_mib'] for gpu in gpus} == {GPU_TOTAL_MIB}
    holders = {gpu['index']: [(proc['pid'], proc['used_memory_mib']) for proc in gpu['processes']] for gpu in gpus}
    expected = {index: [] for index in range(GPU_COUNT)}
    expected[HOLDER_GPU] = [(holder.pid, HOLDER_MIB)]
    assert holders == expected


def test_installed_reclaim_frees_the_simulated_gpu(
        workdir: Path, installed_env: dict[str, str], holder: subprocess.Popen[bytes], tmp_path: Path) -> None:
    """gpu_reclaim from the tarball ends the holder and proves GPU 3 free; judged by the holder's own exit."""
    assert (SIM_LIB_DIR / 'libnvidia-ml.so.1').is_file(), 'fake NVML not built: run `make sim`'
    write_state_dir(tmp_path / 'state', holder.pid)
    bystander = subprocess.Popen(['sleep', '600'])  # pylint: disable=consider-using-with  # holds no GPU
    try:
        env = dict(installed_env, LD_LIBRARY_PATH=str(SIM_LIB_DIR), GPUOPS_SIM_STATE=str(tmp_path / 'state'))
        output = run(['ansible', 'localhost', '--one-line', '-m', 'gpuops.fleet.gpu_reclaim',
                      '-a', 'gpus=%d grace=2 timeout=20' % HOLDER_GPU], env, workdir).stdout
        result = json.loads(output.split(' => ', 1)[1])
        assert result['changed'] is True and result['verified'] is True, result
        assert [entry['pid'] for entry in result['killed']] == [holder.pid]
        # independent: the holder was ended by a signal (we reap it: it is our child), the bystander runs
        assert holder.wait(timeout=10) == -15
        assert pid_alive(bystander.pid)
        doc = json.loads(run(['ansible-doc', '--json', 'gpuops.fleet.gpu_reclaim'], installed_env, workdir).stdout)
        assert doc['gpuops.fleet.gpu_reclaim']['doc']['filename'].startswith(str(workdir / 'collections') + os.sep)
    finally:
        bystander.kill()
        bystander.wait()


def test_installed_prepare_hosts_reads_its_requirements(workdir: Path, installed_env: dict[str, str], tmp_path: Path) -> None:
    """gpuops.fleet.prepare_hosts by its FQCN, from the installed copy: it finds the shipped managed-host.txt and
    previews the environment with exactly its pins (check mode: nothing is created)."""
    pins = ' '.join(line.split('#')[0].strip() for line in (REPO / 'requirements' / 'managed-host.txt').read_text().splitlines()
                    if line.split('#')[0].strip())
    venv = tmp_path / 'venv'
    output = run(['ansible-playbook', '-i', 'localhost,', '-c', 'local', '--check', 'gpuops.fleet.prepare_hosts', '-e', 'gpuops_fleet_prepare_hosts=localhost',
                  '-e', 'gpuops_fleet_venv=%s' % venv], installed_env, workdir).stdout
    assert 'localhost: CHECK MODE: would create %s with %s from the package index' % (venv, pins) in ' '.join(output.split())
    assert not venv.exists()
