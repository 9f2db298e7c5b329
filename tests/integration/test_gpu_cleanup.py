# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/gpu_cleanup.yml on a host with a healthy TP=4 server on GPUs 0-3 and the orphans of a killed
server on GPUs 4-7. By default it ends the orphans only and names every live job it left alone; check mode shows
both lists and ends nothing; a bad gpu_cleanup_end_live_jobs ends nothing; gpu_cleanup_end_live_jobs=true ends
every holder. Judged by the simulator's holders and memory, PIDs with their start times and the server's /health."""

from __future__ import annotations

import re

from ansible_run import flat, recap, REPO, run_playbook
from gpusim.api import free_port, parent_pid, pid_alive, starttime, wait_for
from readings import health, holders

CLEANUP = REPO / "playbooks" / "gpu_cleanup.yml"
FAST = ("-e", "gpu_reclaim_timeout=10 gpu_reclaim_grace=2")
SERVER_MIB = 40000
ORPHAN_MIB = 93029


def summary(out, host):
    """The lines the summary task printed for `host` (YAML single-quoted items that start with its name), whitespace
    made one space."""
    section = re.search(r"TASK \[Summarise every host\](.*?)(?=TASK \[|PLAY RECAP|$)", flat(out))
    items = [item.replace("''", "'") for item in re.findall(r"'((?:[^']|'')*)'", section.group(1) if section else "")]
    return [item for item in items if item.startswith(host + ": ")]


def test_cleanup_ends_orphans_only_and_names_the_live_jobs_it_left(make_host, inventory, canaries):
    host = make_host()
    port = free_port()
    # the healthy server: an API server (answering /health) above an engine core and four workers, hanging from
    # the host's subreaper as a daemon does (a role-managed server hangs from init or systemd the same way)
    server = host.spawn_vllm(4, gpus=[0, 1, 2, 3], mib=SERVER_MIB, engine_core=True, port=port)
    assert wait_for(lambda: health(port) == 200, timeout=30), "the healthy server never answered /health"
    # the incident on 4-7: API server and one worker SIGKILLed, the other three workers left to the subreaper
    dead = host.spawn_vllm(4, gpus=[4, 5, 6, 7], mib=ORPHAN_MIB)
    killed = {entry["pid"] for entry in host.incident(dead["parent"])}
    assert dead["parent"] in killed and len(killed & set(dead["workers"])) == 1
    orphans = [w for w in dead["workers"] if w not in killed]
    freed = dead["gpus"][dead["workers"].index(next(iter(killed & set(dead["workers"]))))]
    assert wait_for(lambda: not pid_alive(dead["parent"])) and all(pid_alive(p) for p in orphans)
    # a colleague's job beside an orphan (a live batch_infer.py above its VLLM::Worker_TP0), and a training job on the
    # GPU the SIGKILLed worker freed, hanging from the subreaper itself as a service run by systemd does
    shared = 7 if freed != 7 else 6
    job = host.spawn_tree({"key": "batch", "title": "python3 batch_infer.py --input prompts.jsonl",
                           "children": [{"key": "worker", "title": "VLLM::Worker_TP0", "hold": [{"gpu": shared, "mib": 12000}]}]})
    train = canaries.hold(host, freed)
    assert parent_pid(job["worker"]) == job["batch"]
    live = {pid: starttime(pid) for pid in [server["parent"], server["engine_core"], *server["workers"], job["batch"], job["worker"], train]}
    doomed = {pid: starttime(pid) for pid in orphans}
    held = holders(host)
    assert [held[g] for g in range(4)] == [[w] for w in server["workers"]]
    assert held[freed] == [train] and held[shared] == [dead["workers"][dead["gpus"].index(shared)], job["worker"]], held
    clear = [g for g in range(4, 8) if g not in (freed, shared)]  # orphans only
    expected = [SERVER_MIB] * 4 + [ORPHAN_MIB] * 4
    expected[freed], expected[shared] = 2048, ORPHAN_MIB + 12000
    assert host.used_mib() == expected
    inv = inventory(host)
    left = {w: "VLLM::Worker_TP%d" % i for i, w in enumerate(server["workers"])}
    left.update({job["worker"]: "VLLM::Worker_TP0", train: "python3"})

    # check mode: both lists, nothing ended
    before = host.snapshot()
    check = run_playbook(CLEANUP, inv, "--check", "--diff", *FAST)
    assert check.returncode == 0, check.stdout[-4000:]
    assert host.snapshot() == before
    lines = summary(check.stdout, host.name)
    assert lines, check.stdout[-5000:]
    assert lines[0].startswith("%s: CHECK MODE: would end 3 process(es) holding %d MiB on GPU 0,1,2,3,4,5,6,7: " % (
        host.name, 3 * ORPHAN_MIB)), lines
    assert "would leave alone 6 live job(s)" in lines[0] and "FAIL" not in lines[0], lines
    for pid, name in left.items():
        assert any(line.startswith("%s: would leave alone PID %d (%s) on GPU " % (host.name, pid, name)) for line in lines), (pid, lines)
    assert "%s: would leave alone PID %d (VLLM::Worker_TP0) on GPU %d: " % (host.name, job["worker"], shared) in "\n".join(lines)

    # a bad value for the explicit variable: every host fails before anything is ended, naming it and the value
    bad = run_playbook(CLEANUP, inv, "-e", "gpu_cleanup_end_live_jobs=ture", *FAST)
    assert bad.returncode != 0 and host.snapshot() == before
    assert "gpu_cleanup_end_live_jobs must be true or false, not \"ture\"" in flat(bad.stdout), bad.stdout[-3000:]

    # the default run: the orphans are ended, every live job runs on, the server still answers, the host is OK
    run = run_playbook(CLEANUP, inv, *FAST)
    assert run.returncode == 0, run.stdout[-4000:]
    assert not [pid for pid, start in doomed.items() if pid_alive(pid, start)], "an orphan survived"
    assert not [pid for pid, start in live.items() if not pid_alive(pid, start)], "a live job was ended"
    assert health(port) == 200
    held = holders(host)
    assert [held[g] for g in range(4)] == [[w] for w in server["workers"]]
    assert held[freed] == [train] and held[shared] == [job["worker"]] and all(held[g] == [] for g in clear), held
    expected[shared] = 12000
    for gpu in clear:
        expected[gpu] = 0
    assert host.used_mib() == expected
    lines = summary(run.stdout, host.name)
    assert lines, run.stdout[-5000:]
    assert lines[0].startswith("%s: OK: %d MiB freed, 3 process(es) ended, GPU %s verified free in " % (
        host.name, 3 * ORPHAN_MIB, ",".join(map(str, clear)))), lines
    busy = sorted([0, 1, 2, 3, freed, shared])
    assert lines[0].endswith("; GPU %s kept by 6 live job(s) left alone" % ",".join(map(str, busy))), lines
    text = "\n".join(lines)
    for pid, name in left.items():
        assert "%s: left alone PID %d (%s) on GPU " % (host.name, pid, name) in text, (pid, text)
    for gpu, worker in enumerate(server["workers"]):
        assert "left alone PID %d (VLLM::Worker_TP%d) on GPU %d: PID %d VLLM::Worker_TP%d on GPU %d belongs to live PID %d (" % (
            worker, gpu, gpu, worker, gpu, gpu, server["parent"]) in text, text
    assert "left alone PID %d (VLLM::Worker_TP0) on GPU %d: PID %d VLLM::Worker_TP0 on GPU %d belongs to live PID %d (python3 batch_infer.py" % (
        job["worker"], shared, job["worker"], shared, job["batch"]) in text, text
    assert "left alone PID %d (python3) on GPU %d: not a subprocess of a server (gpu_cleanup_orphan_patterns)" % (train, freed) in text, text
    assert recap(run.stdout)[host.name]["failed"] == 0

    # the explicit variable ends the live jobs too
    everything = run_playbook(CLEANUP, inv, "-e", "gpu_cleanup_end_live_jobs=true", *FAST)
    assert everything.returncode == 0, everything.stdout[-4000:]
    assert not [pid for pid, start in live.items() if pid_alive(pid, start) and pid not in (job["batch"],)], "a holder survived"
    assert pid_alive(job["batch"], live[job["batch"]]), "batch_infer.py holds no GPU: it is not a holder's launcher"
    assert host.used_mib() == [0] * 8 and all(not pids for pids in holders(host).values())
    assert health(port) == -1
    lines = summary(everything.stdout, host.name)
    assert lines[0].startswith("%s: OK: " % host.name) and "GPU 0,1,2,3,4,5,6,7 verified free" in lines[0], lines
    assert not [line for line in lines if "left alone" in line], lines
    canaries.watched.pop(train)  # ended on purpose by the last run
    assert canaries.alive(), canaries.dead()


def test_cleanup_still_fails_for_what_it_cannot_free_beside_a_live_job(make_host, inventory, canaries):
    """The live jobs left alone never hide a GPU that is not free for another reason: memory held by no process fails
    the host, named, while the colleague's job on another GPU is named as left alone and runs on."""
    host = make_host()
    job = host.spawn_tree({"key": "batch", "title": "python3 batch_infer.py --input prompts.jsonl",
                           "children": [{"key": "worker", "title": "VLLM::Worker_TP0", "hold": [{"gpu": 0, "mib": 12000}]}]})
    canaries.watch("the colleague's VLLM::Worker_TP0", job["worker"])
    host.orphan(2, 4096)
    run = run_playbook(CLEANUP, inventory(host), *FAST)
    assert run.returncode != 0 and recap(run.stdout)[host.name]["failed"] == 1, run.stdout[-4000:]
    lines = summary(run.stdout, host.name)
    assert lines and lines[0].startswith("%s: FAILED: " % host.name), run.stdout[-4000:]
    assert "GPU 2: 4096 MiB used with no process holding it" in lines[0], lines[0]
    assert lines[1:] == ["%s: left alone PID %d (VLLM::Worker_TP0) on GPU 0: PID %d VLLM::Worker_TP0 on GPU 0 belongs to live PID %d "
                         "(python3 batch_infer.py --input prompts.jsonl), not to this server: not ended" % (
                             host.name, job["worker"], job["worker"], job["batch"])], lines
    assert host.holders(0) == [job["worker"]] and host.used_mib()[:3] == [12000, 0, 4096]
    assert canaries.alive(), canaries.dead()
