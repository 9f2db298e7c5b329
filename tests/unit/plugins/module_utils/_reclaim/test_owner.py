# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""orphans_only and owner on a fake process table: a server's leftovers and orphans are taken, a live job's vLLM never."""

from __future__ import annotations

import types

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host import process_table as _process_table
from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import describe_process
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.plan import plan_targets
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import SpecError
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_psutil import FakeClock, FakePsutil, host_rows, ME, Row, vllm_server
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils._reclaim.test_spec import spec

VLLM_MATCH = [r"^VLLM::", r"vllm\.entrypoints\.", r"(^|/)vllm\s+serve(\s|$)"]
NEVER = {1, 50, 51, ME, 900, 901, 902}
BATCH = ["python3", "batch_infer.py", "--input", "prompts.jsonl"]


@pytest.fixture(autouse=True)
def this_pid(monkeypatch):
    monkeypatch.setattr(_process_table, "os", types.SimpleNamespace(getpid=lambda: ME))


def colleague(parent=1, pid=3000, gpu=3):
    """python3 batch_infer.py with a child VLLM::Worker_TP0 that holds ``gpu``."""
    return [Row(pid, parent, "python3", BATCH, username="alice"),
            Row(pid + 1, pid, "VLLM::Worker_TP0", ["VLLM::Worker_TP0"], username="alice")], {pid + 1: gpu}


def orphans(adopter=1, gpus=range(1, 8)):
    """The incident's leftovers: the API server and worker 0 SIGKILLed, the other workers adopted by ``adopter``."""
    rows, held = vllm_server(1000, range(8), engine_core=False)
    rows = [row for row in rows if row.pid not in (1000, 1002, 1010)]
    for row in rows:
        row.ppid = adopter
    return rows, {pid: gpu for pid, gpu in held.items() if gpu in gpus}


def plan(rows, gpu_of, sessions=None, **options):
    """plan_targets on a fake table; ``sessions``: pid -> its session (default: every process in session 1)."""
    psutil = FakePsutil(host_rows() + rows, FakeClock())
    holders = {}
    for pid, gpu in gpu_of.items():
        holders.setdefault(pid, dict(describe_process(psutil, pid), gpus=[]))["gpus"].append(gpu)
    options.setdefault("match", VLLM_MATCH)
    options.setdefault("orphans_only", True)

    def sid_of(pid):
        return (sessions or {}).get(pid, 1) if pid in psutil.table else None

    return plan_targets(psutil, spec(**options), holders, set(range(8)), {}, sid_of=sid_of)


def targets(result):
    return {tg.pid for tg in result.targets}


def test_a_live_jobs_worker_is_someone_elses_and_the_incidents_orphans_are_taken():
    job, job_held = colleague()
    left, left_held = orphans()
    result = plan(job + left, {**job_held, **left_held})
    assert targets(result) == set(left_held)
    assert set(result.foreign) == {3001} and result.foreign[3001].parent == 3000 and result.foreign[3001].top == 3001
    why = result.left_alone[3001]
    assert why == "belongs to live PID 3000 (python3 batch_infer.py --input prompts.jsonl), not to this server nor an orphan: someone else's job"
    assert not (NEVER | {3000, 3001}) & targets(result)


def test_without_orphans_only_the_jobs_worker_is_taken_as_before():
    """With `match` alone (no orphans_only) the colleague's worker is a target, and its batch_infer.py is not."""
    job, job_held = colleague()
    result = plan(job, job_held, orphans_only=False)
    assert targets(result) == {3001} and result.foreign == {}


def test_a_live_jobs_engine_core_and_workers_are_someone_elses():
    rows = [Row(3000, 1, "python3", BATCH), Row(3001, 3000, "VLLM::EngineCore", ["VLLM::EngineCore"]),
            Row(3002, 3001, "VLLM::Worker_TP0", ["VLLM::Worker_TP0"]), Row(3003, 3001, "VLLM::Worker_TP1", ["VLLM::Worker_TP1"])]
    result = plan(rows, {3002: 2, 3003: 3})
    assert targets(result) == set() and set(result.foreign) == {3002, 3003}
    assert {v.top for v in result.foreign.values()} == {3001} and {v.parent for v in result.foreign.values()} == {3000}


