# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The playbooks whose summaries read every host's result pin `strategy: linear`: an operator's ANSIBLE_STRATEGY=free
(in the environment or ansible.cfg) must not make a summary print before the hosts are done, once per host that
reaches it, with "NO RESULT" for hosts still working."""

from __future__ import annotations

from ansible_run import REPO, run_playbook
from ansible_run import ansible_env


def test_gpu_cleanup_summary_under_an_operators_free_strategy(make_host, inventory):
    hosts = [make_host("gpu-node-%02d" % n) for n in range(1, 5)]
    hosts[2].gpusim("orphan", "--gpu", "1", "--mib", "2048")  # one host has work to do, so the hosts finish apart
    env = dict(ansible_env(), ANSIBLE_STRATEGY="free")
    proc = run_playbook(REPO / "playbooks" / "gpu_cleanup.yml", inventory(*hosts), "-e", "gpu_reclaim_timeout=3 gpu_reclaim_grace=1",
                        env=env)
    out = proc.stdout
    assert proc.returncode != 0, "the orphan cannot be ended (no process holds it), so the play fails"
    assert out.count("TASK [Summarise every host]") == 1, out[-4000:]
    assert "NO RESULT" not in out, out[-4000:]
    for host in hosts:
        assert host.name + ": " in out
    assert "gpu-node-03: FAILED" in out and "gpu-node-01: OK" in out
    assert hosts[2].used_mib()[1] == 2048, "the simulator still shows the orphan's memory"
