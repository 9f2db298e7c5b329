#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_facts
short_description: Read NVIDIA GPU state, the processes holding GPU memory, health and topology
version_added: 0.1.0
description:
  - Reads every selected GPU through NVML (the C(nvidia-ml-py) package) and names each process that holds GPU memory
    through psutil, including process titles such as C(VLLM::Worker_TP0) that vLLM writes over its workers' argv.
  - Changes nothing on the host.
  - A value the device or the driver does not offer (NVML answers NOT_SUPPORTED, for example) is V(null), never a failure.
    A value NVML refuses to this user (NVML_ERROR_NO_PERMISSION) is V(null) too, and a warning names each such read.
  - A listed PID that this PID namespace does not have is checked against a second NVML reading of its GPU; if NVML no
    longer lists it, it exited during the reading and is left out, so V(visible=false) means another namespace's process.
  - When C(nvidia-ml-py) is not installed but C(nvidia-smi) is on the PATH, reads C(nvidia-smi)'s CSV output instead
    (with a warning, and RV(ansible_facts.gpu_driver.source=nvidia-smi)). That fallback cannot see graphics processes, the CUDA
    driver and NVML versions, remapped rows, retired pages, clock event reasons or topology (all V(null)), nor a lost GPU
    (C(nvidia-smi) prints a message instead of its row; the message comes back as a warning), and a field that
    this C(nvidia-smi) does not know is V(null). Processes are still named through psutil, with the same O(processes) details.
author:
  - gpuops maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.nvml
attributes:
  check_mode:
    support: full
    description: The module never changes anything; check mode returns the same facts.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  facts:
    support: full
    description: Returns C(gpus), C(gpu_driver) and, with O(topology=true), C(gpu_topology) in C(ansible_facts).
options:
  processes:
    description:
      - List the processes holding memory on each GPU (compute, graphics and MPS client lists) and describe each through psutil.
    type: bool
    default: true
  topology:
    description:
      - Also return C(gpu_topology), the link type between each pair of selected GPUs, as C(nvidia-smi topo -m) shows it.
    type: bool
    default: false
  health:
    description:
      - Also return the health counters of each GPU (uncorrected ECC errors, remapped rows, retired pages,
        clock event reasons, performance state).
    type: bool
    default: true
notes:
  - "PIDs that NVML lists are not trusted when this task runs in a nested PID namespace (a container: C(/proc/self/ns/pid) is
    not the kernel's initial PID namespace, or C(NSpid) in C(/proc/self/status) has more than one entry) or when NVML lists a
    PID that this namespace does not have: NVML may then report the machine's PIDs, and such a number can belong to an unrelated
    local process. A local process is then named as the holder only with evidence that it uses a GPU, an NVIDIA device file open
    (C(/dev/nvidia*), or C($GPUOPS_NVIDIA_DEVICE_DIR/nvidia*) when that variable is set); otherwise its entry has
    V(unverified=true), V(visible=false) and no name. M(gpuops.fleet.gpu_reclaim) applies the same rule before it signals
    anything."
seealso:
  - name: NVML API reference
    description: The NVIDIA Management Library calls this module makes.
    link: https://docs.nvidia.com/deploy/nvml-api/
"""

EXAMPLES = r"""
- name: Read every GPU, its holders and its health
  gpuops.fleet.gpu_facts:

- name: Read two GPUs, one by index and one by UUID, without processes
  gpuops.fleet.gpu_facts:
    gpus:
      - 0
      - GPU-5a1c7e0f-3b2d-4c11-9e8f-0123456789ab
    processes: false

- name: Read the topology, for NCCL tuning
  gpuops.fleet.gpu_facts:
    topology: true
    health: false

- name: Fail when a GPU still holds memory
  ansible.builtin.assert:
    that: ansible_facts.gpus | selectattr('memory_used_mib', 'gt', 1024) | list | length == 0
    fail_msg: "{{ ansible_facts.gpus | selectattr('memory_used_mib', 'gt', 1024) | map(attribute='index') | list }} still hold memory"
