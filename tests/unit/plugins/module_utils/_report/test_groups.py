# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet page shows a server across hosts as one: its ranks by host, and whether it is whole."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._report.model import server_groups
from ansible_collections.gpuops.fleet.plugins.module_utils._report.render import render_html, render_summary_md
from ansible_collections.gpuops.fleet.plugins.module_utils._report.model import build_report


def server(rank, running=True, healthy=True, name="vllm-8000"):
    return {"name": name, "model": "zai-org/GLM-5", "pid": 100 + rank, "running": running, "health": "HTTP 200" if healthy else "HTTP 503",
            "healthy": healthy, "group": {"name": "glm5_a", "rank": rank, "size": 2, "head": "gpu-node-01"}}


def test_a_group_is_whole_only_with_every_rank_running_and_its_head_healthy():
    hosts = [{"name": "gpu-node-02", "servers": [server(1)]}, {"name": "gpu-node-01", "servers": [server(0)]},
             {"name": "gpu-node-03", "servers": [dict(server(0), group=None, name="vllm-9000")]}]
    (group,) = server_groups(hosts)
    assert group["whole"] and [(r["rank"], r["host"]) for r in group["ranks"]] == [(0, "gpu-node-01"), (1, "gpu-node-02")]
    assert not server_groups(hosts[1:2])[0]["whole"]  # rank 1 not seen
    assert not server_groups([{"name": "a", "servers": [server(0)]}, {"name": "b", "servers": [server(1, healthy=False)]}])[0]["whole"]
    assert not server_groups([{"name": "a", "servers": [server(0)]}, {"name": "b", "servers": [server(1, running=False)]}])[0]["whole"]


def test_the_page_and_the_summary_show_the_group():
    raw = {"gpus": [], "servers": [dict(server(1), config_hash=None, create_time=None, port="8000", gpus=[0], unit=None, container=None,
                                        argv=None, error=None)]}
    head = dict(raw, servers=[dict(raw["servers"][0], group=dict(raw["servers"][0]["group"], rank=0), pid=100)])
    report = build_report([("gpu-node-01", {"ansible_facts": {"gpus": []}, **head}), ("gpu-node-02", {"ansible_facts": {"gpus": []}, **raw})])
    page = render_html(report)
    assert '<tr class="group" data-group="glm5_a" data-whole="yes"' in page and 'Servers across hosts (1)' in page
    summary = render_summary_md(report)
    assert "## Servers across hosts" in summary and "`glm5_a`:" in summary
