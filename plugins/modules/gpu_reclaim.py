#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_reclaim
short_description: Free NVIDIA GPUs by ending every process that holds them, then prove it with a fresh NVML reading
version_added: 0.1.0
description:
  - Reads every process holding memory on each selected GPU (NVML's compute, graphics and MPS client lists, all of them) and
    names it through psutil, including process titles such as C(VLLM::Worker_TP0) that vLLM writes over argv.
  - "With O(kill_tree=true), also ends each holder's launcher and every descendant of it, launchers first, so nothing respawns a
    worker. The launcher rule: climbing from the holder's parent, every process must match O(launcher_patterns) (for example
    C(VLLM::EngineCore), then the vLLM API server above it); the highest process of that unbroken chain is the launcher. An
    ordinary process in between (a shell, a job script), a cluster daemon (O(cluster_daemons): raylet, gcs_server, C(ray start),
    Ray's dashboard and agents, kubelet, containerd, slurmd), an excluded or a protected process stops the climb. Without a
    launcher the holder's own descendants are taken. So on a Ray node the GPU-holding actors (and a vLLM driver that holds a GPU)
    are ended, never the cluster."
  - "It watches the lineage of what it ends, during the ladder and after it, until the verification is over: a process started
    since its reading that is a child of a target or in a target's process group (a launcher that forks on SIGTERM), or a child
    of a live parent of a target that could respawn it (a supervisor, a wrapper script, a shell loop, a cluster daemon; not PID
    1, an adopter of O(subreapers) such as systemd, nor this module's own ancestors) is a respawn. A respawn is ended through the
    same ladder (role V(respawned)) when O(kill_tree) allows it for a target's child, or, for a parent's child, when it passes
    O(match) (as it is named at that moment), its parent is not a cluster daemon and, with O(orphans_only), it is in the
    O(owner)'s session. Any other is reported (RV(respawn_watch.candidates)) and the task fails naming it and its parent if it
    still runs 0.5 s after it was seen (it may exit, or exec a program that O(match) takes), or at once if it holds memory on a
    selected GPU; a cluster daemon's new child (a node's pool of idle workers) fails it only by holding memory."
  - "A target may also leave a process as it ends that no proven lineage leads to: a worker that on SIGTERM forks a daemon
    (a session of its own, or a second fork), whose parent is gone before it holds anything. Such a process, started since
    the reading, whose parent now is an adopter of the targets' orphans (PID 1 or an ancestor of a target) and which shares a
    target's cgroup (or the child of one), is watched too (RV(respawn_watch.candidates) with C(detached)). It is never
    signalled (with its parent gone nothing proves it is the tree's). With O(settle=auto) the GPUs must keep reading free
    until 0.5 s after it was first seen, while it runs. If it takes memory on a selected GPU, the task fails naming it and the
    target whose exit came nearest its start (most likely its forker). One still running that holds nothing after the
    window only adds a warning. A new process of another cgroup (a service that PID 1 starts meanwhile) is not watched."
  - Signals along O(signals), waiting up to O(grace) seconds per step for each process to exit, then verifies with fresh NVML
    readings (a method independent of the kill) until every selected GPU has no holder and at most O(idle_threshold_mib) in use
    for the settle window (see O(settle)), or O(timeout) runs out.
  - "How O(grace) and O(timeout) combine: O(timeout) bounds the whole task. Each step of the ladder waits at most O(grace), and at
    most its share of the time left (time left divided by the steps left), so a process that ignores the first signal still gets
    the last one before O(timeout); the verification then polls until O(timeout). The task ends by O(timeout) plus the settle
    window (O(settle), or 0.5 s with V(auto)), plus the time to send the signals and read the GPUs."
  - Fails loudly, naming what is left and why, with the evidence to act on (state, kernel wait channel, parent chain and user of
    each survivor, processes with C(/dev/nvidia*) open, recent NVIDIA Xid kernel log lines). Never a silent success.
  - "Never signals PID 1, itself, its ancestors (the Ansible connection), a process matching O(exclude), the driver's helpers
    (C(nvidia-persistenced), C(nv-hostengine), DCGM, C(nvidia-smi), by program) or a container runtime's own processes (podman,
    docker, conmon, runc, crun, containerd and its shims, dockerd, docker-proxy, crio, and the inits they put in containers:
    catatonit, podman-init, docker-init; by program), nor a process that is neither a holder on the selected GPUs nor inside a
    holder's tree (see the launcher rule above).
    Checks each process's start time right before every signal, so a reused PID is never hit."
  - "Never signals a process that runs in a container (docker, podman or Kubernetes, read from its cgroup, C(/proc/PID/cgroup),
    as M(gpuops.fleet.gpu_facts) reads it): the runtime owns it. A container's PID 1 ignores SIGTERM (it has no default signal
    actions), and once it is killed the runtime applies the container's restart policy. Every target of the run (a holder, its
    launcher, their trees) that runs in a container is set apart, by container, and O(containers) says what becomes of the
    container: V(refuse) (the default) fails the task before anything is signalled or stopped, naming each container (runtime,
    name or id, image) and the option to set; V(stop) stops it through its runtime, then verifies the GPUs as always. A
    Kubernetes container is always refused, naming its pod's UID: the kubelet owns it. A container this module itself runs in
    is none: its processes are the host's for the task."
author:
  - gpuops maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.nvml
attributes:
  check_mode:
    support: full
    description: Signals nothing; returns RV(would_kill), and RV(changed) tells whether a real run would signal a process.
  diff_mode:
    support: full
    description: Shows each selected GPU's used memory and holders before and after.