@pytest.mark.parametrize("adopter", [
    Row(700, 1, "systemd", ["/lib/systemd/systemd", "--user"]),
    Row(700, 1, "python3", ["/opt/venv/bin/python3", "-m", "gpusim.reaper"]),
    Row(700, 1, "tini", ["/sbin/tini", "-s", "--", "sleep", "infinity"]),
])
def test_orphans_under_a_subreaper_are_taken(adopter):
    left, held = orphans(adopter=700)
    result = plan([adopter] + left, held)
    assert targets(result) == set(held) and result.foreign == {}
    assert 700 not in targets(result)


def test_orphans_under_pid_1_are_taken_and_so_is_a_server_left_to_init():
    left, held = orphans()
    server, server_held = vllm_server(2000, [0], engine_core=True)  # started by hand, its parent is init
    result = plan(left + server, {**held, **server_held})
    assert targets(result) == set(held) | {2000, 2001, 2002, 2010}
    assert {tg.pid for tg in result.targets if tg.role == "launcher"} == {2000}


def test_a_server_below_a_live_wrapper_is_someone_elses_unless_it_is_the_owner():
    wrapper = Row(1990, 1, "bash", ["/bin/bash", "/opt/gpuops/run-vllm.sh"])
    server, held = vllm_server(2000, range(4), parent=1990)
    result = plan([wrapper] + server, held)
    assert targets(result) == set() and set(result.foreign) == set(held)
    assert all(v.top == 2000 and v.parent == 1990 for v in result.foreign.values())
    owned = plan([wrapper] + server, held, owner={"pid": 2000, "create_time": 1000.0})
    assert targets(owned) == {2000, 2001, 2002} | set(held) and owned.foreign == {}
    assert 1990 not in targets(owned)


def test_an_owner_whose_start_time_differs_is_a_reused_pid_and_owns_nothing():
    wrapper = Row(1990, 1, "bash", ["/bin/bash", "/opt/gpuops/run-vllm.sh"])
    server, held = vllm_server(2000, range(2), parent=1990)
    result = plan([wrapper] + server, held, owner={"pid": 2000, "create_time": 999.0})
    assert targets(result) == set() and set(result.foreign) == set(held)


def test_adopted_by_an_unknown_adopter_in_another_session_is_an_orphan():
    """The adopter matches no pattern, but the workers are in the dead server's session (1000), which the adopter,
    no session leader itself, is not in: it did not start them."""
    adopter = Row(800, 1, "supervise", ["/usr/local/bin/supervise", "--dir", "/srv"])
    left, held = orphans(adopter=800)
    sessions = {**{pid: 1000 for pid in held}, 800: 790}
    assert targets(plan([adopter] + left, held, sessions)) == set(held)
    # the same parent in the workers' own session may have started them: someone else's
    same = {**sessions, 800: 1000}
    assert set(plan([adopter] + left, held, same).foreign) == set(held)
    # a parent that leads its own session may have forked them before it started that session: someone else's
    leader = {**sessions, 800: 800}
    assert set(plan([adopter] + left, held, leader).foreign) == set(held)


def test_a_job_that_started_its_vllm_in_a_new_session_is_still_someone_elses():
    """batch_infer.py started `vllm serve` with start_new_session: the server leads its own session."""
    job = Row(3000, 1, "python3", BATCH)
    server, held = vllm_server(2000, range(2), parent=3000)
    sessions = {pid: 2000 for pid in [2000, 2001, 2002] + list(held)}
    sessions[3000] = 2999
    result = plan([job] + server, held, sessions)
    assert targets(result) == set() and set(result.foreign) == set(held)


