#!/usr/bin/env bash
# The README's demo: the incident of docs/incident.md on a simulated fleet,
# seen by gpuops.fleet.gpu_facts, then fixed by gpuops.fleet.gpu_reclaim.
#
#   gpu-node-01  an 8-GPU host after the broken cleanup: API server and worker 0
#                SIGKILLed, VLLM::Worker_TP1..7 alive, 93,029 MiB held on 7 GPUs
#   gpu-node-02  a healthy 8-GPU host running a TP=4 server on GPUs 4-7
#
# Run by `make demo` (which builds the venv and the fake NVML first). Every
# process it starts is recorded by gpusim and ended by recorded PID on exit;
# KEEP=1 leaves the fleet running (then: make demo-clean).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
demo=$root/build/demo
py=$root/.venv/bin/python
export PATH=$root/.venv/bin:$PATH
export ANSIBLE_CONFIG=$root/ansible.cfg
export PYTHONPATH=$root/simulator

gpusim() { "$py" -m gpusim "$@"; }
hosts=(gpu-node-01 gpu-node-02)

cleanup() {
  for h in "${hosts[@]}"; do
    if [ -d "$demo/$h" ]; then gpusim cleanup --state "$demo/$h" >/dev/null || true; fi
  done
}
if [ "${KEEP:-0}" != 1 ]; then trap cleanup EXIT; fi
cleanup
rm -rf "$demo" && mkdir -p "$demo"

banner() { printf '\n\033[1m==== %s\033[0m\n' "$*"; }

banner "1. Two simulated GPU hosts (fake libnvidia-ml.so.1, loaded by the real nvidia-ml-py)"
for h in "${hosts[@]}"; do gpusim create --state "$demo/$h"; done
{
  echo "# Simulated fleet made by scripts/demo.sh: local connections, one fake NVML state per host."
  echo "all:"
  echo "  vars:"
  echo "    ansible_connection: local"
  echo "    ansible_python_interpreter: $py"
  echo "  hosts:"
  for h in "${hosts[@]}"; do
    echo "    $h:"
    echo "      gpuops_fleet_environment:"
    echo "        LD_LIBRARY_PATH: $root/simulator/build/lib"
    echo "        GPUOPS_SIM_STATE: $demo/$h"
  done
} > "$demo/inventory.yml"
echo "inventory: $demo/inventory.yml"

banner "2. gpu-node-01: vLLM TP=8 at 93,029 MiB per GPU, then the incident's cleanup"
gpusim vllm --state "$demo/gpu-node-01" --tp 8 --mib 93029 >/dev/null
gpusim incident --state "$demo/gpu-node-01"
echo "gpu-node-02: a healthy TP=4 server on GPUs 4-7"
gpusim vllm --state "$demo/gpu-node-02" --tp 4 --first-gpu 4 --mib 61000 >/dev/null
echo
echo "What the incident's own check saw (nvidia-smi ... | head -1):"
LD_LIBRARY_PATH=$root/simulator/build/lib GPUOPS_SIM_STATE=$demo/gpu-node-01 \
  "$root/simulator/build/bin/nvidia-smi" --query-gpu=index,memory.used --format=csv,noheader | head -1

banner "3. gpuops.fleet.gpu_facts: every GPU and every holder, on every host"
ansible-playbook -i "$demo/inventory.yml" playbooks/gpu_facts.yml

banner "4. gpuops.fleet.gpu_reclaim on gpu-node-01 (check mode first: what it would end)"
ansible-playbook -i "$demo/inventory.yml" playbooks/gpu_cleanup.yml --limit gpu-node-01 --check --diff
banner "5. gpuops.fleet.gpu_reclaim for real: end every holder, then prove it with a fresh NVML reading"
ansible-playbook -i "$demo/inventory.yml" playbooks/gpu_cleanup.yml --limit gpu-node-01 --diff

banner "6. gpu_facts again: gpu-node-01 free, gpu-node-02 untouched"
ansible-playbook -i "$demo/inventory.yml" playbooks/gpu_facts.yml

banner "Done"
if [ "${KEEP:-0}" = 1 ]; then
  echo "The fleet is still running (KEEP=1). Try: ansible-playbook -i $demo/inventory.yml playbooks/gpu_cleanup.yml"
  echo "End it with: make demo-clean"
else
  echo "Every process the demo started is ended by recorded PID. KEEP=1 make demo leaves the fleet running."
fi
