# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/benchmark_matrix.yml and the role's benchmark entry point, through real ansible-playbook runs.

The fake vLLM server's pace comes from NCCL_PROTO alone (GPUOPS_SIM_TOKENS_PER_S is never set): unset 47.3,
LL 57.6, LL128 45.5 tok/s. The report's files are checked against each other (raw JSON, CSV, Markdown), its figures
against those known paces, and the server left running by reading its /proc environ, the simulator's /sim/pace
and the simulator's own view of who holds the GPUs, never by the playbook's own claim alone.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import statistics
import typing as t
import urllib.request
from pathlib import Path

import psutil
import pytest

from ansible_run import flat, REPO, RESTART, run_playbook
from gpusim.api import pid_alive
from inventories import role_host_vars, write_role_inventory
from readings import server_pid
from report_fleet import assert_self_contained, chart_points, chromium, console_errors, dump_dom, numbers

MATRIX = REPO / "playbooks" / "benchmark_matrix.yml"
BUILD = REPO / "build" / "benchmark-report"
PACE = {"baseline": 47.3, "LL": 57.6, "LL128": 45.5}
# the client times one stream's decode to well under 1% on an idle machine; 4% survives a loaded 2-core one
TOLERANCE = 0.04
# short measurements: 4 requests of 64 tokens, 2 at a time, one warmup request. A token that a loaded machine delays
# does not delay the ones after it (the fake server's clock does not carry lateness), but a late last token lowers
# that request's decode figure by its lateness over the request's length: 64 tokens (about 1.1 s at LL's pace) keep
# the 30 ms a busy 2-core CI machine was seen to add within TOLERANCE, where 32 tokens did not (-4.8%)
OUTPUT_LEN = 64
LOAD = {
    "vllm_server_benchmark_input_len": 16,
    "vllm_server_benchmark_output_len": OUTPUT_LEN,
    "vllm_server_benchmark_num_requests": 4,
    "vllm_server_benchmark_concurrency": 2,
    "vllm_server_benchmark_warmup_requests": 1,
}
CRASH = {"GPUOPS_SIM_FAIL_AT_START": "crash", "GPUOPS_SIM_FAIL_AFTER_S": "0.5"}
READY_TOKENS = 4  # the completion of the role's ready step (its generation check) on every launch


def inventory(tmp_path: Path, nodes, **group_vars: t.Any) -> Path:
    entries = {h.name: role_host_vars(h, h.port) for h in nodes}
    merged = dict(LOAD, vllm_server_tensor_parallel_size=2, vllm_benchmark_results_dir=str(tmp_path / "results"))
    merged.update(group_vars)
    return write_role_inventory(tmp_path / "inventory.json", entries, **merged)


def get_json(port: int, path: str) -> t.Any:
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as reply:
        return json.loads(reply.read())


