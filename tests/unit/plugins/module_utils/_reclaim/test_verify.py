# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fresh reading after the kill, and the judgement of it (_reclaim/verify): free, or every reason why not (and which
may still resolve).

Check mode (predict) and the real run (judge) class every GPU holder with the one classifier, and agree. Each row is
one holder of one GPU: what the process looks like, whether this run signals it, why the plan leaves it alone, whether
by a rule of this run (on purpose) and whether the caller accepts those (live_jobs: keep). Both paths run over it; the
class each path asked the classifier for must be the row's class, the same for both, and what each path then says
(freed / kept / a failure) must fit that class.
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import Holder, Memory, NvmlSession
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim import verify
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.verify import judge, predict, Problem, read_gpu, Reading
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_pynvml import device, FakeNvml, proc

THRESHOLD = 1024
PROCESSES = {
    4242: {"visible": True, "name": "VLLM::Worker_TP2", "cmdline": ["VLLM::Worker_TP2"], "state": "zombie"},
    4343: {"visible": True, "name": "python3", "cmdline": ["python3", "train.py"], "state": "running"},
    902: {"visible": True, "name": "nvidia-persistenced", "cmdline": ["nvidia-persistenced"], "state": "sleeping"},
    777777: {"visible": False, "name": None, "cmdline": None, "state": None},
}


def reading(used, *holders, index=2):
    return Reading(index, "GPU-uuid", Memory(97887, used, 512, 97887 - 512 - used), [Holder(pid, mib, "compute") for pid, mib in holders], None)


def problems(value, signalled=(), left_alone=None, ignore_foreign=False):
    return judge(value, THRESHOLD, {pid: ("still there after every signal", True) for pid in signalled}, left_alone or {}, PROCESSES.__getitem__,
                 lambda info: info["name"] == "nvidia-persistenced", ignore_foreign)


def test_read_gpu_reads_memory_and_every_holder():
    lib = FakeNvml([device(0, used_mib=93029, compute=[proc(10, 93000)], graphics=[proc(11, 29)])])
    got = read_gpu(NvmlSession(lib), 0)
    assert got.error is None and got.uuid == "GPU-00000000-1111-2222-3333-444455556666"
    assert got.memory.used_mib == 93029
    assert [(h.pid, h.used_memory_mib, h.type) for h in got.holders] == [(10, 93000, "compute"), (11, 29, "graphics")]


def test_read_gpu_of_a_lost_gpu_is_an_error_not_an_exception():
    lib = FakeNvml([device(0), device(1, lost=True)])
    got = read_gpu(NvmlSession(lib), 1)
    assert (got.index, got.uuid, got.memory, got.holders) == (1, None, None, [])
    assert got.error.startswith("GPU 1: ") and "GPU_IS_LOST" in got.error


@pytest.mark.parametrize("used", [0, THRESHOLD])
def test_free_gpu_has_no_problem(used):
    assert problems(reading(used)) == []


def test_lost_gpu_is_a_lasting_problem():
    lost = Reading(3, None, None, [], "GPU 3: GPU is lost (NVML_ERROR_GPU_IS_LOST)")
    assert problems(lost) == [Problem(3, "GPU 3: GPU is lost (NVML_ERROR_GPU_IS_LOST)", False)]


def test_signalled_survivor_is_named_with_its_state_and_may_still_go():
    assert problems(reading(5000, (4242, 5000)), signalled=[4242]) == [
        Problem(2, "GPU 2: pid 4242 (VLLM::Worker_TP2, state zombie) holds 5000 MiB: still there after every signal", True)]


def test_holder_left_alone_says_why():
    got = problems(reading(5000, (4343, 5000)), left_alone={4343: "does not match `match`"})
    assert got == [Problem(2, "GPU 2: pid 4343 (python3, state running) holds 5000 MiB: not signalled: does not match `match`", False)]


def test_holder_that_appeared_during_the_reclaim_is_a_respawn():
    got = problems(reading(5000, (4343, None)))
    assert len(got) == 1 and not got[0].waitable
    assert got[0].text == "GPU 2: pid 4343 (python3, state running) holds N/A MiB: appeared during the reclaim (respawned by a launcher left alive?)"