"""

RETURN = r"""
ansible_facts:
  description: The facts, added to the host's facts.
  returned: success
  type: dict
  contains:
    gpus:
      description:
        - One entry per selected GPU, in index order.
        - A value the device does not offer is V(null). A GPU that does not answer has V(null) values and its RV(ansible_facts.gpus[].error) set.
      returned: success
      type: list
      elements: dict
      contains:
        index:
          description: NVML index of the GPU, as C(nvidia-smi) numbers it.
          type: int
          returned: always
          sample: 0
        uuid:
          description: GPU UUID.
          type: str
          returned: always
          sample: GPU-5a1c7e0f-3b2d-4c11-9e8f-0123456789ab
        name:
          description: Product name.
          type: str
          returned: always
          sample: NVIDIA RTX PRO 6000 Blackwell Server Edition
        pci_bus_id:
          description: PCI bus id, with the 8-digit domain.
          type: str
          returned: always
          sample: "00000000:1B:00.0"
        memory_total_mib:
          description: Total memory in MiB.
          type: int
          returned: always
          sample: 97887
        memory_used_mib:
          description:
            - Used memory in MiB. From NVML's v2 memory call when the driver offers it, which leaves the driver's reservation out
              (see RV(ansible_facts.gpus[].memory_reserved_mib)); else from v1, which counts the reservation in.
            - An idle GPU is not at zero; compare against a threshold.
          type: int
          returned: always
          sample: 93029
        memory_reserved_mib:
          description: Memory reserved by the driver in MiB (NVML v2 only; V(null) with v1).
          type: int
          returned: always
          sample: 512
        memory_free_mib:
          description: Free memory in MiB.
          type: int
          returned: always
          sample: 4346
        utilization_gpu_pct:
          description: GPU utilization over the last sample period, in percent.
          type: int
          returned: always
          sample: 97
        utilization_memory_pct:
          description: Memory controller utilization, in percent.
          type: int
          returned: always
          sample: 45
        temperature_c:
          description: GPU temperature in degrees Celsius.
          type: int
          returned: always
          sample: 62
        power_draw_w:
          description: Power draw in W.
          type: float
          returned: always
          sample: 310.0
        power_limit_w:
          description: Enforced power limit in W.
          type: float
          returned: always
          sample: 600.0
        persistence_mode:
          description: Whether persistence mode is on.
          type: bool
          returned: always
          sample: true
        mig_mode:
          description: Whether MIG mode is on (current mode).
          type: bool
          returned: always
          sample: false
        ecc_mode:
          description: Whether ECC is on (current mode).
          type: bool
          returned: always
          sample: true
        ecc_uncorrected_volatile:
          description: Uncorrected ECC errors since the driver loaded.
          type: int
          returned: when O(health=true)
          sample: 0
        remapped_rows:
          description: Row remapping state.
          type: dict
          returned: when O(health=true)
          sample: {"correctable": 0, "uncorrectable": 0, "pending": false, "failure": false}
          contains:
            correctable:
              description: Rows remapped for correctable errors.
              type: int
              returned: always
            uncorrectable:
              description: Rows remapped for uncorrectable errors.
              type: int
              returned: always
            pending:
              description: A remapping waits for the GPU to be reset.
              type: bool
              returned: always
            failure:
              description: A remapping failed; the GPU should be serviced.
              type: bool
              returned: always
        retired_pages:
          description: Retired memory pages (GPUs before row remapping); V(null) where the GPU uses row remapping instead.
          type: dict
          returned: when O(health=true)
          sample: {"single_bit": 0, "double_bit": 0, "pending": false}
          contains:
            single_bit:
              description: Pages retired for multiple single-bit errors.
              type: int
              returned: always
            double_bit:
              description: Pages retired for double-bit errors.
              type: int
              returned: always
            pending:
              description: Pages wait to be retired at the next reset.
              type: bool
              returned: always
        clocks_event_reasons:
          description:
            - Why the clocks are held down now (NVML clock event reasons, formerly throttle reasons), for example V(gpu_idle),
              V(sw_power_cap), V(hw_slowdown), V(sw_thermal_slowdown), V(hw_thermal_slowdown) or V(hw_power_brake_slowdown).
            - An empty list when nothing holds them down.
          type: list
          elements: str
          returned: when O(health=true)
          sample: ["gpu_idle"]
        performance_state:
          description: Performance state, from V(P0) (maximum) to V(P15) (minimum).
          type: str
          returned: when O(health=true)
          sample: P0
        processes:
          description:
            - The processes NVML lists on this GPU (compute, graphics and MPS client lists), by PID.
            - V(null) when the GPU did not answer.
          type: list
          elements: dict
          returned: when O(processes=true)
          contains:
            pid:
              description: PID as NVML reports it.
              type: int
              returned: always
              sample: 4242
            name:
              description: Process name; a process title such as V(VLLM::Worker_TP0) shows whole, not cut to 15 characters.
              type: str
              returned: always
              sample: VLLM::Worker_TP0
            cmdline:
              description: Command line as a list of words; a process title is one word.
              type: list
              elements: str
              returned: always
              sample: ["VLLM::Worker_TP0"]
            username:
              description: Owner of the process.
              type: str
              returned: always
              sample: vllm
            state:
              description: psutil status, for example V(running), V(sleeping), V(disk-sleep) or V(zombie).
              type: str
              returned: always
              sample: sleeping
            ppid:
              description: Parent PID.
              type: int
              returned: always
              sample: 4200
            create_time:
              description: Start time, in seconds since the epoch.
              type: float
              returned: always
              sample: 1764470000.12
            used_memory_mib:
              description: GPU memory this process holds in MiB; V(null) when NVML says it is not available.
              type: int
              returned: always
              sample: 93029
            type:
              description:
                - Which NVML list has the process, V(compute), V(graphics) or V(mps) (a client of an MPS server),
                  joined by V(+) when several, for example V(compute+graphics).
              type: str
              returned: always
              sample: compute
            visible:
              description:
                - V(false) when this PID namespace has no such PID, for example a process in a container while this task runs
                  on the host, or the other way round. Then name, cmdline, username, state, ppid and create_time are V(null).
                - The memory is held all the same; act on it from the PID namespace that owns it.
              type: bool
              returned: always
              sample: true
            unverified:
              description:
                - V(true) when NVML's PIDs are not trusted here (see the notes) and the local process with this PID has no NVIDIA
                  device file open, so it may be an unrelated process that only shares the number. Then name, cmdline, username, state,
                  ppid and create_time are V(null) and RV(ansible_facts.gpus[].processes[].visible) is V(false).
              type: bool
              returned: always
              sample: false
            container:
              description:
                - The container the process runs in, from its cgroup (C(/proc/PID/cgroup)) as the host shows it; V(null) when its
                  cgroup names none (a systemd service, a login session), or the process is not visible or is unverified.
                - PIDs stay the host's, as NVML reports them; the process's PID inside its container is not shown.
                - docker (C(docker-ID.scope), C(/docker/ID)), podman (C(libpod-ID.scope), C(/libpod_parent/libpod-ID); podman's
                  C(conmon) is no container) and Kubernetes (a container's cgroup below its pod's, under C(kubepods), for
                  containerd, CRI-O or cri-dockerd, with the systemd or the cgroupfs driver).
              type: dict
              returned: always
              sample: {"runtime": "podman", "id": "1e030a3033f4c66d3f8c1ab292f8490c5dff37766b14782381b20143b1d85617",
                       "name": "vllm-llama", "image": "docker.io/vllm/vllm-openai:v0.11.0"}
              contains:
                runtime:
                  description: V(docker), V(podman) or V(kubernetes).
                  type: str
                  returned: always
                  sample: podman
                id:
                  description: The container's full id (64 hex digits).
                  type: str
                  returned: always
                  sample: 1e030a3033f4c66d3f8c1ab292f8490c5dff37766b14782381b20143b1d85617
                name:
                  description:
                    - The container's name, as C(docker inspect) or C(podman inspect) gives it (each asked once per container, for
                      at most 5 seconds); V(null) when the command is missing, fails, does not answer in time or does not know
                      the container (a rootless podman container of another user), and for Kubernetes.
                  type: str
                  returned: always
                  sample: vllm-llama
                image:
                  description: The container's image, as its runtime names it; V(null) as for RV(ansible_facts.gpus[].processes[].container.name).
                  type: str
                  returned: always
                  sample: docker.io/vllm/vllm-openai:v0.11.0
                pod_uid:
                  description:
                    - The UID of the container's pod, with its dashes (a systemd slice writes them as underscores).
                    - V(null) when no pod's cgroup is above the container's.
                  type: str
                  returned: when RV(ansible_facts.gpus[].processes[].container.runtime=kubernetes)
                  sample: 1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901
        error:
          description: V(null), or why this GPU could not be read, for example a lost GPU.
          type: str
          returned: always
          sample: null
    gpu_driver:
      description: The driver, as NVML reports it.
      returned: success
      type: dict
      contains:
        driver_version:
          description: Driver version.
          type: str
          returned: always
          sample: 580.95.05
        cuda_driver_version:
          description: Highest CUDA version the driver supports; V(null) from nvidia-smi.
          type: str
          returned: always
          sample: "13.0"
        nvml_version:
          description: NVML version; V(null) from nvidia-smi.
          type: str
          returned: always
          sample: 13.580.95.05
        count:
          description: Number of GPUs on the host, selected or not.
          type: int
          returned: always
          sample: 8
        source:
          description: Where the facts come from, V(nvml), or V(nvidia-smi) for the fallback.
          type: str
          returned: always
          sample: nvml
    gpu_topology:
      description:
        - Link type between each pair of selected GPUs, as C(nvidia-smi topo -m) prints it.
        - V(null) from the nvidia-smi fallback.
      returned: when O(topology=true)
      type: dict
      contains:
        gpus:
          description: GPU indices, the order of the matrix rows and columns.
          type: list
          elements: int
          returned: always
          sample: [0, 1]
        matrix:
          description:
            - "Row i, column j: V(X) for the GPU itself, V(NV<n>) for n active NvLinks between the pair, else the PCIe path:
              V(PIX) (one PCIe switch), V(PXB) (several switches), V(PHB) (a host bridge), V(NODE) (host bridges within a NUMA node),
              V(SYS) (across NUMA nodes)."
            - V(null) where NVML does not answer, for example for a lost GPU.
          type: list
          elements: list
          returned: always
          sample: [["X", "PXB"], ["PXB", "X"]]
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import finish
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.facts import DEFAULTS, run_facts

ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "gpus": {"type": "list", "elements": "str"},
    "processes": {"type": "bool", "default": DEFAULTS["processes"]},
    "topology": {"type": "bool", "default": DEFAULTS["topology"]},
    "health": {"type": "bool", "default": DEFAULTS["health"]},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result, warnings, failed = run_facts(module.params, *_deps.gpu_reader_hooks(module), module.get_bin_path)
    finish(module, result, warnings, failed)


if __name__ == "__main__":
    main()