def test_workers_in_the_owners_session_are_its_while_it_runs_and_after_it_is_gone():
    adopter = Row(800, 1, "supervise", ["/usr/local/bin/supervise"])
    server, held = vllm_server(2000, range(2), parent=1)
    # the engine core died: the workers were adopted by an adopter that leads its session, but they are in the owner's
    rows = [adopter] + [row for row in server if row.pid != 2001]
    for row in rows:
        if row.pid in held:
            row.ppid = 800
    sessions = {**{pid: 2000 for pid in [2000, 2002] + list(held)}, 800: 800}
    assert set(plan(rows, held, sessions).foreign) == set(held)  # without an owner: someone else's
    running = plan(rows, held, sessions, owner={"pid": 2000, "create_time": 1000.0})
    assert targets(running) >= set(held) and running.foreign == {}
    gone = [row for row in rows if row.pid != 2000]
    assert targets(plan(gone, held, sessions, owner={"pid": 2000, "create_time": 1000.0})) == set(held)
    # gone, and the workers started before the recorded start time: that session was not the owner's
    assert set(plan(gone, held, sessions, owner={"pid": 2000, "create_time": 1001.0}).foreign) == set(held)
    # gone, and no start time recorded: a session ID alone says nothing
    assert set(plan(gone, held, sessions, owner={"pid": 2000}).foreign) == set(held)


def test_a_ray_actor_below_raylet_is_someone_elses():
    rows = [Row(600, 1, "raylet", ["/usr/lib/ray/raylet", "--node_ip_address=10.0.0.1"]),
            Row(601, 600, "VLLM::Worker_TP0", ["VLLM::Worker_TP0"])]
    result = plan(rows, {601: 0})
    assert targets(result) == set() and result.foreign[601].parent == 600


@pytest.mark.parametrize("owner, named", [
    ({"pid": 1}, "owner.pid: 1"),
    ({"pid": 0}, "owner.pid: 0"),
    ({"pid": -5}, "owner.pid: -5"),
    ({"pid": True}, "owner.pid: True"),
    ({"pid": "server"}, "owner.pid: 'server'"),
    ({"create_time": 1.0}, "owner.pid: None"),
    ({"pid": 2000, "create_time": -1}, "owner.create_time: -1"),
    ({"pid": 2000, "create_time": float("nan")}, "owner.create_time: nan"),
    ({"pid": 2000, "create_time": "yesterday"}, "owner.create_time: 'yesterday'"),
    ({"pid": 2000, "start": 5}, "owner: unknown key start"),
    ("2000", "owner: '2000' is not a dictionary"),
])
def test_bad_owner_is_refused_naming_the_option_and_the_value(owner, named):
    with pytest.raises(SpecError) as caught:
        spec(owner=owner)
    assert named in str(caught.value), str(caught.value)


def test_bad_subreaper_pattern_is_refused():
    with pytest.raises(SpecError, match=r"subreapers: '\(' is not a valid regular expression"):
        spec(subreapers=["("])


def test_owner_from_strings_as_a_template_gives_them():
    assert spec(owner={"pid": "2000", "create_time": "1700000000.25"}).owner == (2000, 1700000000.25)
    assert spec(owner=None).owner is None and spec().orphans_only is False


@pytest.mark.parametrize("joined, kind", [(False, "orphan"), (True, "foreign"), (None, "foreign")])
def test_a_headless_rank_whose_head_is_gone_leaves_orphans(joined, kind):
    """gpu_cleanup's patterns: a live `vllm serve --headless` is not launcher-shaped, so its worker hangs from it; while it
    is joined to its head (or that cannot be read) the worker is a live server's, once its head is gone an orphan."""
    from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.owner import Ownership  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.plan import climb  # pylint: disable=import-outside-toplevel
    rank = ["vllm", "serve", "m", "--headless", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1"]
    rows = [Row(3000, 1, "bash", ["bash"]), Row(3001, 3000, "vllm", rank), Row(3002, 3001, "VLLM::Worker_TP0", ["VLLM::Worker_TP0"])]
    psutil = FakePsutil(host_rows() + rows, FakeClock())
    table = _process_table.ProcessTable(psutil)
    options = spec(match=[r"^VLLM::"], launcher_patterns=[r"^VLLM::"], orphans_only=True)
    asked = []

    def connected(pids, address):
        asked.append((sorted(pids), address))
        return joined

    verdict = Ownership(table, options, lambda pid: 1, connected).judge(3002, *climb(table, 3002, options, set()))
    assert verdict.kind == kind and asked == [([3001, 3002], "10.0.0.1")]
    if kind == "orphan":
        assert "PID 3001" in verdict.why and "whose head, 10.0.0.1, is gone" in verdict.why