def test_foreign_pid_names_gpu_mib_and_the_host_pid_namespace():
    got = problems(reading(20000, (777777, 20000)))
    assert len(got) == 1 and not got[0].waitable
    text = got[0].text
    assert text.startswith("GPU 2: pid 777777 holds 20000 MiB") and "PID namespace" in text and "ignore_foreign" in text


def test_ignored_foreign_pid_is_not_counted():
    assert problems(reading(20500, (777777, 20000)), ignore_foreign=True) == []
    # its memory is discounted, the rest still judged
    got = problems(reading(22000, (777777, 20000)), ignore_foreign=True)
    assert [p.text for p in got] == ["GPU 2: 2000 MiB used with no process holding it (above idle_threshold_mib 1024): "
                                     "memory held by no process, e.g. a driver teardown that did not finish"]


def test_memory_held_by_no_process_may_still_come_back():
    assert problems(reading(4096)) == [Problem(
        2, "GPU 2: 4096 MiB used with no process holding it (above idle_threshold_mib 1024): "
           "memory held by no process, e.g. a driver teardown that did not finish", True)]


def test_excluded_holder_is_fine_below_the_threshold():
    assert problems(reading(300, (902, 300))) == []


def test_excluded_holder_above_the_threshold_is_named():
    assert problems(reading(3000, (902, 3000))) == [
        Problem(2, "GPU 2: 3000 MiB used (above idle_threshold_mib 1024) while excluded holders keep it: "
                   "pid 902 (nvidia-persistenced, excluded, 3000 MiB)", False)]


def test_every_problem_of_a_gpu_is_listed():
    got = problems(reading(30000, (4242, 5000), (4343, 5000), (777777, 20000)), signalled=[4242])
    assert [p.waitable for p in got] == [True, False, False]
    assert ["pid 4242" in got[0].text, "pid 4343" in got[1].text, "pid 777777" in got[2].text] == [True] * 3


def test_signalled_process_gone_from_proc_but_still_listed_is_ours_not_foreign():
    """Even with ignore_foreign, a PID this run signalled is never discounted as another namespace's."""
    for ignore in (False, True):
        got = problems(reading(50000, (777777, 50000)), signalled=[777777], ignore_foreign=ignore)
        assert got == [Problem(2, "GPU 2: pid 777777 exited after a signal but NVML still lists it with 50000 MiB: "
                                  "the driver has not released its memory", True)]


def test_memory_held_by_no_process_is_waited_for_only_where_a_holder_was_signalled():
    gpu = reading(4096)
    settling = judge(gpu, THRESHOLD, {}, {}, PROCESSES.__getitem__, lambda info: False, False, True)
    settled = judge(gpu, THRESHOLD, {}, {}, PROCESSES.__getitem__, lambda info: False, False, False)
    assert [p.waitable for p in settling] == [True] and [p.waitable for p in settled] == [False]
    assert settling[0].text == settled[0].text


# live_jobs: keep. 5151 is a colleague's job that the plan left alone on purpose (on_purpose: its start time)
LIVE = {5151: {"visible": True, "name": "VLLM::Worker_TP0", "cmdline": ["VLLM::Worker_TP0"], "state": "sleeping", "create_time": 1000.0}}
LIVE_WHY = {5151: "belongs to live PID 3000 (python3 batch_infer.py), not to this server nor an orphan: someone else's job"}


def kept(value, keep=True, signalled=(), settling=True, started=1000.0, helper_seen=True):
    """judge() with the job of LIVE left alone on purpose; ``started``: the start time of the process with its PID now;
    ``helper_seen``: the excluded nvidia-persistenced (902) was a holder when the plan was made (else it came since)."""
    processes = {**PROCESSES, 5151: dict(LIVE[5151], create_time=started), 902: dict(PROCESSES[902], create_time=900.0)}
    on_purpose = {5151: 1000.0, **({902: 900.0} if helper_seen else {})}
    why = {**LIVE_WHY, **({902: "a driver helper or GPU monitor (always excluded)"} if helper_seen else {})}
    return judge(value, THRESHOLD, {pid: ("still there after every signal", True) for pid in signalled}, why,
                 processes.__getitem__, lambda info: info["name"] == "nvidia-persistenced", False, settling, keep, on_purpose)