def generation_tokens(port: int) -> float:
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as reply:
        text = reply.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:generation_tokens_total{"))


def assert_runs(host, pid: int, gpus: t.Sequence[int]) -> None:
    """The PID is alive and its own descendants hold exactly `gpus` in the simulator."""
    assert pid_alive(pid)
    descendants = {p.pid for p in psutil.Process(pid).children(recursive=True)}
    for gpu in host.status()["gpus"]:
        holders = {h["pid"] for h in gpu["holders"]}
        if gpu["index"] in gpus:
            assert holders and holders <= descendants, "GPU %d held by %s, not by server %d" % (gpu["index"], holders, pid)


def markdown_tables(text: str) -> t.Dict[str, t.Dict[str, t.List[str]]]:
    """section title ('Fleet' or a host) -> configuration -> the cells of its row."""
    tables: t.Dict[str, t.Dict[str, t.List[str]]] = {}
    section = None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        elif section and line.startswith("| ") and not line.startswith("| configuration") and not line.startswith("| host"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            tables.setdefault(section, {})[cells[0].replace(" (baseline)", "")] = cells
    return tables


def csv_median(rows: t.Sequence[t.Dict[str, str]], column: str) -> float:
    return statistics.median(float(r[column]) for r in rows)


def assert_page_as_seen(results: Path, hosts: t.Sequence[str], names: t.Sequence[str]) -> None:
    """report.html, rendered by chromium as a person would read it (its own policy forbids every script): each
    configuration's row with the figures of report.json, and one point of the decode chart per configuration x host,
    a bar whose height is to scale and whose label is the host's median."""
    page = results / "report.html"
    assert_self_contained(page)
    dom, _raw, stderr = dump_dom(page)
    assert not console_errors(stderr), console_errors(stderr)
    report = json.loads((results / "report.json").read_text())
    keys = ("decode_tok_s", "decode_tok_s_min", "decode_tok_s_max", "change_decode_pct", "median_tpot_ms", "change_tpot_pct", "spread_tok_s")
    fleet_rows = dom.find("table", id="decode-table").find_all("tr", class_="ok") + dom.find("table", id="decode-table").find_all("tr", class_="failed")
    assert sorted(tr.attrs["data-config"] for tr in fleet_rows) == sorted(names)
    for tr in fleet_rows:
        name = tr.attrs["data-config"]
        assert tr.find("td").text() == name + (" (baseline)" if name == report["baseline"] else "")
        assert numbers(tr) == [report["fleet"][name][key] for key in keys], name
        shown = [td.text() for td in tr.find_all("td", class_="num")]
        assert shown[0] == ("N/A" if report["fleet"][name]["decode_tok_s"] is None else "%.2f" % report["fleet"][name]["decode_tok_s"])
    host_rows = [tr for tr in dom.find("table", id="host-table").find_all("tr") if "data-host" in tr.attrs]
    assert [(tr.attrs["data-host"], tr.attrs["data-config"]) for tr in host_rows] == [(h, n) for h in hosts for n in names]
    for tr in host_rows:
        assert numbers(tr) == [report["per_host"][tr.attrs["data-host"]]["configs"][tr.attrs["data-config"]][key] for key in keys]
    points = chart_points(dom, "decode-chart")
    assert [(p.attrs["data-group"], p.attrs["data-series"]) for p in points] == [(n, h) for n in names for h in hosts]
    scale = set()
    for point in points:
        value = report["per_host"][point.attrs["data-series"]]["configs"][point.attrs["data-group"]]["decode_tok_s"]
        if value is None:
            assert not point.find_all("rect") and point.find("text", class_="value").text() == "n/a"
            continue
        assert point.find("text", class_="value").text() == "%.1f" % value
        scale.add(round(float(point.find("rect", class_="bar").attrs["height"]) / value, 2))
    assert len(scale) == 1 and scale.pop() > 0  # every bar's height is its value times one scale
    assert [p.attrs["data-series"] for p in chart_points(dom, "ttft-chart")] == ["p50", "p90", "p99"] * len(names)
    # the synthetic load is named as what was sent; per-turn figures and a schedule slip belong to sessions and replays only
    assert [p.attrs["data-kind"] for p in dom.find("section", id="workload").find_all("p", class_="workload")] == ["synthetic"]
    for optional in ("per-turn", "slip"):
        assert not dom.find_all("section", id=optional)
    BUILD.mkdir(parents=True, exist_ok=True)
    shot = BUILD / "benchmark-matrix.png"
    proc, _wall = chromium(page, "--screenshot=%s" % shot, "--window-size=1200,2400", "--hide-scrollbars")
    assert proc.returncode == 0 and shot.stat().st_size > 10000, proc.stderr[-2000:]


@pytest.mark.timeout(1500)
def test_matrix_on_two_hosts_ll_wins_crash_is_reported_best_is_left_running(fleet, tmp_path):
    nodes = fleet("gpu-node-01", "gpu-node-02")
    configs = [{"name": "baseline"}, {"name": "LL", "env": {"NCCL_PROTO": "LL"}},
               {"name": "LL128", "env": {"NCCL_PROTO": "LL128"}}, {"name": "crash", "env": CRASH}]
    inv = inventory(tmp_path, nodes, vllm_benchmark_configs=configs, vllm_benchmark_repeats=2)
    run = run_playbook(MATRIX, inv, timeout=1400)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    results = tmp_path / "results"
    names = [c["name"] for c in configs]

    # the files exist and agree with each other: one raw JSON per host x config x round, one CSV row each
    raw = {p.name: json.loads(p.read_text()) for p in (results / "raw").glob("*.json")}
    assert len(raw) == 2 * 4 * 2, sorted(raw)
    with open(results / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(raw)
    for row in rows:
        cell = raw[Path(row["raw_file"]).name]
        assert (row["host"], row["config"], int(row["round"]), row["status"]) == (
            cell["host"], cell["config"], cell["round"], cell["status"])
        if row["status"] == "ok":
            run0 = cell["benchmark"]["runs"][0]
            assert float(row["decode_tok_s"]) == pytest.approx(1000.0 / run0["median_tpot_ms"], rel=1e-9)
            assert int(row["completed"]) == run0["completed"] == 4 and int(row["failed"]) == 0
            assert run0["total_output_tokens"] == 4 * OUTPUT_LEN
    assert (results / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((results / "plan.json").read_text())["hosts"] == ["gpu-node-01", "gpu-node-02"]

    # interleaved: each host ran round 1 (every config in turn), then round 2, one at a time
    for node in nodes:
        mine = sorted((r for r in rows if r["host"] == node.name), key=lambda r: int(r["order"]))
        assert [r["config"] for r in mine] == names * 2
        assert [int(r["round"]) for r in mine] == [1] * 4 + [2] * 4
        assert [r["started"] for r in mine] == sorted(r["started"] for r in mine)

    # the crash is reported, and every other measurement is still there
    failed = [r for r in rows if r["status"] != "ok"]
    assert sorted((r["host"], r["config"]) for r in failed) == sorted([(n.name, "crash") for n in nodes] * 2)
    assert all(r["stage"] == "restart" for r in failed)
    summary = (results / "summary.md").read_text()
    failures = summary.split("## Failures", 1)[1].split("## Files", 1)[0]
    assert failures.count("| crash |") == 4 and "exited while starting" in failures

    # Markdown medians == CSV medians, per host and across the fleet; the paces are NCCL_PROTO's
    tables = markdown_tables(summary)
    for section, subset in [("Fleet", rows)] + [(n.name, [r for r in rows if r["host"] == n.name]) for n in nodes]:
        for name in ["baseline", "LL", "LL128"]:
            ok = [r for r in subset if r["config"] == name and r["status"] == "ok"]
            assert len(ok) == len(subset) // 4
            decode, tpot = csv_median(ok, "decode_tok_s"), csv_median(ok, "median_tpot_ms")
            cells = tables[section][name]
            assert float(cells[3]) == pytest.approx(decode, abs=0.006), (section, name, cells)
            assert float(cells[6]) == pytest.approx(tpot, abs=0.006), (section, name, cells)
            assert decode == pytest.approx(PACE[name], rel=TOLERANCE), (section, name, decode)
        assert tables[section]["crash"][2].startswith("0 / ")
        base = csv_median([r for r in subset if r["config"] == "baseline" and r["status"] == "ok"], "decode_tok_s")
        ll = csv_median([r for r in subset if r["config"] == "LL" and r["status"] == "ok"], "decode_tok_s")
        assert tables[section]["LL"][5] == "%+.1f%%" % ((ll - base) / base * 100)
    report = json.loads((results / "report.json").read_text())
    assert report["winner"]["config"] == "LL" and report["winner"]["runner_up"] == "baseline"
    assert report["winner"]["significant"] is True
    fleet_part = summary.split("## gpu-node-01", 1)[0]
    assert "Winner: **LL**" in fleet_part and "larger than the run-to-run spread" in fleet_part
    assert "discourages setting `NCCL_PROTO` in production" in fleet_part and "LL128" in fleet_part
    assert "| LL | NCCL_PROTO=LL |" in run.stdout  # the table is printed at the end

    # the best configuration is left running: the process on the port, by /proc, /sim/pace and the simulator's GPUs
    left = {e["host"]: e for e in json.loads((results / "left_running.json").read_text())}
    for node in nodes:
        pid = server_pid(node)
        assert left[node.name]["status"] == "ok" and int(left[node.name]["pid"]) == pid
        assert psutil.Process(pid).environ().get("NCCL_PROTO") == "LL"
        pace = get_json(node.port, "/sim/pace")
        assert (pace["nccl_proto"], pace["source"], pace["tokens_per_s"]) == ("LL", "NCCL_PROTO", 57.6)
        assert_runs(node, pid, [0, 1])
    assert "- gpu-node-01: runs **LL**" in summary
    assert_page_as_seen(results, ["gpu-node-01", "gpu-node-02"], names)


@pytest.mark.timeout(900)
def test_matrix_leaves_the_baseline_and_a_null_removes_an_inventory_variable(fleet, tmp_path):
    """Also: a configuration whose engine dies after the first measured request (its task succeeds, its one completed
    request is the fastest of all) is a failed measurement that cannot win, named with its failed requests."""
    (node,) = fleet("gpu-node-01")
    # its engine takes the ready step's completion, the warmup and one measured request, then answers HTTP 500
    dies = {"GPUOPS_SIM_TOKENS_PER_S": "90", "GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS": "3"}
    configs = [{"name": "unset", "env": {"NCCL_PROTO": None}}, {"name": "dies", "env": dies}, {"name": "LL", "env": {"NCCL_PROTO": "LL"}}]
    inv = inventory(tmp_path, [node], vllm_server_env={"NCCL_PROTO": "LL128"}, vllm_benchmark_configs=configs,
                    vllm_benchmark_repeats=1, vllm_benchmark_leave="baseline", vllm_server_tensor_parallel_size=1)
    run = run_playbook(MATRIX, inv, timeout=800)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    results = tmp_path / "results"
    cells = {c["config"]: c for c in (json.loads(p.read_text()) for p in (results / "raw").glob("*.json"))}
    assert cells["unset"]["summary"]["decode_tok_s"] == pytest.approx(PACE["baseline"], rel=TOLERANCE)
    assert cells["LL"]["summary"]["decode_tok_s"] == pytest.approx(PACE["LL"], rel=TOLERANCE)
    # the server's own count: one measured request completed at its fast pace, the other three failed
    measured = cells["dies"]["benchmark"]["runs"][0]
    assert (measured["completed"], measured["failed"]) == (1, 3), measured
    assert cells["dies"]["status"] == "ok" and cells["dies"]["summary"]["decode_tok_s"] == pytest.approx(90.0, rel=TOLERANCE)
    summary = (results / "summary.md").read_text()
    assert "Winner: **LL**" in summary and "spread is unknown (one round)" in summary
    assert "Configuration to leave running: **unset** (vllm_benchmark_leave=baseline)" in summary
    failures = summary.split("## Failures", 1)[1].split("## Files", 1)[0]
    assert "| dies | 1 | benchmark |" in failures and "3 of 4 requests failed (" in failures, failures
    report = json.loads((results / "report.json").read_text())
    assert report["fleet"]["dies"]["decode_tok_s"] is None and report["fleet"]["dies"]["failed"] == 1
    with open(results / "results.csv", newline="") as handle:
        rows = {row["config"]: row for row in csv.DictReader(handle)}
    assert rows["dies"]["status"] == "requests failed"
    # each configuration's start-up: the three differ in their environment only, so the fake compiled once (its own
    # record), and the report says which launch compiled and which loaded vLLM's compile cache
    compiled = [json.loads(line)["compiled"] for line in (node.state / "startups.jsonl").read_text().splitlines()]
    assert compiled == [True, False, False, False], compiled  # the fourth: the baseline left running
    assert [rows[name]["compile_cache"] for name in ("unset", "dies", "LL")] == ["miss", "hit", "hit"]
    assert all(float(rows[name]["startup_s"]) > 0 for name in ("unset", "dies", "LL"))
    assert report["fleet"]["LL"]["startup"]["cache_hits"] == 1 and "| start-up |" in summary
    assert_page_as_seen(results, [node.name], ["unset", "dies", "LL"])
    shown = dump_dom(results / "report.html")[0].find("table", id="failures-table").text()
    assert "dies" in shown and "3 of 4 requests failed" in shown, shown
    left_row = dump_dom(results / "report.html")[0].find("table", id="left-table").find("tr", data_host=node.name)
    assert left_row.attrs["data-status"] == "ok" and "PID %d" % server_pid(node) in left_row.text()
    pid = server_pid(node)
    assert pid != int(cells["LL"]["server"]["pid"])  # LL ran last: leaving the baseline restarted it
    assert "NCCL_PROTO" not in psutil.Process(pid).environ()
    assert get_json(node.port, "/sim/pace")["nccl_proto"] is None
    assert_runs(node, pid, [0])


@pytest.mark.parametrize("bad, needle", [
    ({"vllm_benchmark_configs": []}, "must be a non-empty list"),
    ({"vllm_benchmark_configs": [{"name": "a b"}]}, "distinct names"),
    ({"vllm_benchmark_configs": [{"name": "a"}, {"name": "a"}]}, "distinct names"),
    ({"vllm_benchmark_configs": [{"name": "a", "args": "--x"}]}, "args a list"),
    ({"vllm_benchmark_configs": [{"name": "a"}], "vllm_benchmark_baseline": "b"}, "must be one of the names"),
    ({"vllm_benchmark_configs": [{"name": "a"}], "vllm_benchmark_leave": "worst"}, "must be best or baseline"),
])
def test_bad_matrix_fails_before_anything_is_touched(fleet, tmp_path, bad, needle):
    (node,) = fleet("gpu-node-01")
    run = run_playbook(MATRIX, inventory(tmp_path, [node], **bad))
    assert run.returncode != 0
    assert needle in flat(run.stdout), run.stdout[-3000:]
    assert not (node.state / "role").exists()  # the role never ran
    assert not (tmp_path / "results").exists()


def test_check_mode_is_refused_before_anything_is_touched(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    run = run_playbook(MATRIX, inventory(tmp_path, [node], vllm_benchmark_configs=[{"name": "a"}]), "--check")
    assert run.returncode != 0 and "there is no check mode" in flat(run.stdout), run.stdout[-3000:]
    assert not (node.state / "role").exists() and not (tmp_path / "results").exists()


@pytest.mark.timeout(600)
def test_restart_with_benchmark_prints_its_figures_and_they_are_the_servers(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    inv = inventory(tmp_path, [node], vllm_server_env={"NCCL_PROTO": "LL128"}, vllm_server_benchmark_repeats=2,
                    vllm_server_benchmark_output_len=48)
    run = run_playbook(RESTART, inv, "-e", "vllm_restart_benchmark=true")
    assert run.returncode == 0, run.stdout[-4000:]
    out = flat(run.stdout)
    found = re.search(r"gpu-node-01: benchmark: ([\d.]+) tok/s per stream \(median TPOT ([\d.]+) ms.*?"
                      r"(\d+) completed, (\d+) failed, (\d+) repeat", out)
    assert found, out[-3000:]
    decode, tpot, completed, failed, repeats = found.groups()
    assert float(decode) == pytest.approx(PACE["LL128"], rel=TOLERANCE)
    assert float(decode) == pytest.approx(1000.0 / float(tpot), rel=0.01)
    assert (int(completed), int(failed), int(repeats)) == (8, 0, 2)
    pid = server_pid(node)
    assert psutil.Process(pid).environ()["NCCL_PROTO"] == "LL128"
    # the server's own counter: the ready step's generation check (4 tokens), one warmup request and 2 x 4 measured
    # ones, 48 tokens each
    assert generation_tokens(node.port) == READY_TOKENS + (1 + 2 * 4) * 48

    again = run_playbook(RESTART, inv, "-e", "vllm_server_state=started")  # benchmark off by default
    assert again.returncode == 0, again.stdout[-4000:]
    assert "UNCHANGED" in again.stdout and "benchmark:" not in again.stdout
    # no benchmark: the only request is the rerun's own generation check (a server left alone must generate)
    assert server_pid(node) == pid and generation_tokens(node.port) == 2 * READY_TOKENS + (1 + 2 * 4) * 48


@pytest.mark.timeout(900)
def test_matrix_with_a_dataset_sends_every_configuration_the_same_requests(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    # prompts told apart by their length and output length, as the server records them (GET /sim/sent)
    rows = [{"prompt": " ".join("w%d" % i for i in range(8 + n)), "output_len": 3 + n % 4} for n in range(10)]
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows))
    entries = {(8 + n, 3 + n % 4) for n in range(10)}
    # the baseline runs last and is left running as it is (no restart), so its server's records are the measurement's
    configs = [{"name": "LL", "env": {"NCCL_PROTO": "LL"}}, {"name": "base"}]
    inv = inventory(tmp_path, [node], vllm_benchmark_configs=configs, vllm_benchmark_baseline="base", vllm_benchmark_repeats=1,
                    vllm_benchmark_leave="baseline", vllm_server_tensor_parallel_size=1,
                    vllm_server_benchmark_workload={"kind": "dataset", "file": str(dataset)})
    run = run_playbook(MATRIX, inv, timeout=800)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    results = tmp_path / "results"
    cells = {c["config"]: c for c in (json.loads(p.read_text()) for p in (results / "raw").glob("*.json"))}
    assert int(cells["base"]["server"]["pid"]) == server_pid(node)  # left running: the server that measured last
    # the benchmark's streamed requests (the role's own generation checks do not stream), in the order they arrived
    records = sorted((record for record in get_json(node.port, "/sim/sent")["requests"] if record["stream"]),
                     key=lambda record: record["arrived_s"])
    assert len(records) == 5, records  # one warmup request, four measured
    measured = [(record["prompt_tokens"], record["output_tokens"]) for record in records[-4:]]
    assert len(set(measured)) == 4 and set(measured) <= entries, records
    assert (records[-5]["prompt_tokens"], records[-5]["output_tokens"]) in entries - set(measured)  # the warmup's own
    digest = hashlib.sha256(dataset.read_bytes()).hexdigest()
    for cell in cells.values():
        assert cell["status"] == "ok", cell
        workload = cell["benchmark"]["workload"]
        assert (workload["kind"], workload["file"], workload["sha256"], workload["requests"]) == ("dataset", str(dataset), digest, 4)
        # both configurations: the server's prompt and output tokens of the same four requests
        run0 = cell["benchmark"]["runs"][0]
        assert run0["total_input_tokens"] == sum(prompt for prompt, _output in measured)
        assert run0["total_output_tokens"] == sum(output for _prompt, output in measured)
        # the summary the role keeps: the server's prefix-cache lookups (the fake counts every prompt token)
        assert cell["summary"]["prefix_cache"]["queries"] == run0["total_input_tokens"]
        assert cell["summary"]["workload"] == workload
    plan = json.loads((results / "plan.json").read_text())
    assert plan["benchmark"]["workload"] == {"kind": "dataset", "file": str(dataset)}
    assert "Workload: dataset (file %s)." % dataset in (results / "summary.md").read_text()
    # the page, as chromium shows it: the workload that was sent, and the server's prefix-cache counters of each configuration
    dom = dump_dom(results / "report.html")[0]
    shown = dom.find("section", id="workload").find("p", class_="workload")
    assert (shown.attrs["data-kind"], shown.attrs["data-sha256"]) == ("dataset", digest) and digest[:12] in shown.text(), shown.text()
    cache_rows = [tr for tr in dom.find("table", id="prefix-cache-table").find_all("tr") if "data-series" in tr.attrs]
    assert sorted(tr.attrs["data-series"] for tr in cache_rows) == ["LL", "base"], [tr.attrs for tr in cache_rows]
    queries = {tr.attrs["data-series"]: numbers(tr)[0] for tr in cache_rows}
    assert queries == {name: float(cell["summary"]["prefix_cache"]["queries"]) for name, cell in cells.items()}, queries
