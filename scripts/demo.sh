#!/usr/bin/env bash
# The README's demo: the incident of docs/incident.md on a simulated fleet, seen by gpuops.fleet.gpu_facts,
# then fixed by the headline command, `ansible-playbook playbooks/restart_vllm.yml`, and measured by
# `playbooks/benchmark_matrix.yml`, then rolled out behind a benchmark gate by `playbooks/rollout_vllm.yml`.
#
#   gpu-node-01  an 8-GPU host after the broken cleanup: API server and worker 0
#                SIGKILLed, VLLM::Worker_TP1..7 alive, 93,029 MiB held on 7 GPUs
#   gpu-node-02  an 8-GPU host running an older TP=4 server on GPUs 4-7, started by hand from a shell
#                that stays: restart_vllm.yml takes it over (the shell lives on)
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
# the role's inventory: gpu-node-01 serves TP=8 with NCCL_PROTO=LL, gpu-node-02 TP=4 on GPUs 4-7
"$py" -m gpusim.inventory --out "$demo/inventory.json" "$demo/gpu-node-01:18001" "$demo/gpu-node-02:18002" \
  --host-var gpu-node-01.vllm_server_tensor_parallel_size=8 --host-var 'gpu-node-01.vllm_server_env={"NCCL_PROTO": "LL"}' \
  --host-var gpu-node-02.vllm_server_tensor_parallel_size=4 --host-var 'gpu-node-02.vllm_server_gpus=[4, 5, 6, 7]' >/dev/null
echo "inventory: $demo/inventory.json (group vllm_servers)"

banner "2. gpu-node-01: vLLM TP=8 at 93,029 MiB per GPU, then the incident's cleanup"
gpusim vllm --state "$demo/gpu-node-01" --tp 8 --mib 93029 >/dev/null
gpusim incident --state "$demo/gpu-node-01"
echo "gpu-node-02: an older TP=4 server on GPUs 4-7 and port 18002, started by hand in a shell that stays (not by the role)"
gpusim vllm --state "$demo/gpu-node-02" --tp 4 --first-gpu 4 --mib 61000 --port 18002 --wrapper "/bin/bash" >/dev/null
echo
echo "What the incident's own check saw (nvidia-smi ... | head -1):"
LD_LIBRARY_PATH=$root/simulator/build/lib GPUOPS_SIM_STATE=$demo/gpu-node-01 \
  "$root/simulator/build/bin/nvidia-smi" --query-gpu=index,memory.used --format=csv,noheader | head -1

banner "3. gpuops.fleet.gpu_facts: every GPU and every holder, on every host"
ansible-playbook -i "$demo/inventory.json" playbooks/gpu_facts.yml

banner "4. restart_vllm.yml: drain, stop, reclaim, verify free, launch, ready, check - on every host"
ansible-playbook -i "$demo/inventory.json" playbooks/restart_vllm.yml

banner "5. gpu_facts again: the NEW servers' own workers hold the GPUs"
ansible-playbook -i "$demo/inventory.json" playbooks/gpu_facts.yml

banner "6. The same command without force: the servers match the inventory, nothing changes"
ansible-playbook -i "$demo/inventory.json" playbooks/restart_vllm.yml -e vllm_restart_force=false

banner "7. benchmark_matrix.yml: NCCL_PROTO unset / LL / LL128 on both hosts, 2 interleaved rounds"
matrix=$demo/benchmark
ansible-playbook -i "$demo/inventory.json" playbooks/benchmark_matrix.yml \
  -e '{"vllm_benchmark_configs": [{"name": "default", "env": {"NCCL_PROTO": null}}, {"name": "LL", "env": {"NCCL_PROTO": "LL"}}, {"name": "LL128", "env": {"NCCL_PROTO": "LL128"}}]}' \
  -e vllm_benchmark_repeats=2 -e vllm_benchmark_results_dir="$matrix" \
  -e vllm_server_benchmark_output_len=64 -e vllm_server_benchmark_num_requests=8 -e vllm_server_benchmark_concurrency=4 \
  -e vllm_server_benchmark_warmup_requests=1 -e vllm_server_benchmark_input_len=32 >"$demo/benchmark.log" 2>&1 \
  || { tail -40 "$demo/benchmark.log"; exit 1; }
cat "$matrix/summary.md"
echo
echo "report: $matrix/ (results.csv, report.json, raw/, chart.png); the servers run the winner now"

banner "8. rollout_vllm.yml: a benchmark-gated rollout - LL128 halts at the canary, LL passes"
# the fleet back on NCCL_PROTO unset first, so each rollout starts from the same place
ansible-playbook -i "$demo/inventory.json" playbooks/restart_vllm.yml -e vllm_restart_force=false \
  -e '{"vllm_server_env": {}}' >"$demo/rollout-reset.log" 2>&1 || { tail -40 "$demo/rollout-reset.log"; exit 1; }
rollout_load=(-e vllm_server_benchmark_output_len=32 -e vllm_server_benchmark_num_requests=4 -e vllm_server_benchmark_concurrency=2
              -e vllm_server_benchmark_warmup_requests=1 -e vllm_server_benchmark_input_len=16 -e vllm_server_benchmark_repeats=3)
echo "rollout_vllm.yml -e '{\"vllm_server_env\": {\"NCCL_PROTO\": \"LL128\"}}' (serial 1: gpu-node-01 is the canary)"
if ansible-playbook -i "$demo/inventory.json" playbooks/rollout_vllm.yml -e '{"vllm_server_env": {"NCCL_PROTO": "LL128"}}' \
     -e vllm_rollout_results_dir="$demo/rollout-LL128" "${rollout_load[@]}" >"$demo/rollout-LL128.log" 2>&1; then
  echo "the LL128 rollout was expected to halt"; tail -40 "$demo/rollout-LL128.log"; exit 1
fi
cat "$demo/rollout-LL128/summary.txt"
echo
echo "rollout_vllm.yml -e '{\"vllm_server_env\": {\"NCCL_PROTO\": \"LL\"}}'"
ansible-playbook -i "$demo/inventory.json" playbooks/rollout_vllm.yml -e '{"vllm_server_env": {"NCCL_PROTO": "LL"}}' \
  -e vllm_rollout_results_dir="$demo/rollout-LL" "${rollout_load[@]}" >"$demo/rollout-LL.log" 2>&1 \
  || { tail -40 "$demo/rollout-LL.log"; exit 1; }
cat "$demo/rollout-LL/summary.txt"
echo "reports: $demo/rollout-LL128/ and $demo/rollout-LL/ (summary.md, report.json, chart.png, the measurements)"

banner "9. gpu_report.yml: the fleet at a glance - one page, every GPU, who holds it, whether it is healthy"
fleet_report=$demo/gpu-report
ansible-playbook -i "$demo/inventory.json" playbooks/gpu_report.yml -e gpu_report_dir="$fleet_report" >"$demo/gpu-report.log" 2>&1 \
  || { tail -40 "$demo/gpu-report.log"; exit 1; }
cat "$fleet_report/summary.md"
echo
echo "page: $fleet_report/index.html (open it in a browser; gpus.csv, holders.csv, report.json next to it)"

banner "Done"
if [ "${KEEP:-0}" = 1 ]; then
  echo "The fleet is still running (KEEP=1). Try: ansible-playbook -i $demo/inventory.json playbooks/restart_vllm.yml"
  echo "End it with: make demo-clean"
else
  echo "Every process the demo started is ended by recorded PID. KEEP=1 make demo leaves the fleet running."
fi