def test_keep_accepts_a_gpu_busy_only_with_a_job_left_alone_on_purpose():
    assert kept(reading(12000 + THRESHOLD, (5151, 12000))) == []
    assert kept(reading(12000, (5151, None))) == [], "a share NVML does not give is the holder's"
    assert kept(reading(15000, (5151, 12000), (902, 3000))) == [], "an excluded holder's memory is its own too"
    assert kept(reading(3000, (902, 3000))) == [], "the excluded holder alone above the threshold"
    # an excluded holder that came during the run was not left alone by the plan: above the threshold, as before
    late = kept(reading(15000, (5151, 12000), (902, 3000)), helper_seen=False)
    assert [p.text for p in late] == ["GPU 2: 15000 MiB used, 3000 MiB of it beyond what the holders left alone hold (pid 5151 "
                                      "(VLLM::Worker_TP0, 12000 MiB)), above idle_threshold_mib 1024: excluded holders keep it "
                                      "(pid 902 (nvidia-persistenced, excluded, 3000 MiB)) or no process holds it"]
    assert [p.text for p in kept(reading(3000, (902, 3000)), helper_seen=False)] == [
        "GPU 2: 3000 MiB used (above idle_threshold_mib 1024) while excluded holders keep it: pid 902 (nvidia-persistenced, excluded, 3000 MiB)"]
    # the default names the same job as the reason the GPU is not free
    assert [p.text for p in kept(reading(12000, (5151, 12000)), keep=False)] == [
        "GPU 2: pid 5151 (VLLM::Worker_TP0, state sleeping) holds 12000 MiB: not signalled: " + LIVE_WHY[5151]]


def test_keep_still_fails_for_memory_held_by_no_process_beside_the_job():
    got = kept(reading(16096, (5151, 12000)))
    assert got == [Problem(2, "GPU 2: 16096 MiB used, 4096 MiB of it beyond what the holders left alone hold (pid 5151 (VLLM::Worker_TP0, "
                              "12000 MiB)), above idle_threshold_mib 1024: memory held by no process, e.g. a driver teardown that "
                              "did not finish", True)]
    assert [p.waitable for p in kept(reading(16096, (5151, 12000)), settling=False)] == [False]


def test_keep_still_fails_for_a_survivor_a_zombie_a_stranger_and_a_reused_pid_beside_the_job():
    survivor = kept(reading(17000, (5151, 12000), (4343, 5000)), signalled=[4343])
    assert [p.text for p in survivor] == ["GPU 2: pid 4343 (python3, state running) holds 5000 MiB: still there after every signal"]
    zombie = kept(reading(17000, (5151, 12000), (4242, 5000)))
    assert len(zombie) == 1 and "pid 4242" in zombie[0].text and "zombie" in zombie[0].text
    foreign = kept(reading(32000, (5151, 12000), (777777, 20000)))
    assert len(foreign) == 1 and "pid 777777" in foreign[0].text and "PID namespace" in foreign[0].text
    reused = kept(reading(12000, (5151, 12000)), started=1005.0)  # the job exited and its PID went to a new process
    assert [p.text for p in reused] == ["GPU 2: pid 5151 (VLLM::Worker_TP0, state sleeping) holds 12000 MiB: not signalled: " + LIVE_WHY[5151]]


PID = 4242


HELD_MIB = 5000


STARTED = 1000.0


UNVERIFIABLE_WHY = "unverifiable: NVML's PIDs may not be this PID namespace's (test)"


COLLEAGUE_WHY = "belongs to live PID 3000 (python3 batch_infer.py), not to this server nor an orphan: someone else's job"


