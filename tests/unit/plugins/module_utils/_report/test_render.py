# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report's files (_report/render): the page escapes and masks, the files agree, no CSV cell is a formula; each
holder's container beside it and the filter of GPUs held by containers."""

from __future__ import annotations

import csv
import html.parser
import io
import json
import re

from ansible_collections.gpuops.fleet.plugins.module_utils._report import model, render
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils._report.test_model import results


def test_page_escapes_and_masks_and_files_agree():
    report = model.build_report(results(), 1024, 0)
    files = render.render_all(report)
    page = files["index.html"]
    assert page.count("<script>") == 1 and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "sekrit" not in "".join(files.values())
    assert "http://" not in page.replace("http-equiv", "") and "https://" not in page and "@import" not in page
    assert "another PID namespace" in page and "NOT RUNNING" in page and "abcdef012345" in page and "HTTP 200" in page
    gpus = list(csv.DictReader(io.StringIO(files["gpus.csv"])))
    holders = list(csv.DictReader(io.StringIO(files["holders.csv"])))
    assert len(gpus) == 8 == page.count('<tr class="gpu ') and len(holders) == 4 == page.count('<li class="holder"')
    assert json.loads(files["report.json"])["summary"] == report["summary"]
    assert "- hosts: 1 answered, 1 unreachable, 1 failed (of 3)" in files["summary.md"]
    assert "`b-host`: 7" in files["summary.md"]


def test_csv_cells_are_never_formulas():
    report = model.build_report([("=cmd|' /C calc'!A0", None)], 1024, 0)
    assert "\n'=cmd" in render.render_gpus_csv(report) or render.render_gpus_csv(report).count("\n") == 1
    assert render.cell("=1+1") == "'=1+1" and render.cell("-x") == "'-x" and render.cell(-1) == -1


PODMAN_ID = "1e030a3033f4c66d3f8c1ab292f8490c5dff37766b14782381b20143b1d85617"
KUBE_ID = "9f" * 32
DOCKER_ID = "0d" * 32
POD_UID = "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"
EVIL_NAME = '"><script>alert(2)</script>'
EVIL_IMAGE = 'x" onmouseover="alert(3)'


def container_results():
    """results() with b-host's GPU 0 held in a podman container, GPU 1 in a Kubernetes pod's container (no name, no image)
    and GPU 6 in a docker container whose name and image hold HTML and quotes; GPU 5's holder (another namespace) in none."""
    found = results()
    gpus = found[0][1]["ansible_facts"]["gpus"]
    gpus[0]["processes"][0]["container"] = {"runtime": "podman", "id": PODMAN_ID, "name": "vllm-llama",
                                            "image": "docker.io/vllm/vllm-openai:v0.11.0"}
    gpus[1]["processes"][0]["container"] = {"runtime": "kubernetes", "id": KUBE_ID, "name": None, "image": None, "pod_uid": POD_UID}
    gpus[6]["processes"][0]["container"] = {"runtime": "docker", "id": DOCKER_ID, "name": EVIL_NAME, "image": EVIL_IMAGE}
    gpus[5]["processes"][0]["container"] = None
    return found


def holder_li(page, pid):
    (found,) = re.findall(r'<li class="holder" data-pid="%d"[^>]*>.*?</li>' % pid, page)
    return found


class Elements(html.parser.HTMLParser):
    """Every start tag of a page: (tag, attributes)."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.found = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


def test_each_holder_shows_its_container():
    page = render.render_html(model.build_report(container_results(), 1024, 0))
    assert ('<div class="ctr" data-runtime="podman" title="container id %s">podman container vllm-llama, '
            'image docker.io/vllm/vllm-openai:v0.11.0</div>' % PODMAN_ID) in holder_li(page, 11)
    # no name: the id's first 12 digits, and the pod's UID
    kube = holder_li(page, 12)
    assert '>kubernetes container %s, pod %s</div>' % (KUBE_ID[:12], POD_UID) in kube and "image" not in kube
    assert kube.count(KUBE_ID) == 1 and 'title="container id %s"' % KUBE_ID in kube
    # a holder in no container (here: a PID of another namespace) shows none
    assert 'class="ctr"' not in holder_li(page, 4242) and page.count('<div class="ctr"') == 3


def test_container_name_and_image_are_escaped():
    page = render.render_html(model.build_report(container_results(), 1024, 0))
    docker = holder_li(page, 77)
    assert "docker container &quot;&gt;&lt;script&gt;alert(2)&lt;/script&gt;, image x&quot; onmouseover=&quot;alert(3)</div>" in docker
    assert page.count("<script>") == 1 and "alert(2)</script>" not in page
    elements = Elements(page).found
    assert [tag for tag, _attrs in elements].count("script") == 1
    assert not [attrs for _tag, attrs in elements if "onmouseover" in attrs]
    (ctr,) = [attrs for tag, attrs in elements if attrs.get("title") == "container id %s" % DOCKER_ID]
    assert ctr == {"class": "ctr", "data-runtime": "docker", "title": "container id %s" % DOCKER_ID}


def test_filter_of_gpus_held_by_containers():
    page = render.render_html(model.build_report(container_results(), 1024, 0))
    in_container = [int(index) for index in re.findall(r'<tr class="gpu state-\w+ in-container" data-gpu="(\d+)"', page)]
    assert in_container == [0, 1, 6] and page.count('<tr class="gpu ') == 8
    assert re.search(r'<section class="host[^"]* has-containers" id="host-b-host"', page)
    assert re.search(r'<tr class="h[^"]* has-containers" data-name="b-host"', page)
    assert page.split("</style>")[1].count("has-containers") == 2
    # a radio and its label, as the other filters: CSS hides every host without such a GPU and every other GPU row
    assert '<input type="radio" name="show" id="f-containers">' in page
    assert '<label for="f-containers">GPUs held by containers</label>' in page
    assert "#f-containers:checked~#hosts .host:not(.has-containers)" in page
    assert "#f-containers:checked~#overview tr.h:not(.has-containers)" in page
    assert "#f-containers:checked~#hosts tr.gpu:not(.in-container){display:none}" in page
    # a fleet without containers: nothing selected by that filter
    plain = render.render_html(model.build_report(results(), 1024, 0))
    assert "in-container" not in plain.split("</style>")[1] and "has-containers" not in plain.split("</style>")[1]
    assert 'class="ctr"' not in plain


def test_holders_csv_names_the_container():
    holders = list(csv.DictReader(io.StringIO(render.render_holders_csv(model.build_report(container_results(), 1024, 0)))))
    by_pid = {row["pid"]: row for row in holders}
    assert {key: by_pid["11"][key] for key in ("container_runtime", "container_id", "container_name", "container_image", "container_pod_uid")} == {
        "container_runtime": "podman", "container_id": PODMAN_ID, "container_name": "vllm-llama",
        "container_image": "docker.io/vllm/vllm-openai:v0.11.0", "container_pod_uid": ""}
    assert by_pid["12"]["container_pod_uid"] == POD_UID and by_pid["12"]["container_name"] == ""
    assert by_pid["77"]["container_name"] == EVIL_NAME
    assert by_pid["4242"]["container_runtime"] == "" and by_pid["4242"]["container_id"] == ""