options:
  match:
    description:
      - Regular expressions (Python syntax, searched) on a holder's name and on its command line; only holders that match one are ended.
      - Omit it to end every holder. A holder that does not match stays, and the task fails naming it, because its GPU is not free.
    type: list
    elements: str
  exclude:
    description:
      - Regular expressions (searched) on a process's name and command line; a matching process is never signalled, neither as a
        holder nor inside a launcher's tree. Its GPU still counts as free only if it uses at most O(idle_threshold_mib);
        above it the task fails naming the excluded holder.
      - "The driver's helpers are always excluded, in addition to these, by program only (the process name or the base name of
        its first command-line word, never its arguments): C(nvidia-persistenced), C(nv-hostengine), C(nvidia-smi),
        C(nvidia-cuda-mps-*) and C(dcgm*)."
      - An empty pattern is refused (it would match every process).
    type: list
    elements: str
    default: []
  kill_tree:
    description:
      - Also end each holder's launcher and all of its descendants (so a launcher cannot respawn workers or keep the port).
      - A launcher's tree is taken only when every GPU holder in it is one this task ends; otherwise only the holder is ended, with a warning.
    type: bool
    default: true
  launcher_patterns:
    description:
      - Regular expressions that recognise an inference launcher among a holder's ancestors (name or command line), anchored at
        the program so that a wrapper that merely mentions a server (C(bash -c ...), C(tmux), C(sudo)) is not one.
      - The default covers the vLLM API server and C(vllm serve), vLLM's C(VLLM::*) processes, torchrun, SGLang, TGI and Triton.
        Ray's processes are not launchers, they run a cluster (see O(cluster_daemons)).
    type: list
    elements: str
    default:
      - '^(\S*/)?python[0-9.]*(\s+-\S+)*\s+-m\s+vllm\.entrypoints\.'
      - '^((\S*/)?python[0-9.]*\s+)?(\S*/)?vllm\s+serve\b'
      - '^VLLM::'
      - '^((\S*/)?python[0-9.]*\s+)?(\S*/)?torchrun\b|^(\S*/)?python[0-9.]*(\s+-\S+)*\s+-m\s+torch\.distributed\.(run|launch)\b'
      - '^(\S*/)?python[0-9.]*(\s+-\S+)*\s+-m\s+sglang\.launch_server\b|^((\S*/)?python[0-9.]*\s+)?(\S*/)?sglang\s+serve\b'
      - '^(\S*/)?text-generation-(launcher|server)\b'
      - '^(\S*/)?tritonserver\b'
  cluster_daemons:
    description:
      - Regular expressions (name or command line) for processes that run a cluster rather than one job. Such a process is never
        a launcher and stops the climb from a holder, so reclaiming a Ray actor's GPU never ends raylet, gcs_server, C(ray start),
        the dashboard or the agents (nor kubelet, containerd, dockerd, slurmd or slurmstepd). A holder that is one is ended alone.
    type: list
    elements: str
    default:
      - '^(\S*/)?(raylet|gcs_server)\b'
      - '^((\S*/)?python[0-9.]*\s+)?(\S*/)?ray\s+start\b'
      - '^((\S*/)?python[0-9.]*(\s+-\S+)*\s+)?\S*/ray/(dashboard|_private|autoscaler)/'
      - '^ray::(JobSupervisor|ServeController|ProxyActor|IDLE)\b'
      - '^(\S*/)?(kubelet|containerd|containerd-shim\S*|dockerd|slurmd|slurmstepd)\b'


  signals:
    description:
      - The escalation ladder, by name (V(TERM), V(SIGTERM)) or number. Each step signals every process still running,
        then waits up to O(grace) seconds (less when O(timeout) is near, see above).
      - "Only signals that end a process by default are accepted: V(TERM), V(INT), V(HUP), V(QUIT), V(KILL), V(USR1), V(USR2),
        V(ABRT), V(ALRM). V(STOP), V(TSTP), V(TTIN), V(TTOU) (they freeze a process with its memory held), V(CONT), V(CHLD),
        V(URG), V(WINCH) and the like are refused before anything is touched."
    type: list
    elements: str
    default: [TERM, KILL]
  grace:
    description:
      - Seconds to wait after each step of O(signals) for the processes to exit; a process that exits early holds up nothing.
      - More than 0, at most 600.
    type: float
    default: 10.0
  timeout:
    description:
      - Budget in seconds for the whole task, counted from its start; the ladder's waits are cut to fit in it (see above).
      - The verification waits only while something may still change (a signalled process still listed, memory held by no process).
      - More than 0, at most 3600.
    type: float
    default: 60.0
  settle:
    description:
      - How long the selected GPUs must keep reading free before they count as verified, so that a holder that respawns is seen.
      - V(auto) (the default) waits only while something could still respawn a holder. When every target's parent is a target,
        PID 1, an adopter (O(subreapers)) or this module's ancestor, and no process of the lineage is left, the first free
        reading is the verification (no fixed wait). When a parent that could respawn one is alive (see the lineage above),
        the GPUs must keep reading free until 0.5 s after the last change in the lineage (the end of the ladder, or the last
        respawn seen or ended); a respawn shows as a new process long before it holds GPU memory. The same holds for 0.5 s
        after a process the ended tree left as it ended (a daemon, see the description) was first seen, while it runs.
      - "A number of seconds (from 0 to 60) is a fixed window on every run, whatever the lineage: the GPUs must read free for
        that long (the lineage is still watched meanwhile). Use it for a respawn that comes later than 0.5 s after its
        predecessor exits (a supervisor's restart delay, C(RestartSec=) of a systemd unit, whose restart comes from PID 1).
        V(0) takes one reading."
      - Anything else (a negative number, more than 60, a word other than V(auto)) fails before anything is read or signalled.
    type: raw
    default: auto
  idle_threshold_mib:
    description:
      - A GPU counts as free when no holder is left and it uses at most this many MiB (an idle GPU does not read zero).
      - From 0 to 1048576.
      - The collection's one name for the idle threshold (the playbooks' C(gpuops_fleet_idle_threshold_mib)). The alias
        O(idle_threshold_mib) is deprecated and will be removed in 0.3.0.
    aliases:
      - memory_threshold_mib
    type: int
    default: 1024
    version_added: 0.3.0
  ignore_foreign:
    description:
      - Do not fail for PIDs that NVML lists but this PID namespace cannot see (processes of a container, when this task does not
        run in the host PID namespace); their memory is then not counted. They are never signalled either way.
    type: bool
    default: false
  owner:
    description:
      - The server whose leftovers this run frees; it matters with O(orphans_only) only (without it, every holder that passes
        O(match) is taken anyway). A holder is the owner's when it is the owner or descends from it, or when it is a member of
        the owner's session and the owner leads that session (a server started in a session of its own, as
        M(gpuops.fleet.vllm_process) and systemd start it). When the owner is gone (it was just stopped), members
        of its session started after O(owner.create_time) are still its; its other leftovers are orphans by the rule of
        O(orphans_only).
      - An owner that does not run (or whose start time differs, a reused PID) owns nothing alive.
    type: dict
    suboptions:
      pid:
        description:
          - The owner's PID (for a vLLM server, its API server), above 1.
        type: int
        required: true
      create_time:
        description:
          - The owner's start time (seconds since the epoch, as psutil's C(create_time) gives it), so that a reused PID is
            never taken for the owner. Without it, the process that has O(owner.pid) now is the owner.
        type: float
  orphans_only:
    description:
      - "Take a holder (one that passes O(match) and O(exclude)) only when it is the O(owner)'s or an orphan; any other is someone
        else's job: it is never signalled, its GPU is not free (check mode puts it in RV(would_fail); see O(live_jobs) to accept
        it), and RV(foreign) names it."
      - "The rule. Climbing from the holder's parent through launcher-shaped processes (as for the launcher rule of O(kill_tree)),
        the top of that chain (the holder itself when its parent is not launcher-shaped) hangs from a parent process. The holder
        is an orphan when that parent is PID 1 or gone (its launcher died and the kernel gave it to init), when the parent
        matches O(subreapers) (a service manager that adopts orphans, such as C(systemd --user)), or when the top was adopted:
        it is in a session that is not its parent's and does not lead it (a process keeps the session it was started in until it
        starts its own, so a parent in another session, which leads no session itself, did not start it). So the workers of a
        SIGKILLed API server are orphans, and so is a vLLM server started by hand and left to init; a C(VLLM::Worker_TP0) whose
        parent is a live C(python3 batch_infer.py), a vLLM server below a live shell or wrapper script, or a Ray actor below
        raylet, is someone else's."
      - "A headless rank of a server across hosts (C(--headless), joined to its head by C(--master-addr) or
        C(--data-parallel-address)) keeps its workers when its head is gone and retries for ever. When the top of the chain, or
        the parent it hangs from, is such a rank and neither it nor a descendant holds a TCP connection to the head's address
        any more, the holder is an orphan; while one does (a live server's rank), or when its connections cannot be read, it is
        not."
      - Linux has no way to read whether a process is a subreaper (C(PR_SET_CHILD_SUBREAPER)), hence O(subreapers). Process groups
        are not used as evidence (a job-control shell puts the members of a pipeline in one group).
    type: bool
    default: false
  subreapers:
    description:
      - Regular expressions (name or command line) for processes that adopt orphans (init systems, container inits, service
        managers run as subreapers). A launcher chain that hangs from one is an orphan's (see O(orphans_only)).
      - The default covers systemd (also C(systemd --user)) and init, tini, dumb-init, docker-init, catatonit (also as
        C(podman-init), the name C(podman run --init) gives it), and the simulated GPU host's reaper (C(python3 -m gpusim.reaper),
        which stands for systemd there).
    type: list
    elements: str
    default:
      - '^(\S*/)?(systemd|init)(\s|$)'
      - '^(\S*/)?(tini|tini-static|dumb-init|docker-init|catatonit|podman-init)(\s|$)'
      - '^(\S*/)?python[0-9.]*(\s+-\S+)*\s+-m\s+gpusim\.reaper(\s|$)'
  live_jobs:
    description:
      - "What a selected GPU that stays busy only because of holders this run left alone on purpose does to the task. Such a
        holder is one that a rule of this run leaves alone: someone else's job under O(orphans_only), one that O(match) does
        not take or O(exclude) takes (a driver helper included), a protected process (PID 1, this module, its ancestors), one
        that also holds a GPU outside O(gpus). Each is listed in RV(left_alone) with the rule and why, and in
        RV(gpus[].left_alone) of each GPU it keeps busy, whatever this option says."
      - V(fail) (the default) fails the task naming each of them (excluded holders only above O(idle_threshold_mib)).
      - "V(keep) accepts them: such a GPU does not fail the task, and check mode does not count them in RV(would_fail). What
        they hold is theirs; the GPU still fails when its memory beyond theirs (held by no process, or by an excluded
        process that came during the run) is above O(idle_threshold_mib). Anything else still fails the task as with
        V(fail): a survivor, a zombie (left alone or not), memory held by no process, a respawn or a process the ended tree
        left, a PID of another PID namespace or one that cannot be verified (see the notes), a holder whose owner cannot be
        told, a holder that appeared during the run, a lost GPU, a target that did not free its GPU. A holder is accepted
        only while it is the process the run read first (the same start time)."
    type: str
    choices: [fail, keep]
    default: fail
  containers:
    description:
      - "What becomes of a container (docker or podman) that runs a target of this run: a holder that O(match), O(exclude),
        O(orphans_only) and the other rules let it end, its launcher or their trees. Its processes are never signalled,
        whatever this says (see the description)."
      - "V(refuse) (the default, the safe one for a fleet-wide cleanup): the task fails before it signals or stops anything,
        naming each such container (runtime, name or id, image, the GPUs and PIDs) in RV(containers_refused) and its message.
        Check mode puts it in RV(would_fail) and RV(containers_refused)."
      - "V(stop): each such container is stopped through its runtime's command line, found as the module finds commands
        (the PATH, and C(/sbin), C(/usr/sbin), C(/usr/local/sbin)): C(docker stop -t N ID) or C(podman stop -t N ID), all the
        containers of one runtime in one command. The runtime sends the container's stop signal (SIGTERM unless its image
        says otherwise) and SIGKILL after N seconds: O(grace), at most the time O(timeout) has left, rounded up to whole
        seconds; the command itself is given up to 30 s more. Then the GPUs are verified as always, and each container is
        read again (C(inspect)): one that runs again (its runtime started it) fails the task. A stop does not trigger a
        container's restart policy (C(always), C(unless-stopped), C(on-failure)), but the runtime may still start it again
        later (see O(container_restart)); RV(containers_stopped) names each container and says so."
      - "A container is refused even with V(stop) when its runtime's command is not installed, or does not know the container
        (rootless podman's containers are known only to their user's podman), and a Kubernetes container is always refused
        (its pod's UID named): the kubelet owns it and would start it again."
    type: str
    choices: [refuse, stop]
    default: refuse
  container_restart:
    description:
      - What becomes of the restart policy (C(HostConfig.RestartPolicy.Name) of C(inspect)) of a container that O(containers=stop)
        stopped.
      - "V(keep) (the default) leaves it. A runtime may then start the container again by itself, and it takes its GPUs back:
        docker starts a container whose policy is C(always) whenever dockerd starts (a daemon restart, a reboot), while
        C(unless-stopped) and C(on-failure) keep a stopped container stopped; podman's C(podman-restart.service), where it is
        enabled, starts the containers whose policy is C(always) at boot (podman documents C(unless-stopped) as identical to
        C(always)). Each such container is named in a warning and in RV(containers_stopped[].starts_again)."
      - "V(disable) sets it to C(no) once the container is stopped (C(docker update --restart=no ID), C(podman update
        --restart=no ID)) and reads it again; a failure fails the task. Only with O(containers=stop). podman's C(update) takes
        C(--restart) only in versions that added it (podman 4.3 has none): there a container to stop whose policy is not C(no)
        is refused before anything is stopped, naming this option."
    type: str
    choices: [keep, disable]
    default: keep
  managed_containers:
    description:
      - "Ids (or their first 12 or more hex digits) of the containers that the caller stops itself before the real run, such as
        the role C(gpuops.fleet.vllm_server)'s own container in its container launch mode. In check mode their processes count
        as ended by that stop (a preflight), neither refused nor named in RV(containers_refused); a real run treats them as any
        other container (see O(containers))."
    type: list
    elements: str
    default: []
  secured:
    description:
      - A reading beside the reclaim, for the role C(gpuops.fleet.vllm_server)'s preflight. The process that listens on
        O(secured.port) (the kernel's socket table), whoever started it, is compared with a new configuration given by names only,
        so that no secret value is passed or shown. It requires an API key when its command line has a value after
        C(--api-key) (or C(--api-key=K)), else when C(VLLM_API_KEY) in its environment (C(/proc/PID/environ)) is not empty.
      - On a container's published port the process that listens is the runtime's (podman's C(conmon), C(docker-proxy)),
        which has neither the server's command line nor its environment; the process that serves in that container (asked
        of its runtime, picked as the role's takeover picks it) is read instead. When the runtime does not name the
        container or cannot be asked, RV(secured.error) says so.
      - RV(secured.opens) says whether the new configuration requires no key where the running server does; every secret
        variable (a word of its name is KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL... or it is in O(secured.secret_env)) that the
        running server has with a value and the new configuration lacks is in RV(secured.dropped_secret_env) and a warning,
        never by value. It changes nothing, and does not change what the reclaim does.
    type: dict
    suboptions:
      port:
        description: The TCP port the server listens on (any address).
        type: int
        required: true
      api_key_arg:
        description: Whether the new configuration's command line has a value after C(--api-key) (or C(--api-key=K)).
        type: bool
        default: false
      env_names:
        description: The names of the new configuration's environment that have a non-empty value (names only, never values).
        type: list
        elements: str
        default: []
      inherit_env:
        description:
          - Whether the new server also inherits the environment this task runs with (a detached process does, a systemd unit does
            not); its variables with a value then count as the new configuration's too.
        type: bool
        default: false
      secret_env:
        description: More names of variables whose values are secrets, beyond those recognised by their name.
        type: list
        elements: str
        default: []
notes:
  - "PIDs that NVML lists are not trusted when this task runs in a nested PID namespace (a container: C(/proc/self/ns/pid) is
    not the kernel's initial PID namespace, or C(NSpid) in C(/proc/self/status) has more than one entry) or when NVML lists a
    PID that this namespace does not have: NVML may then report the machine's PIDs, and such a number can belong to an unrelated
    local process. A holder is then signalled only when the local process with its PID has an NVIDIA device file open
    (C(/dev/nvidia*), or C($GPUOPS_NVIDIA_DEVICE_DIR/nvidia*)); otherwise it is left alone and the task fails naming the PID as
    unverifiable (check mode puts it in RV(would_fail)), whatever O(ignore_foreign) says. M(gpuops.fleet.gpu_facts) applies the
    same rule."
  - The evidence's C(device_holders) lists the processes with C(/dev/nvidia*) open. The environment variable
    C(GPUOPS_NVIDIA_DEVICE_DIR) makes it look in another directory instead (the simulated GPU host keeps its device files there).
seealso:
  - module: gpuops.fleet.gpu_facts
"""

EXAMPLES = r"""
- name: Free every GPU of the host and prove it
  gpuops.fleet.gpu_reclaim:

- name: Free GPUs 0-3 only (the other server on 4-7 keeps running)
  gpuops.fleet.gpu_reclaim:
    gpus: [0, 1, 2, 3]

- name: End only vLLM processes, with a short ladder
  gpuops.fleet.gpu_reclaim:
    match: ['^VLLM::', 'vllm']
    signals: [INT, TERM, KILL]
    grace: 5
    timeout: 30
  register: reclaim

- name: Free a server's GPUs from its own leftovers and orphans, never from a colleague's job
  gpuops.fleet.gpu_reclaim:
    gpus: [0, 1, 2, 3, 4, 5, 6, 7]
    match: ['^VLLM::', 'vllm\.entrypoints\.', '(^|/)vllm\s+serve(\s|$)']
    owner:
      pid: "{{ server.pid }}"
      create_time: "{{ server.create_time }}"
    orphans_only: true
  check_mode: true
  register: preflight

- name: End the orphans of vLLM servers on every GPU, leave every live job alone, and fail only for what could not be freed
  gpuops.fleet.gpu_reclaim:
    match: ['^VLLM::']
    launcher_patterns: ['^VLLM::']
    orphans_only: true
    live_jobs: keep
  register: cleanup

- name: Name the holders left alone and the GPUs they keep busy
  ansible.builtin.debug:
    msg: "{{ cleanup.left_alone | map(attribute='pid') | list }} keep GPU {{ cleanup.gpus | selectattr('left_alone') | map(attribute='index') | list }}"

- name: Name the jobs of others that hold these GPUs
  ansible.builtin.debug:
    msg: "{{ preflight.foreign | map(attribute='reason') | list }}"

- name: Show what was ended
  ansible.builtin.debug:
    msg: "{{ reclaim.killed | map(attribute='name') | list }} in {{ reclaim.elapsed_s }} s"

- name: Free GPU 0 from a vLLM server that runs in a container, by stopping the container through its runtime for good
  gpuops.fleet.gpu_reclaim:
    gpus: [0]
    containers: stop
    container_restart: disable
  register: stopped

- name: Name the containers stopped
  ansible.builtin.debug:
    msg: "{{ stopped.containers_stopped | map(attribute='name') | list }}"
"""

RETURN = r"""
changed:
  description:
    - V(true) if and only if a process was signalled or a container stopped (in check mode, if one would be; never when a
      container refuses the run).
  returned: always
  type: bool
verified:
  description:
    - V(true) when a fresh NVML reading, through an NVML session opened for it (see RV(reading_after)), showed every
      selected GPU free (with O(live_jobs=keep), or busy only with the holders of RV(left_alone)); V(null) in check mode.
  returned: always
  type: bool
  sample: true
killed:
  description:
    - Every target that is gone at the end, launchers first, whether a signal of this run ended it or it exited when its
      launcher or tree was signalled (then RV(killed[].signal) is V(null) and RV(killed[].ended) says so).
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID.
      type: int
      returned: always
      sample: 4242
    name:
      description: Its name (the process title where one is set).
      type: str
      returned: always
      sample: VLLM::Worker_TP0
    cmdline:
      description: Its command line words (secret arguments masked).
      type: list
      elements: str
      returned: always
      sample: [VLLM::Worker_TP0]
    username:
      description: Its owner.
      type: str
      returned: always
      sample: vllm
    role:
      description:
        - V(launcher), V(holder) (of GPU memory), V(descendant) (of a launcher or holder) or V(respawned) (a respawn found in the
          lineage during the run, forked by a target or by a live parent of one).
      type: str
      returned: always
      sample: holder
    gpus:
      description: Indices of the selected GPUs it held.
      type: list
      elements: int
      returned: always
      sample: [0]
    signal:
      description: The signal that ended it (the last one sent to it before it exited); V(null) when it got none.
      type: str
      returned: always
      sample: SIGTERM
    seconds_to_exit:
      description: Seconds from the first signal of the task to its exit.
      type: float
      returned: always
      sample: 0.04
    ended:
      description:
        - V(exited), V(zombie) (exited but not yet reaped by its parent), V(exited after its launcher was signalled),
          V(exited after the first signal of the task) (a launcher), or V(exited before any signal was sent) (during the reading).
      type: str
      returned: always
      sample: exited
would_kill:
  description:
    - Check mode only; the processes a real run would signal, launchers first (the keys of RV(killed) without the outcome).
      A process that runs in a container is never one of them (see RV(would_stop_containers)). When a container refuses the
      run (RV(containers_refused)), a real run signals none of them.
  returned: check mode
  type: list
  elements: dict
would_stop_containers:
  description:
    - Check mode only, with O(containers=stop); the containers a real run would stop through their runtime, each with the keys
      of RV(containers_refused) but C(reason). Empty when a container refuses the run.
  returned: check mode
  type: list
  elements: dict
  sample: [{"runtime": "podman", "id": "8fd36c8d5a99a28559a9895fbc7c0a2ca572739d43944a7c65ee78fd43248c78", "name": "vllm-llama",
            "image": "localhost/vllm:0.11", "gpus": [0], "pids": [7153], "restart_policy": "always"}]
containers_refused:
  description:
    - "The containers that refused the run (in check mode, that would): the task failed before it signalled or stopped anything
      (see O(containers)). Empty otherwise."
  returned: always
  type: list
  elements: dict
  contains:
    runtime:
      description: V(docker), V(podman) or V(kubernetes).
      type: str
      returned: always
      sample: podman
    id:
      description: The container's full id.
      type: str
      returned: always
    name:
      description: Its name, as its runtime's C(inspect) gives it; V(null) when unknown (and for Kubernetes).
      type: str
      returned: always
      sample: vllm-llama
    image:
      description: Its image, as its runtime names it; V(null) when unknown.
      type: str
      returned: always
      sample: docker.io/vllm/vllm-openai:v0.11.0
    pod_uid:
      description: Kubernetes only; the UID of the container's pod.
      type: str
      returned: when runtime is kubernetes
    gpus:
      description: The selected GPUs its processes hold.
      type: list
      elements: int
      returned: always
      sample: [0]
    pids:
      description: Its processes that the run would have ended (host PIDs), holders first.
      type: list
      elements: int
      returned: always
      sample: [7153]
    restart_policy:
      description: Its restart policy (V(no), V(always), V(unless-stopped), V(on-failure)); V(null) when unknown.
      type: str
      returned: always
      sample: always
    reason:
      description: Why it refuses the run, and what to do, in words.
      type: str
      returned: always
containers_stopped:
  description:
    - With O(containers=stop), the containers the run stopped through their runtime, each with the keys of
      RV(containers_refused) but C(reason), and the outcome. Their processes are never in RV(killed). Empty otherwise.
  returned: when not in check mode
  type: list
  elements: dict
  contains:
    stopped:
      description: The container no longer runs after its stop (C(inspect) says so), and it was not started again.
      type: bool
      returned: always
      sample: true
    running_after:
      description: Whether it runs at the end (C(inspect)); V(null) when its runtime could not say.
      type: bool
      returned: always
      sample: false
    seconds_to_stop:
      description: Seconds the runtime's stop command took.
      type: float
      returned: always
      sample: 1.2
    error:
      description: Why the stop failed (the command's exit status and last line), else V(null).
      type: str
      returned: always
    restart_policy_after:
      description: Its restart policy at the end (V(no) once O(container_restart=disable) set it).
      type: str
      returned: always
      sample: "no"
    restart_policy_error:
      description: Why its restart policy could not be set to V(no), else V(null).
      type: str
      returned: always
    starts_again:
      description:
        - When its runtime may start it again by itself, given its restart policy at the end (see O(container_restart)); V(null)
          when it does not.
      type: str
      returned: always
      sample: "dockerd starts it again when it starts (a daemon restart, a reboot): its restart policy is always"
would_fail:
  description:
    - Check mode only; what a real run could not fix and would fail on (a holder left alone by O(match), O(exclude) or protection,
      a zombie holder, a PID of another PID namespace, memory held by no process, also next to a holder, a lost GPU, a holder
      in a container that refuses the run).
      Each is also given as a warning. With O(live_jobs=keep) the holders of RV(left_alone) are not in it.
  returned: check mode
  type: list
  elements: str
foreign:
  description:
    - With O(orphans_only), the holders left alone as someone else's job (neither the O(owner)'s nor orphans); empty otherwise.
      A real run does not signal them, so their GPUs are not free and the task fails naming them.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID.
      type: int
      returned: always
      sample: 1234
    name:
      description: Its name (the process title where one is set).
      type: str
      returned: always
      sample: VLLM::Worker_TP0
    cmdline:
      description: Its command line words (secret arguments masked).
      type: list
      elements: str
      returned: always
    username:
      description: Its owner.
      type: str
      returned: always
    gpus:
      description: The selected GPUs it holds.
      type: list
      elements: int
      returned: always
      sample: [3]
    launcher:
      description: The top of its launcher chain when that is not the holder itself (for example the C(VLLM::EngineCore) above a worker), else V(null).
      type: int
      returned: always
    parent:
      description: The live process its launcher chain hangs from, with C(pid), C(name), C(cmdline) and C(username).
      type: dict
      returned: always
      sample: {pid: 1200, name: python3, cmdline: [python3, batch_infer.py], username: alice}
    container:
      description:
        - The container it runs in, as RV(gpuops.fleet.gpu_facts#module:ansible_facts.gpus[].processes[].container) gives
          it (C(runtime), C(id), C(name), C(image); C(pod_uid) for Kubernetes); V(null) when it runs in none.
      type: dict
      returned: always
    reason:
      description: One line that names it (and its container) and what it belongs to.
      type: str
      returned: always
      sample: "PID 1234 VLLM::Worker_TP0 on GPU 3 belongs to live PID 1200 (python3 batch_infer.py), not to this server: not ended"
left_alone:
  description:
    - The holders of the selected GPUs that this run left alone on purpose (see O(live_jobs)), as its first reading found
      them, that still hold one at the end (in check mode, those a real run would leave), whatever O(live_jobs) says. A holder left alone for another
      reason (a PID that cannot be verified, a respawn) is never here, it fails the task.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID.
      type: int
      returned: always
      sample: 1234
    name:
      description: Its name (the process title where one is set).
      type: str
      returned: always
      sample: VLLM::Worker_TP0
    cmdline:
      description: Its command line words (secret arguments masked).
      type: list
      elements: str
      returned: always
    username:
      description: Its owner.
      type: str
      returned: always
    gpus:
      description: The selected GPUs it holds (it keeps each busy).
      type: list
      elements: int
      returned: always
      sample: [3]
    used_memory_mib:
      description: The MiB it holds on those GPUs together; V(null) when NVML does not give a share.
      type: int
      returned: always
      sample: 12000
    rule:
      description:
        - The option whose rule left it alone. V(orphans_only) (someone else's job, see RV(foreign)), V(match) (O(match) does
          not take it), V(exclude) (O(exclude) or the driver's helpers), V(protected) (PID 1, this module or its ancestors) or
          V(gpus) (it also holds a GPU outside O(gpus)).
      type: str
      returned: always
      sample: orphans_only
    why:
      description: Why, in words.
      type: str
      returned: always
      sample: "belongs to live PID 1200 (python3 batch_infer.py), not to this server nor an orphan: someone else's job"
survivors:
  description:
    - Signalled processes still running after the last step of the ladder, and zombies that NVML still lists
      (they exited but their memory was not released).
    - Each with the keys of RV(killed) but its outcome (C(pid), C(name), C(cmdline), C(username), C(role), C(gpus)), and these.
  returned: when not in check mode
  type: list
  elements: dict
  contains:
    signal:
      description: The last signal sent to it.
      type: str
      returned: always
    state:
      description: Its state in the last reading (psutil status, for example V(zombie) or V(disk-sleep)); V(null) if it is gone.
      type: str
      returned: always
    error:
      description: Why a signal could not be sent (for example permission denied), else V(null).
      type: str
      returned: always
gpus:
  description: Each selected GPU before and after.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: GPU index.
      type: int
      returned: always
      sample: 0
    uuid:
      description: GPU UUID.
      type: str
      returned: always
    memory_used_mib_before:
      description: Used MiB before anything was signalled.
      type: int
      returned: always
      sample: 93029
    memory_used_mib_after:
      description: Used MiB in the last reading (V(null) in check mode).
      type: int
      returned: always
      sample: 0
    freed_mib:
      description: MiB that came back.
      type: int
      returned: always
      sample: 93029
    processes_before:
      description: Holders before anything was signalled, each with C(pid), C(name) and C(used_memory_mib).
      type: list
      elements: dict
      returned: always
    processes_left:
      description: Holders in the last reading, each with C(pid), C(name), C(state), C(visible) and C(used_memory_mib).
      type: list
      elements: dict
      returned: when not in check mode
    predicted_memory_used_mib_after:
      description: Check mode only; the MiB a real run would leave (V(null) when a holder's share is not available).
      type: int
      returned: check mode
    processes_would_remain:
      description: Check mode only; the holders a real run would leave, each with C(pid), C(name) and C(used_memory_mib).
      type: list
      elements: dict
      returned: check mode
    problems:
      description: Why this GPU is not free; empty when verified.
      type: list
      elements: str
      returned: when not in check mode
    verified:
      description: This GPU was read free (with O(live_jobs=keep), or busy only with holders of RV(gpus[].left_alone)).
      type: bool
      returned: when not in check mode
    left_alone:
      description: The PIDs of the holders of RV(left_alone) that hold this GPU at the end (check mode, would); they keep it busy.
      type: list
      elements: int
      returned: always
    error:
      description: V(null), or why the GPU could not be read (for example a lost GPU).
      type: str
      returned: always
respawn_watch:
  description:
    - The lineage watched for respawns (see the description); ended respawns are in RV(killed) with role V(respawned).
  returned: when not in check mode
  type: dict
  contains:
    settle:
      description: The O(settle) of this run, V(auto) or the fixed window in seconds.
      type: raw
      returned: always
      sample: auto
    parents:
      description:
        - The live parents of targets that could respawn one, as the run found them before signalling, each with C(pid),
          C(name), C(cmdline) and C(alive) (still running at the end). Empty when nothing could respawn a holder.
      type: list
      elements: dict
      returned: always
    candidates:
      description:
        - Processes of the lineage started during the run that it did not end, each with C(pid), C(name), C(cmdline),
          C(parent) (PID, when first seen), C(running) (at the end), C(reason), C(forked_by) and C(detached).
        - "C(detached) is V(true) for a process the ended tree left as it ended, out of every proven lineage (see the
          description; listed while it runs). Its C(forked_by) is the target (or live parent of one) it came from: proven
          through its parents, else the target of its cgroup whose exit came nearest its start (V(null) when unknown)."
        - For the others, C(forked_by) is their parent.
      type: list
      elements: dict
      returned: always
    waited_s:
      description: Seconds the GPUs read free before they counted as verified (0 when the first free reading was enough).
      type: float
      returned: always
      sample: 0.0
reading_after:
  description:
    - Where the readings that verify (each GPU's RV(gpus[].memory_used_mib_after) and RV(gpus[].processes_left), and so
      RV(verified)) came from. Once the signals are sent, the module shuts down the NVML session that read, planned and
      watched the ladder (NVML counts its initialisations; nothing else in the module's process opens it, so the count
      is back to zero) and opens a new one with new device handles; every verification reading goes through it, and
      its first reads each GPU's UUID again (a GPU whose UUID differs from the first reading's is not free).
  returned: when not in check mode
  type: dict
  contains:
    fresh_session:
      description: V(true) when the after readings came from that new NVML session.
      type: bool
      returned: always
      sample: true
    session_opened_s:
      description: Seconds into the run when the new session was opened; V(null) when none could be (then the run fails).
      type: float
      returned: always
      sample: 0.42
elapsed_s:
  description: Seconds the task took, from the first reading to verified (or given up).
  returned: always
  type: float
  sample: 0.31
evidence:
  description: On failure, what an operator needs to act without logging in.
  returned: when the GPUs were not freed
  type: dict
  contains:
    survivors:
      description:
        - For each process left, its state, kernel wait channel (C(wchan)), user, parent chain and C(container) (runtime, id,
          name, image; V(null) outside one). When a container refused the run, its processes.
      type: list
      elements: dict
      returned: always
    device_holders:
      description: Processes of this PID namespace with C(/dev/nvidia*) open (as C(fuser) shows them).
      type: list
      elements: dict
      returned: always
    xid:
      description: Recent NVIDIA Xid lines of the kernel log, when one is readable.
      type: list
      elements: str
      returned: always
msg:
  description: What happened, in one line; on failure every reason a GPU is not free.
  returned: always
  type: str
secured:
  description: With O(secured), the server that listens on O(secured.port) against the new configuration (names only).
  returned: when O(secured) is given
  type: dict
  contains:
    port:
      description: O(secured.port).
      type: int
    listener:
      description: The server that listens on the port (V(null) when none does) with C(pid), C(create_time), C(cmdline) (every
        secret argument masked), C(env_read) (whether its environment could be read) and C(port_held_by) (C(pid) and C(name)
        of the runtime's process that holds a container's published port for it, V(null) when the server listens itself).
      type: dict
    running_key:
      description: How the running server requires an API key, V(--api-key) or V(VLLM_API_KEY); V(null) when it requires none.
      type: str
    new_key:
      description: How the new configuration requires one, V(--api-key) or V(VLLM_API_KEY); V(null) when it requires none.
      type: str
    opens:
      description: Whether the running server requires an API key and the new configuration none.
      type: bool
    dropped_secret_env:
      description: The secret variables the running server has with a value and the new configuration lacks (names only).
      type: list
      elements: str
    error:
      description: Why the listener could not be told (several unrelated processes listen on the port, or a runtime's process
        holds it for a container whose server cannot be read), else V(null).
      type: str
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import finish
from ansible_collections.gpuops.fleet.plugins.module_utils._host.secured import OPTION_SPEC as SECURED_OPTION_SPEC
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.run import reclaim_in_module
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import CONTAINER_RESTART, CONTAINERS, DEFAULTS, LIVE_JOBS

ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "gpus": {"type": "list", "elements": "str"},
    "match": {"type": "list", "elements": "str"},
    "exclude": {"type": "list", "elements": "str", "default": DEFAULTS["exclude"]},
    "kill_tree": {"type": "bool", "default": DEFAULTS["kill_tree"]},
    "launcher_patterns": {"type": "list", "elements": "str", "default": DEFAULTS["launcher_patterns"]},
    "cluster_daemons": {"type": "list", "elements": "str", "default": DEFAULTS["cluster_daemons"]},
    "signals": {"type": "list", "elements": "str", "default": DEFAULTS["signals"]},
    "grace": {"type": "float", "default": DEFAULTS["grace"]},
    "timeout": {"type": "float", "default": DEFAULTS["timeout"]},
    "settle": {"type": "raw", "default": DEFAULTS["settle"]},
    "idle_threshold_mib": {"type": "int", "default": DEFAULTS["idle_threshold_mib"], "aliases": ["memory_threshold_mib"],
                           "deprecated_aliases": [{"name": "memory_threshold_mib", "version": "0.3.0", "collection_name": "gpuops.fleet"}]},
    "ignore_foreign": {"type": "bool", "default": DEFAULTS["ignore_foreign"]},
    "owner": {"type": "dict", "options": {"pid": {"type": "int", "required": True}, "create_time": {"type": "float"}}},
    "orphans_only": {"type": "bool", "default": DEFAULTS["orphans_only"]},
    "subreapers": {"type": "list", "elements": "str", "default": DEFAULTS["subreapers"]},
    "live_jobs": {"type": "str", "default": DEFAULTS["live_jobs"], "choices": list(LIVE_JOBS)},
    "containers": {"type": "str", "default": DEFAULTS["containers"], "choices": list(CONTAINERS)},
    "container_restart": {"type": "str", "default": DEFAULTS["container_restart"], "choices": list(CONTAINER_RESTART)},
    "managed_containers": {"type": "list", "elements": "str", "default": []},
    # a reading beside the reclaim (the role's preflight): does a new configuration open the server on a port
    "secured": SECURED_OPTION_SPEC,
}


def run(module: AnsibleModule) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """The reclaim (its options checked first, in run_reclaim), then the reading of ``secured`` beside it."""
    return reclaim_in_module(module, module.params, module.check_mode)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result, warnings, failed = run(module)
    finish(module, result, warnings, failed)


if __name__ == "__main__":
    main()