RESPAWN_WHY = "forked by PID 77 (supervisord) in the lineage of what this run ended, after the ladder began: a respawn; not ended"


def process(visible=True, state="running", name="VLLM::Worker_TP0", started=STARTED):
    if not visible:
        return {"visible": False, "name": None, "cmdline": None, "state": None, "create_time": None}
    return {"visible": True, "name": name, "cmdline": [name], "state": state, "create_time": started}


def is_excluded(info):
    return info["name"] == "nvidia-persistenced"


# class, process, ours (this run signals it), left alone (why), ignore_foreign,
# check mode: frees its memory?, check mode: a failure?, real run (holder still listed after): a problem?,
# [left alone on purpose (plan.py's on_purpose, started at STARTED), live_jobs: keep]
ROWS = [
    (verify.ENDED, process(), True, None, False, True, False, True),
    (verify.STUCK, process(state="zombie"), True, None, False, False, True, True),
    (verify.STUCK, process(state="zombie"), False, None, False, False, True, True),
    (verify.FOREIGN, process(visible=False), False, None, False, False, True, True),
    (verify.FOREIGN_IGNORED, process(visible=False), False, None, True, True, False, False),
    (verify.UNVERIFIABLE_HOLDER, process(), False, UNVERIFIABLE_WHY, False, False, True, True),
    (verify.EXCLUDED, process(name="nvidia-persistenced"), False, "a driver helper or GPU monitor (always excluded)", False, False, False, False),
    (verify.PROTECTED, process(), False, "protected: PID 1, this module or its ancestors (the Ansible connection)", False, False, True, True),
    (verify.PROTECTED, process(), False, "does not match `match`", False, False, True, True),
    (verify.UNACCOUNTED, process(), False, None, False, False, True, True),
    # left alone on purpose: a failure by default, accepted with live_jobs: keep
    (verify.KEPT, process(), False, COLLEAGUE_WHY, False, False, True, True, True, False),
    (verify.KEPT, process(), False, COLLEAGUE_WHY, False, False, False, False, True, True),
    (verify.KEPT, process(), False, "does not match `match`", False, False, False, False, True, True),
    # with live_jobs: keep, everything else still fails exactly as before
    (verify.STUCK, process(state="zombie"), False, "does not match `match`", False, False, True, True, True, True),
    (verify.PROTECTED, process(started=STARTED + 5), False, COLLEAGUE_WHY, False, False, True, True, True, True),  # its PID, reused
    (verify.PROTECTED, process(), False, RESPAWN_WHY, False, False, True, True, False, True),
    (verify.UNVERIFIABLE_HOLDER, process(), False, UNVERIFIABLE_WHY, False, False, True, True, True, True),
    (verify.FOREIGN, process(visible=False), False, COLLEAGUE_WHY, False, False, True, True, True, True),
    (verify.STUCK, process(state="zombie"), True, None, False, False, True, True, False, True),
    (verify.ENDED, process(), True, None, False, True, False, True, False, True),
    (verify.UNACCOUNTED, process(), False, None, False, False, True, True, False, True),
]


