# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check mode (predict) and the real run (judge) class every GPU holder with the one classifier, and agree.

Each row is one holder of one GPU: what the process looks like, whether this run signals it, why the plan leaves it
alone, whether by a rule of this run (on purpose) and whether the caller accepts those (live_jobs: keep). Both paths
run over it; the class each path asked the classifier for must be the row's class, the same for both, and what each
path then says (freed / kept / a failure) must fit that class.
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import Holder, Memory
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim import verify
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.verify import Reading, judge, predict

THRESHOLD = 1024
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
