# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/watch_setup.yml on a simulated host without systemd (gpuops_watch_systemd=false: the files only; the
systemd side is tests/systemd's to prove): the unit it writes passes `systemd-analyze verify`; the code it copies runs on
its own, as the unit's ExecStart= and Environment= say, and answers with the simulator's GPUs; a second run changes
nothing; a bad variable fails naming it before anything is written; state=absent removes everything it wrote."""

from __future__ import annotations

import http.client
import os
import shlex
import shutil
import subprocess
import typing as t
from pathlib import Path

import pytest

from ansible_run import REPO, run_playbook
from gpusim.api import wait_for
from simhost import free_port

from ansible_collections.gpuops.fleet.plugins.module_utils._http.prometheus import parse

PLAYBOOK = REPO / "playbooks" / "watch_setup.yml"


def unit_command(unit: Path) -> t.Tuple[t.List[str], t.Dict[str, str]]:
    """ExecStart= as argv and Environment= as a dict, read from the unit file."""
    argv: t.List[str] = []
    env: t.Dict[str, str] = {}
    for line in unit.read_text().splitlines():
        if line.startswith("ExecStart="):
            argv = shlex.split(line[len("ExecStart="):])
        elif line.startswith("Environment="):
            key, _sep, value = line[len("Environment="):].partition("=")
            env[key] = value
    return argv, env


def recap_changed(out: str) -> int:
    line = next(line for line in out.splitlines() if " : ok=" in line)
    return int(line.split("changed=")[1].split()[0])


def scrape(port: int) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", "/metrics")
        answer = connection.getresponse()
        text = answer.read().decode()
    finally:
        connection.close()
    assert answer.status == 200, text
    return text


@pytest.fixture
def started():
    procs: t.List[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def test_install_run_rerun_refuse_and_remove(make_host, inventory, tmp_path, started):
    host = make_host("gpu-node-01")
    host.orphan(2, 4096)
    port = free_port()
    watch_dir, unit_dir = tmp_path / "watch", tmp_path / "units"
    unit_dir.mkdir()
    inv = inventory(host, gpuops_watch_systemd=False, gpuops_watch_dir=str(watch_dir), gpuops_watch_unit_dir=str(unit_dir),
                    gpuops_watch_port=port, gpuops_watch_listen="127.0.0.1", gpuops_watch_interval=5,
                    gpuops_fleet_venv=str(REPO / ".venv"), vllm_server_state_dir=str(tmp_path / "state"))
    first = run_playbook(PLAYBOOK, inv)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    assert recap_changed(first.stdout) == 1 and "metrics at http://127.0.0.1:%d/metrics" % port in first.stdout
    unit = unit_dir / "gpuops-watch.service"
    shipped = sorted(p.relative_to(watch_dir / "lib").as_posix() for p in (watch_dir / "lib").rglob("*.py"))
    assert "ansible_collections/gpuops/fleet/plugins/module_utils/_watch/serve.py" in shipped
    assert "ansible_collections/gpuops/fleet/plugins/module_utils/_gpu/facts.py" in shipped
    assert not any("/modules/" in path or "plugin_utils" in path for path in shipped)  # module_utils only
    for path in shipped:  # the very files of the collection
        assert (watch_dir / "lib" / path).read_text() == (REPO / path.split("gpuops/fleet/", 1)[1]).read_text(), path

    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: the README's test command installs Debian's systemd package (make tools)"
    verified = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False)
    assert verified.returncode == 0 and "gpuops-watch" not in verified.stderr, verified.stderr

    # the copy runs as the unit says, with the unit's environment and nothing of the checkout on its path
    argv, env = unit_command(unit)
    assert env["PYTHONPATH"] == str(watch_dir / "lib") and env["GPUOPS_SIM_STATE"] == str(host.state)
    assert argv[:3] == [str(REPO / ".venv" / "bin" / "python"), "-m", "ansible_collections.gpuops.fleet.plugins.module_utils._watch.serve"]
    log = tmp_path / "watch.log"
    proc = subprocess.Popen(argv, env=dict(env, PATH=os.environ["PATH"]), cwd="/", stdout=log.open("w"), stderr=subprocess.STDOUT)
    started.append(proc)
    assert wait_for(lambda: "serving" in log.read_text() or proc.poll() is not None, timeout=30), log.read_text()
    families = parse(scrape(port))
    assert families["gpuops_gpus"] == [({"host": "gpu-node-01"}, 8.0)]
    none = {labels["gpu"]: value for labels, value in families["gpuops_gpu_memory_by_class_mib"] if labels["class"] == "none"}
    assert none == {str(g["index"]): float(g["orphan_mib"]) for g in host.status()["gpus"]} and none["2"] == 4096
    loaded = Path("/proc/%d/maps" % proc.pid).read_text()
    assert str(REPO / ".collections") not in loaded

    # a second run: nothing changes; the files are the same
    before = unit.stat().st_mtime_ns
    again = run_playbook(PLAYBOOK, inv)
    assert again.returncode == 0 and recap_changed(again.stdout) == 0, again.stdout[-3000:]
    assert unit.stat().st_mtime_ns == before and "(unchanged)" in again.stdout

    # a bad variable: named, with its value, and nothing written
    for extra, said in ((["-e", "gpuops_watch_port=0"], "gpuops_watch_port (option port): port: 0 must be from 1 to 65535"),
                        (["-e", "gpuops_watch_listen=every"], "gpuops_watch_listen (option listen): listen: 'every' is not an IP address"),
                        (["-e", "gpuops_watch_interval=1"], "gpuops_watch_interval (option interval): interval: 1.0 must be from 5"),
                        (["-e", "gpuops_watch_port=nine"], "gpuops_watch_port (option port)")):
        bad = run_playbook(PLAYBOOK, inv, *extra)
        assert bad.returncode != 0 and said in bad.stdout, bad.stdout[-3000:]
        assert unit.stat().st_mtime_ns == before and "--port %d " % port in unit.read_text()

    # removed: the unit and the folder; once more: nothing to do
    gone = run_playbook(PLAYBOOK, inv, "-e", "gpuops_watch_state=absent")
    assert gone.returncode == 0 and recap_changed(gone.stdout) == 1 and "endpoint removed" in gone.stdout, gone.stdout[-3000:]
    assert not unit.exists() and not watch_dir.exists()
    assert recap_changed(run_playbook(PLAYBOOK, inv, "-e", "gpuops_watch_state=absent").stdout) == 0