@pytest.fixture
def asked(monkeypatch):
    """Every class the classifier hands out, in order (both paths must ask it: they have no rules of their own)."""
    seen = []
    classify = verify.classify

    def recording(*args, **kwargs):
        seen.append(classify(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(verify, "classify", recording)
    return seen


def one_holder(used=THRESHOLD - 1):
    """One GPU with one holder; memory at most the threshold, so the GPU-level rule stays quiet and the holder's class speaks."""
    return Reading(0, "GPU-uuid", Memory(97887, used, 512, 97887 - 512 - used), [Holder(PID, HELD_MIB, "compute")], None)


def keeping(row):
    """(keep, on_purpose) of a row: the last two fields, when it has them."""
    on_purpose, keep = row[8:10] if len(row) > 8 else (False, False)
    return keep, {PID: STARTED} if on_purpose else {}


def check_mode(row, asked):
    _kind, info, ours, left_alone, ignore_foreign = row[:5]
    going = {PID: info["state"]} if ours else {}
    got = predict(one_holder(), THRESHOLD, going, {PID: left_alone} if left_alone else {},
                  lambda pid: info, is_excluded, ignore_foreign, *keeping(row))
    return asked.pop(), got


def real_run(row, asked):
    _kind, info, ours, left_alone, ignore_foreign = row[:5]
    signalled = {PID: ("still there after every signal", True)} if ours else {}
    got = judge(one_holder(), THRESHOLD, signalled, {PID: left_alone} if left_alone else {},
                lambda pid: info, is_excluded, ignore_foreign, True, *keeping(row))
    return asked.pop(), got


def test_every_class_has_a_row():
    assert {row[0] for row in ROWS} == set(verify.HOLDER_CLASSES)


@pytest.mark.parametrize("row", ROWS, ids=["%s-%d" % (row[0], i) for i, row in enumerate(ROWS)])
def test_check_mode_and_the_real_run_agree(row, asked):
    kind, _info, _ours, _left_alone, _ignore, frees, fails, problem = row[:8]
    predicted_kind, prediction = check_mode(row, asked)
    judged_kind, problems = real_run(row, asked)
    assert predicted_kind == judged_kind == kind
    assert asked == [], "each path asks the classifier once per holder"
    assert (prediction.remaining == []) is frees
    assert bool(prediction.failures) is fails, prediction.failures
    assert bool(problems) is problem, problems


def test_the_classifier_is_the_one_both_paths_use(monkeypatch):
    """Canary: a classifier that says "excluded" of everyone makes both paths keep the holder and blame no one."""
    monkeypatch.setattr(verify, "classify", lambda *args, **kwargs: verify.EXCLUDED)
    row = ROWS[-1]  # an unaccounted holder: a failure for both paths under the real classifier
    predicted = predict(one_holder(THRESHOLD - 1), THRESHOLD, {}, {}, lambda pid: row[1], is_excluded, False)
    judged = judge(one_holder(THRESHOLD - 1), THRESHOLD, {}, {}, lambda pid: row[1], is_excluded, False)
    assert predicted.failures == [] and judged == []


def test_memory_without_a_process_fails_both_paths():
    empty = Reading(0, "GPU-uuid", Memory(97887, THRESHOLD + 1, 512, 97887 - 512 - THRESHOLD - 1), [], None)
    predicted = predict(empty, THRESHOLD, {}, {}, lambda pid: process(), is_excluded, False)
    judged = judge(empty, THRESHOLD, {}, {}, lambda pid: process(), is_excluded, False, settling=False)
    assert len(predicted.failures) == 1 and "no process holding it" in predicted.failures[0]
    assert len(judged) == 1 and "no process holding it" in judged[0].text and judged[0].waitable is False


@pytest.mark.parametrize("beyond, fails", [(THRESHOLD, False), (THRESHOLD + 1, True)])
def test_memory_beyond_a_kept_job_fails_both_paths(beyond, fails):
    """live_jobs: keep. What the job left alone on purpose holds is its own; the rest of the GPU's memory is held by no process."""
    gpu = Reading(0, "GPU-uuid", Memory(97887, HELD_MIB + beyond, 512, 97887 - 512 - HELD_MIB - beyond), [Holder(PID, HELD_MIB, "compute")], None)
    predicted = predict(gpu, THRESHOLD, {}, {PID: COLLEAGUE_WHY}, lambda pid: process(), is_excluded, False, True, {PID: STARTED})
    judged = judge(gpu, THRESHOLD, {}, {PID: COLLEAGUE_WHY}, lambda pid: process(), is_excluded, False, False, True, {PID: STARTED})
    assert bool(predicted.failures) is fails and bool(judged) is fails
    if fails:
        for text in (predicted.failures[0], judged[0].text):
            assert "%d MiB of it beyond what the holders left alone hold (pid %d (VLLM::Worker_TP0" % (beyond, PID) in text
            assert text.endswith("memory held by no process, e.g. a driver teardown that did not finish"), text
        assert judged[0].waitable is False
