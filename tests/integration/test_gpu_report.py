# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/gpu_report.yml on a simulated fleet, judged as a person would look at it: the page loaded in a real headless
chromium (its DOM, with scripts on and off, what each filter shows, and a screenshot), against the simulator's own state;
and the 64 x 8 x 4 page from generated facts (no ansible), timed in the browser."""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import json
import os
import re
import shutil
import time
import typing as t
from pathlib import Path

import pytest

from gpusim.api import pid_alive, wait_for
from fake_container import in_cgroup, podman_cgroup, write_fake_podman
from report_fleet import chromium, chromium_binary, console_errors, dump_dom, synthetic_results
from ansible_run import flat, REPO, run_playbook
from inventories import role_host_vars, write_role_inventory
from simhost import free_port

from ansible_collections.gpuops.fleet.plugins.module_utils._report import model, render


REPORT = REPO / "playbooks" / "gpu_report.yml"
RESTART = REPO / "playbooks" / "restart_vllm.yml"
BUILD = REPO / "build" / "gpu-report"
MIB = 93029
SECRET = "sk-report-canary-4711"
EVIL = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"
# the vLLM of gpu-node-04's GPU 3, in a podman container
CTR_ID = "7c1f0e5a9b2d4c6e8f0a1b3c5d7e9f1a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e"
CTR_NAME = "vllm-qwen"
CTR_IMAGE = "docker.io/vllm/vllm-openai:v0.11.0"
CTR_MIB = 30000

# Run in a copy of the page whose policy blocks the page's own script (scripts off) and allows only this one: it clicks
# each filter's label as a person would and records what is displayed then (host blocks, their GPU rows, host table rows).
FILTER_PROBE = """(function(){function shown(e){for(;e&&e.nodeType===1;e=e.parentElement){if(getComputedStyle(e).display==='none')return false;}return true;}
function look(){var r={hosts:[],gpus:[],rows:[]};document.querySelectorAll('#hosts section.host').forEach(function(s){var h=s.getAttribute('data-host');
if(shown(s))r.hosts.push(h);s.querySelectorAll('tr.gpu').forEach(function(tr){if(shown(tr))r.gpus.push(h+':'+tr.getAttribute('data-gpu'));});});
document.querySelectorAll('#host-table tr.h').forEach(function(tr){if(shown(tr))r.rows.push(tr.getAttribute('data-name'));});return r;}
var seen={};document.querySelectorAll('.filters label').forEach(function(l){l.click();var f=l.getAttribute('for');seen[f]=look();
seen[f].checked=document.getElementById(f).checked;});document.documentElement.setAttribute('data-seen',JSON.stringify(seen));})();"""


@pytest.fixture(autouse=True)
def browser():
    assert chromium_binary() is not None, "chromium is not installed: `make integration` installs Debian's chromium (make browser)"


def raw_page(page: Path) -> str:
    text = page.read_text(encoding="utf-8")
    assert render.esc(render.CSP) in text
    return text


def rows(path: Path) -> t.List[t.Dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def filters_seen(page: Path, copy: Path) -> t.Dict[str, t.Dict[str, t.Any]]:
    """What each filter of the page displays, with the page's own script blocked (FILTER_PROBE): filter id -> hosts, gpus
    ("host:index"), rows (of the host table), checked."""
    probe_hash = base64.b64encode(hashlib.sha256(FILTER_PROBE.encode("utf-8")).digest()).decode("ascii")
    policy = re.sub(r"script-src [^;]*", "script-src 'sha256-%s'" % probe_hash, render.CSP)
    text = raw_page(page).replace(render.esc(render.CSP), render.esc(policy)).replace("</body>", "<script>%s</script></body>" % FILTER_PROBE)
    copy.write_text(text, encoding="utf-8")
    dom, _raw, stderr = dump_dom(copy)
    html_el = dom.find("html")
    assert "data-script" not in html_el.attrs and "Content Security Policy" in stderr  # the page's own script did not run
    assert "data-seen" in html_el.attrs, console_errors(stderr)
    seen: t.Dict[str, t.Dict[str, t.Any]] = json.loads(html_el.attrs["data-seen"])
    return seen


@pytest.fixture(name="cgroups")
def cgroups_fixture(fleet):  # set up after the fleet's hosts: their processes leave these cgroups before the hosts end them
    """place(pids, name): the processes in a new cgroup until the test ends (fake_container.in_cgroup)."""
    with contextlib.ExitStack() as stack:
        yield lambda pids, name: stack.enter_context(in_cgroup(pids, name))


@pytest.fixture(name="report_fleet")
def report_fleet_fixture(fleet, cgroups, tmp_path):
    """A fleet with a problem of each kind: the incident, a role-managed server, an unhealthy host with a lost GPU, a foreign PID,
    a host whose reading fails (no driver) and an unreachable one; and a vLLM in a podman container."""
    incident, served, sick, foreign, nodriver = fleet("gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04", "gpu-node-06")
    tree = incident.gpusim_json("vllm", "--tp", "8", "--mib", str(MIB))
    incident.gpusim("incident")
    role_vars = {"vllm_server_tensor_parallel_size": 4}
    restart = run_playbook(RESTART, write_role_inventory(tmp_path / "restart.json", {served.name: role_host_vars(served, served.port, **role_vars)}))
    assert restart.returncode == 0, restart.stdout[-4000:]
    (sick.state / "gpu2.conf").write_text("ecc_uncorrected_volatile=3\nremapped_uncorrectable=1\nremapped_pending=1\n")
    sick.gpusim("lose-gpu", "--gpu", "5")
    sick.gpusim("orphan", "--gpu", "6", "--mib", "4096")
    evil = sick.spawn_tree({"key": "evil", "title": "python3 train.py --name %s --api-key %s" % (EVIL, SECRET),
                            "hold": [{"gpu": 0, "mib": 3000}]})["evil"]
    foreign.gpusim("foreign", "--gpu", "2", "--mib", "20000")
    # GPU 3 of the same host: a vLLM server in a podman container, below its conmon; the host shows its process in the cgroup
    # podman makes for the container, and podman (a stand-in on the module's PATH) answers `podman inspect` for it
    container = foreign.spawn_tree({"key": "conmon", "title": "/usr/bin/conmon --api-version 1 -c %s -n %s" % (CTR_ID, CTR_NAME), "comm": "conmon",
                                    "children": [{"key": "ctr-vllm", "title": "python3 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B",
                                                  "hold": [{"gpu": 3, "mib": CTR_MIB}]}]})["ctr-vllm"]
    cgroups([container], podman_cgroup(CTR_ID))
    podman_bin = write_fake_podman(tmp_path / "podman-bin", CTR_ID, CTR_NAME, CTR_IMAGE).parent
    nodriver.gpusim("driver", "--unload")
    hosts = {h.name: role_host_vars(h, h.port) for h in (incident, served, sick, foreign, nodriver)}
    hosts[foreign.name]["gpuops_fleet_environment"]["PATH"] = os.pathsep.join([str(podman_bin), os.environ["PATH"]])
    hosts["gpu-node-05"] = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": free_port(), "ansible_user": "nobody",
                            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5"}
    inventory = write_role_inventory(tmp_path / "report.json", hosts)
    # the facts are read only once each simulator reads its host as set up: GPU -> holder count, orphan MiB, lost
    expected = {incident: {i: (int(i > 0), 0, False) for i in range(8)},
                served: {i: (int(i < 4), 0, False) for i in range(8)},
                sick: {i: (int(i == 0), 4096 if i == 6 else 0, i == 5) for i in range(8)},
                foreign: {i: (int(i in (2, 3)), 0, False) for i in range(8)}}

    def differences() -> t.Dict[str, t.Dict[int, t.Any]]:
        found = {}
        for host, want in expected.items():
            have = {g["index"]: (len(g["holders"]), g["orphan_mib"], g["lost"]) for g in host.status()["gpus"]}
            if have != want:
                found[host.name] = {i: have.get(i) for i in sorted(set(have) | set(want)) if have.get(i) != want.get(i)}
        return found

    assert wait_for(lambda: not differences(), timeout=60, interval=0.2), differences()
    assert sick.holders(0) == [evil] and foreign.holders(3) == [container]
    return {"incident": incident, "served": served, "sick": sick, "foreign": foreign, "nodriver": nodriver, "tree": tree,
            "evil": evil, "container": container, "inventory": inventory}


def test_fleet_report_as_seen_in_a_browser(report_fleet, tmp_path):
    f = report_fleet
    served = f["served"]
    record_path = served.state / "role" / ("vllm-%d.json" % served.port)
    record_before = record_path.read_text()
    record = json.loads(record_before)
    holders_before = {h.name: h.holders() for h in (f["incident"], served, f["sick"], f["foreign"])}
    out = tmp_path / "report"

    # --check: nothing changes on the hosts; the report is still written on the controller
    run = run_playbook(REPORT, f["inventory"], "--check", "-e", "gpu_report_dir=%s" % out)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert record_path.read_text() == record_before
    assert {h.name: h.holders() for h in (f["incident"], served, f["sick"], f["foreign"])} == holders_before
    assert pid_alive(record["pid"]) and pid_alive(f["evil"])
    assert sorted(p.name for p in out.iterdir()) == sorted(render.FILES)
    printed = flat(run.stdout)
    assert "page: %s" % (out / "index.html") in printed and "5 unreachable" not in printed
    assert "hosts: 4 answered, 1 unreachable, 1 failed (of 6)" in printed

    page = out / "index.html"
    dom, _dumped, stderr = dump_dom(page)
    assert dom.find("html").attrs.get("data-script") == "ok" and "data-script-error" not in dom.find("html").attrs
    assert not console_errors(stderr), console_errors(stderr)
    numbers = {div.attrs["data-key"]: div.find("dd").text() for div in dom.find("dl", class_="numbers").find_all("div")}
    report = json.loads((out / "report.json").read_text())
    summary = report["summary"]
    # the simulator's own count: incident 7 GPUs held by orphans; served 4 held, 4 free; sick: 0 held by the <script> job (an
    # orphan too: gpusim's launcher of it exited) and 6 by no process, 2 unhealthy (lost 5, ECC 2), free 1,3,4,7; foreign: 2 held
    # (another namespace's PID), 3 held (the container's vLLM, whose conmon lives: no orphan), 6 free
    expected = {"hosts_answered": "4", "hosts_unreachable": "1", "hosts_failed": "1", "gpus_free": str(1 + 4 + 4 + 6),
                "gpus_held": str(7 + 4 + 2 + 2), "gpus_unhealthy": "2", "orphans": "8"}
    for key, value in expected.items():
        assert numbers[key] == value, (key, numbers)
        assert str(summary[key]) == value
    used = sum(used for h in (f["incident"], served, f["sick"], f["foreign"]) for used in h.used_mib())
    assert numbers["memory"].startswith("{:,} / ".format(used)), (numbers["memory"], used)

    # problems first, in order: unreachable, failed, lost, unhealthy, orphans, memory held by no process
    problems = dom.find("section", id="problems").find_all("li", class_="problem")
    kinds = [li.attrs["data-kind"] for li in problems]
    assert kinds == ["unreachable", "failed", "lost", "unhealthy"] + ["orphan"] * 8 + ["unaccounted"], kinds
    assert problems[0].attrs["data-host"] == "gpu-node-05" and "unreachable" in problems[0].text().lower()
    assert problems[1].attrs["data-host"] == "gpu-node-06" and "NVML" in problems[1].text() or "driver" in problems[1].text().lower()
    assert "uncorrected ECC errors: 3" in problems[3].text() and "row remapping pending" in problems[3].text()
    orphan_pids = sorted(int(li.text().split("PID ")[1].split(",")[0]) for li in problems if li.attrs["data-kind"] == "orphan")
    assert orphan_pids == sorted(f["tree"]["workers"][1:] + [f["evil"]])
    assert all(pid_alive(pid) for pid in orphan_pids)
    assert "4,096 MiB used and held by no process" in problems[-1].text()

    blocks = {s.attrs["data-host"]: s for s in dom.find("section", id="hosts").find_all("section", class_="host")}
    assert set(blocks) == {"gpu-node-0%d" % i for i in range(1, 7)}
    order = [s.attrs["data-host"] for s in dom.find("section", id="hosts").find_all("section", class_="host")]
    assert order == ["gpu-node-01", "gpu-node-03", "gpu-node-05", "gpu-node-06", "gpu-node-02", "gpu-node-04"]  # problems first

    # incident host: seven GPUs, each held by its orphaned worker, named, with the simulator's MiB
    sim = {g["index"]: g for g in f["incident"].status()["gpus"]}
    for tr in blocks["gpu-node-01"].find_all("tr", class_="gpu"):
        index = int(tr.attrs["data-gpu"])
        lis = tr.find_all("li", class_="holder")
        assert [int(li.attrs["data-pid"]) for li in lis] == [h["pid"] for h in sim[index]["holders"]]
        if index:
            assert lis[0].attrs["data-owner"] == "orphan" and "VLLM::Worker_TP%d" % index in lis[0].text() and "93,029 MiB" in lis[0].text()
        else:
            assert tr.attrs["data-state"] == "free"

    # the role's server: model, configuration hash, PID, /health, up since, its workers named as the server's
    server_row = blocks["gpu-node-02"].find("tr", class_="server")
    text = server_row.text()
    assert "zai-org/GLM-5-GGUF" in text and record["config_hash"][:12] in text and str(record["pid"]) in text and "HTTP 200" in text
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", text)
    states = [tr.attrs["data-state"] for tr in blocks["gpu-node-02"].find_all("tr", class_="gpu")]
    assert states == ["held"] * 4 + ["free"] * 4
    sim2 = {g["index"]: [h["pid"] for h in g["holders"]] for g in served.status()["gpus"]}
    for tr in blocks["gpu-node-02"].find_all("tr", class_="gpu")[:4]:
        (li,) = tr.find_all("li", class_="holder")
        assert [int(li.attrs["data-pid"])] == sim2[int(tr.attrs["data-gpu"])] and li.attrs["data-owner"] == "server"
        assert "launcher" in li.text() and str(record["pid"]) in li.text()

    # the sick host: health flags, the lost GPU, memory by no process, and the <script> canary shown as text only
    sick_rows = {int(tr.attrs["data-gpu"]): tr for tr in blocks["gpu-node-03"].find_all("tr", class_="gpu")}
    assert sick_rows[5].attrs["data-state"] == "lost" and "lost" in sick_rows[5].text().lower()
    assert "uncorrected ECC errors: 3" in sick_rows[2].text() and "row remapping pending" in sick_rows[2].text()
    assert sick_rows[2].attrs["data-state"] == "unhealthy"
    assert "4,096 MiB held by no process" in sick_rows[6].text()
    evil_li = sick_rows[0].find("li", class_="holder")
    assert EVIL in evil_li.text() and int(evil_li.attrs["data-pid"]) == f["evil"]
    assert len(dom.find_all("script")) == 1 and not dom.find_all("img")
    assert "pwned" not in dom.find("title").text()
    for name in render.FILES:
        assert SECRET not in (out / name).read_text(), name

    # the foreign-namespace PID is marked as such
    (li,) = blocks["gpu-node-04"].find("tr", class_="gpu", data_gpu="2").find_all("li", class_="holder")
    assert li.attrs["data-owner"] == "other namespace" and "another PID namespace" in li.text() and "20,000 MiB" in li.text()
    assert "ssh" in blocks["gpu-node-05"].find("p", class_="reason").text().lower() or "connect" in blocks["gpu-node-05"].text().lower()
    assert blocks["gpu-node-06"].attrs["data-status"] == "failed" and blocks["gpu-node-06"].find("p", class_="reason").text()

    # the container's vLLM: beside its holder, "podman", the container's name and image (its full id on hover); no other
    # holder shows a container
    (li,) = blocks["gpu-node-04"].find("tr", class_="gpu", data_gpu="3").find_all("li", class_="holder")
    assert int(li.attrs["data-pid"]) == f["container"] and "30,000 MiB" in li.text() and li.attrs["data-owner"] != "orphan"
    ctr = li.find("div", class_="ctr")
    assert ctr.text() == "podman container %s, image %s" % (CTR_NAME, CTR_IMAGE) and ctr.attrs["title"] == "container id %s" % CTR_ID
    others = [h for s in blocks.values() for h in s.find_all("li", class_="holder") if h is not li]
    assert len(others) == summary["holders"] - 1 and not [h.attrs["data-pid"] for h in others if h.find_all("div", class_="ctr")]
    in_container = ["%s:%s" % (name, tr.attrs["data-gpu"]) for name, s in blocks.items() for tr in s.find_all("tr", class_="in-container")]
    assert in_container == ["gpu-node-04:3"]

    # the filters, clicked with the page's own script blocked: all shows every GPU; "GPUs held by containers" only that one
    seen = filters_seen(page, tmp_path / "filters.html")
    assert set(seen) == {"f-all", "f-problems", "f-free", "f-containers"} and all(v["checked"] for v in seen.values())
    assert len(seen["f-all"]["gpus"]) == 32 and seen["f-all"]["hosts"] == order and len(seen["f-all"]["rows"]) == 6
    assert seen["f-containers"] == {"hosts": ["gpu-node-04"], "gpus": ["gpu-node-04:3"], "rows": ["gpu-node-04"], "checked": True}
    assert seen["f-problems"]["hosts"] == ["gpu-node-01", "gpu-node-03", "gpu-node-05", "gpu-node-06"]
    assert seen["f-free"]["hosts"] == ["gpu-node-01", "gpu-node-03", "gpu-node-02", "gpu-node-04"]

    # CSV and JSON agree with the page
    gpu_rows, holder_rows = rows(out / "gpus.csv"), rows(out / "holders.csv")
    page_gpus = [tr for s in blocks.values() for tr in s.find_all("tr", class_="gpu")]
    page_holders = [li for tr in page_gpus for li in tr.find_all("li", class_="holder")]
    assert len(gpu_rows) == len(page_gpus) == summary["gpus"] == 32
    assert len(holder_rows) == len(page_holders) == summary["holders"]
    assert sum(1 for r in gpu_rows if r["state"] == "free") == summary["gpus_free"]
    assert sum(1 for r in holder_rows if r["owner"] == "orphan") == 8
    assert [(r["host"], r["gpu"], r["container_runtime"], r["container_id"], r["container_name"], r["container_image"])
            for r in holder_rows if r["container_id"]] == [("gpu-node-04", "3", "podman", CTR_ID, CTR_NAME, CTR_IMAGE)]
    assert [p["kind"] for p in report["problems"]] == kinds
    assert (out / "summary.md").read_text().count("\n- **") == len(kinds)

    # scripts off (as a mail reader that runs none): a copy whose policy forbids every script, so chromium blocks ours
    # (--dump-dom itself needs scripts on); the same blocks and numbers
    off = tmp_path / "scripts-off.html"
    off.write_text(raw_page(page).replace(render.esc(render.CSP), render.esc(render.CSP.split("script-src")[0] + "script-src 'none'")), encoding="utf-8")
    dom_off, _raw, err_off = dump_dom(off)
    assert "data-script" not in dom_off.find("html").attrs and "Content Security Policy" in err_off
    assert len(dom_off.find("section", id="hosts").find_all("section", class_="host")) == 6
    assert {d.attrs["data-key"]: d.find("dd").text() for d in dom_off.find("dl", class_="numbers").find_all("div")} == numbers

    # a screenshot, kept in the build directory
    BUILD.mkdir(parents=True, exist_ok=True)
    shot = BUILD / "gpu-report.png"
    proc, _wall = chromium(page, "--screenshot=%s" % shot, "--window-size=1400,2000", "--hide-scrollbars")
    assert proc.returncode == 0 and shot.stat().st_size > 10000, proc.stderr[-2000:]
    shutil.copytree(out, BUILD / "fleet", dirs_exist_ok=True)


def test_64_hosts_render_under_2s_and_2mb(tmp_path):
    report = model.build_report(synthetic_results(64, 8, 4), generated_at=time.time())
    files = render.render_all(report)
    page = tmp_path / "index.html"
    page.write_text(files["index.html"], encoding="utf-8")
    size = page.stat().st_size
    assert size < 2 * 1024 * 1024, size
    timings = []
    for _attempt in range(3):  # the best of up to three loads: this machine is shared, a load spike is not the page's cost
        dom, _raw, stderr = dump_dom(page)
        html_el = dom.find("html")
        assert html_el.attrs.get("data-script") == "ok" and not console_errors(stderr)
        timings.append(float(html_el.attrs["data-render-ms"]))
        if timings[-1] < 2000:
            break
    render_ms = min(timings)
    assert render_ms < 2000, timings
    assert len(dom.find_all("tr", class_="gpu")) == 512 and len(dom.find_all("li", class_="holder")) == 2048
    BUILD.mkdir(parents=True, exist_ok=True)
    (BUILD / "size-64x8x4.json").write_text(json.dumps({"bytes": size, "render_ms": render_ms, "loads_ms": timings}))


def test_bad_facts_are_shown_never_a_crash(tmp_path):
    """A failed reading, an unreachable host, N/A everywhere, wrong types: the page shows them as such."""
    na_gpu = {key: None for key in ("index", "uuid", "name", "memory_used_mib", "memory_total_mib", "utilization_gpu_pct",
                                    "temperature_c", "power_draw_w", "power_limit_w", "remapped_rows", "processes", "error")}
    weird = dict(na_gpu, index=1, memory_used_mib="N/A", remapped_rows="N/A", clocks_event_reasons="x", processes=[
        {"pid": "x", "visible": None, "container": {"runtime": "podman", "id": "x", "name": EVIL, "image": 'img" onerror="alert(2)'}}])
    results = [
        ("failed", {"failed": True, "msg": "NVML_ERROR_DRIVER_NOT_LOADED: <b>no driver</b>"}),
        ("unreachable", {"unreachable": True, "msg": "ssh: connect to host 10.0.0.9 port 22: Connection refused"}),
        ("nothing", None),
        ("na", {"ansible_facts": {"gpus": [na_gpu, weird, "not a gpu"], "gpu_driver": None}, "owners": "x", "servers": [{"pid": "?"}]}),
        ("nofacts", {"changed": False}),
    ]
    report = model.build_report(results, generated_at=0)
    page = tmp_path / "index.html"
    page.write_text(render.render_html(report), encoding="utf-8")
    dom, _raw, stderr = dump_dom(page)
    assert not console_errors(stderr)
    blocks = {s.attrs["data-host"]: s for s in dom.find_all("section", class_="host")}
    assert blocks["failed"].attrs["data-status"] == "failed" and "<b>no driver</b>" in blocks["failed"].text()
    assert blocks["unreachable"].attrs["data-status"] == "unreachable" and "Connection refused" in blocks["unreachable"].text()
    assert blocks["nothing"].attrs["data-status"] == "no result"
    assert blocks["nofacts"].attrs["data-status"] == "failed"
    assert "N/A" in blocks["na"].text() and len(blocks["na"].find_all("tr", class_="gpu")) == 2
    # a container's name and image are text: no element, no attribute of theirs
    ctr = blocks["na"].find("div", class_="ctr")
    assert ctr.text() == 'podman container %s, image img" onerror="alert(2)' % " ".join(EVIL.split())
    assert set(ctr.attrs) == {"class", "data-runtime", "title"} and not dom.find_all("img") and len(dom.find_all("script")) == 1
    assert "pwned" not in dom.find("title").text()
    assert report["summary"]["hosts_answered"] == 1 and report["summary"]["gpus_free"] == 0
