# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The alert rules shipped for Prometheus (extensions/prometheus/gpuops-fleet.rules.yml) with the real promtool
(Debian's prometheus package, which `make integration` installs): they load, their tests pass, each rule's test fails
when the rule is loosened (so each test can fail), every metric they name is one the endpoint writes, and the
endpoint's text passes `promtool check metrics`; the Grafana dashboard's queries parse."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import typing as t
from pathlib import Path

import pytest
import yaml

from ansible_run import REPO

from ansible_collections.gpuops.fleet.plugins.module_utils._watch import metrics

HERE = REPO / "extensions" / "prometheus"
RULES = HERE / "gpuops-fleet.rules.yml"
TESTS = HERE / "tests" / "rules_test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: `make integration` installs Debian's prometheus package")
    return path


def run(*argv: str, cwd: Path = HERE, stdin: t.Optional[str] = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120, check=False)


def rules() -> t.List[t.Dict[str, t.Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_the_rules_load_and_their_tests_pass(promtool):
    checked = run(promtool, "check", "rules", str(RULES))
    assert checked.returncode == 0 and "SUCCESS: %d rules found" % len(rules()) in checked.stdout, checked.stdout + checked.stderr
    tested = run(promtool, "test", "rules", str(TESTS.relative_to(HERE)))
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def loosened(rule: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """The rule made to fire more: without its `for:` when it has one, else with its threshold one lower."""
    changed = dict(rule)
    if "for" in changed:
        del changed["for"]
    else:
        changed["expr"] = re.sub(r">= (\d+)", lambda m: ">= %d" % (int(m.group(1)) - 1), changed["expr"])
        assert changed["expr"] != rule["expr"], rule
    return changed


@pytest.mark.parametrize("name", [rule["alert"] for rule in rules()])
def test_each_rules_test_can_fail(promtool, tmp_path, name):
    """Canary: with one rule loosened, promtool's tests fail, naming that alert (a case that must not fire does)."""
    document = yaml.safe_load(RULES.read_text())
    for group in document["groups"]:
        group["rules"] = [loosened(rule) if rule.get("alert") == name else rule for rule in group["rules"]]
    (tmp_path / "tests").mkdir()
    (tmp_path / RULES.name).write_text(yaml.safe_dump(document))
    shutil.copy(TESTS, tmp_path / "tests" / TESTS.name)
    tested = run(promtool, "test", "rules", "tests/" + TESTS.name, cwd=tmp_path)
    assert tested.returncode != 0 and name in tested.stdout + tested.stderr, tested.stdout + tested.stderr


def test_every_metric_of_the_rules_is_written_by_the_endpoint():
    named = set()
    for rule in rules():
        named.update(re.findall(r"\b(gpuops_[a-z_]+)", rule["expr"]))
    assert named and named <= set(metrics.FAMILIES), named - set(metrics.FAMILIES)
    # and every family name is a valid, prefixed Prometheus name
    assert all(re.fullmatch(r"gpuops_[a-z_]+", name) for name in metrics.FAMILIES)


def test_the_endpoints_text_passes_promtool_check_metrics(promtool):
    gpus = [{"index": 0, "uuid": "GPU-0", "state": "held", "unhealthy": False, "memory_used_mib": 9000, "memory_total_mib": 97887,
             "unaccounted_mib": None, "holders": [
                 {"pid": 41, "name": 'odd "name"\\with\nlines', "owner": "orphan", "used_memory_mib": 5000, "container": None},
                 {"pid": 42, "name": "python3", "owner": "other job", "used_memory_mib": None, "container": None}]}]
    server = metrics.ServerState(name="vllm-8000", model="org/model", port=8000, mode="process", pid=40, up=True, health=True,
                                 generates=False, generation_age_s=1.5, start_time=1.7e9, startups=2, restarts=None)
    text = metrics.exposition(metrics.reading_samples("n1", True, None, 0.2, 1.7e9) + metrics.gpu_samples("n1", gpus)
                              + metrics.server_samples("n1", [server]))
    checked = run(promtool, "check", "metrics", stdin=text)
    # promtool's lint asks counters to end in _total (ours does) and units in base units: MiB is kept, as nvidia-smi
    # and gpu_facts say it; any other complaint fails
    problems = [line for line in (checked.stdout + checked.stderr).splitlines()
                if line.strip() and "use base unit" not in line and "should not" not in line.lower()]
    assert checked.returncode in (0, 3) and not problems, checked.stdout + checked.stderr


def test_the_dashboards_queries_parse_and_name_the_endpoints_metrics(promtool, tmp_path):
    """Every query of the Grafana dashboard (extensions/prometheus/gpuops-fleet.dashboard.json) is valid PromQL (promtool
    checks it as a recording rule, $host given a value) and names only metrics the endpoint writes."""
    dashboard = json.loads((HERE / "gpuops-fleet.dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(exprs) == len(dashboard["panels"]) >= 5
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": "dashboard:query_%d" % i, "expr": expr.replace("$host", ".*")}
                                                        for i, expr in enumerate(exprs)]}]}
    (tmp_path / "dashboard.rules.yml").write_text(yaml.safe_dump(rules))
    checked = run(promtool, "check", "rules", str(tmp_path / "dashboard.rules.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    named = {name for expr in exprs for name in re.findall(r"\b(gpuops_[a-z_]+)", expr)}
    assert named <= set(metrics.FAMILIES), named - set(metrics.FAMILIES)
    # a canary: a query that does not parse is refused
    (tmp_path / "bad.rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [{"record": "x:y", "expr": "sum by (host gpuops_gpus"}]}]}))
    assert run(promtool, "check", "rules", str(tmp_path / "bad.rules.yml")).returncode != 0
