#!/usr/bin/env bash
# The README's demo: the incident of docs/incident.md on a simulated fleet, seen by gpuops.fleet.gpu_facts,
# then fixed by the headline command, `ansible-playbook playbooks/restart_vllm.yml`, and measured by
# `playbooks/benchmark_matrix.yml`, then rolled out behind a benchmark gate by `playbooks/rollout_vllm.yml`.
#
#   gpu-node-01  an 8-GPU host after the broken cleanup: API server and worker 0
#                SIGKILLed, VLLM::Worker_TP1..7 alive, 93,029 MiB held on 7 GPUs
#   gpu-node-02  an 8-GPU host running an older TP=4 server on GPUs 4-7, started by hand from a shell
#                that stays: restart_vllm.yml takes it over (the shell lives on)
#   gpu-node-03  (as root, with podman) an 8-GPU host whose inventory runs its server in a podman container (launch
#                mode container, TP=4 on GPUs 0-3); someone's `podman run -d --restart=always -p ...` of an older
#                server holds the port: restart_vllm.yml stops that container through podman, keeps it, and runs
#                its own. The image is empty: the host's /usr and this checkout are mounted read-only, and the
#                GPUs are CDI devices of a kind of the demo's own (gpuops-demo.example/gpu), whose edits name the
#                simulated GPU and mount the host's state.
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
hosts=(gpu-node-01 gpu-node-02 gpu-node-03)
# one server across two more hosts (step 10), in an inventory of their own
group_hosts=(gpu-node-04 gpu-node-05)

# gpu-node-03's containers: by the names the demo gives them, its image and CDI spec by theirs
image=localhost/gpuops-demo:latest
kind=gpuops-demo.example/gpu
cdi=/var/run/cdi/gpuops-demo.json
boxes=(gpuops-demo-hand gpuops-demo-node-03)
with_containers() { [ "$(id -u)" = 0 ] && command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1; }

cleanup() {
  if with_containers; then
    for box in "${boxes[@]}"; do podman rm -f -t 0 "$box" >/dev/null 2>&1 || true; done
    podman rmi "$image" >/dev/null 2>&1 || true
    rm -f "$cdi"
  fi
  for h in "${hosts[@]}" "${group_hosts[@]}"; do
    if [ -d "$demo/$h" ]; then gpusim cleanup --state "$demo/$h" >/dev/null || true; fi
  done
}
if [ "${1:-}" = clean ]; then cleanup; exit 0; fi
if [ "${KEEP:-0}" != 1 ]; then trap cleanup EXIT; fi
cleanup
rm -rf "$demo" && mkdir -p "$demo"
if ! with_containers; then
  echo "gpu-node-03 (a server in a podman container) is left out: it needs root and podman with runc (make container-tools)"
  hosts=(gpu-node-01 gpu-node-02)
fi

banner() { printf '\n\033[1m==== %s\033[0m\n' "$*"; }

banner "1. Two simulated GPU hosts (fake libnvidia-ml.so.1, loaded by the real nvidia-ml-py)"
for h in "${hosts[@]}"; do gpusim create --state "$demo/$h"; done
# the role's inventory: gpu-node-01 serves TP=8 with NCCL_PROTO=LL, gpu-node-02 TP=4 on GPUs 4-7
node03=() node03_vars=()
if [ "${#hosts[@]}" = 3 ]; then
  # read-only mounts that let the empty image run the fake vLLM as the host runs it: /usr, this checkout and the
  # interpreter the venv was made from, wherever it is
  mounts=(/usr:/usr:ro /lib:/lib:ro /lib64:/lib64:ro /bin:/bin:ro "$root:$root:ro")
  base=$("$py" -c 'import os, sys; print(os.path.realpath(sys.base_prefix))')
  case $base in /usr|/usr/*) ;; *) mounts+=("$base:$base:ro") ;; esac
  volumes=$("$py" -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${mounts[@]}")
  run_options='["--runtime", "runc", "--ulimit", "nofile=1024:20000", "--ulimit", "nproc=4096:4096"]'
  node03=("$demo/gpu-node-03:18003")
  node03_vars=(--host-var gpu-node-03.vllm_server_launch_mode=container
          --host-var gpu-node-03.vllm_server_tensor_parallel_size=4 --host-var gpu-node-03.vllm_server_container_name=gpuops-demo-node-03
          --host-var "gpu-node-03.vllm_server_container_image=$image" --host-var gpu-node-03.vllm_server_container_runtime=podman
          --host-var "gpu-node-03.vllm_server_container_cdi_kind=$kind" --host-var "gpu-node-03.vllm_server_container_volumes=$volumes"
          --host-var "gpu-node-03.vllm_server_container_run_options=$run_options")
fi
"$py" -m gpusim.inventory --out "$demo/inventory.json" "$demo/gpu-node-01:18001" "$demo/gpu-node-02:18002" "${node03[@]}" \
  --host-var gpu-node-01.vllm_server_tensor_parallel_size=8 --host-var 'gpu-node-01.vllm_server_env={"NCCL_PROTO": "LL"}' \
  --host-var gpu-node-02.vllm_server_tensor_parallel_size=4 --host-var 'gpu-node-02.vllm_server_gpus=[4, 5, 6, 7]' "${node03_vars[@]}" >/dev/null
echo "inventory: $demo/inventory.json (group vllm_servers)"

banner "2. gpu-node-01: vLLM TP=8 at 93,029 MiB per GPU, then the incident's cleanup"
gpusim vllm --state "$demo/gpu-node-01" --tp 8 --mib 93029 >/dev/null
gpusim incident --state "$demo/gpu-node-01"
echo "gpu-node-02: an older TP=4 server on GPUs 4-7 and port 18002, started by hand in a shell that stays (not by the role)"
gpusim vllm --state "$demo/gpu-node-02" --tp 4 --first-gpu 4 --mib 61000 --port 18002 --wrapper "/bin/bash" >/dev/null
if [ "${#hosts[@]}" = 3 ]; then
  echo "gpu-node-03: an empty image, a CDI spec whose device N is the simulated GPU N, and an older TP=4 server that someone"
  echo "             started with podman run -d --restart=always -p 18003:18003, on GPUs 0-3"
  tar -cf - -T /dev/null | podman import - "$image" >/dev/null
  "$py" - "$cdi" "$kind" "$demo/gpu-node-03" <<'PY'
import json, os, sys
path, kind, state = sys.argv[1:]
os.makedirs(os.path.dirname(path), exist_ok=True)
spec = {"cdiVersion": "0.5.0", "kind": kind,
        "devices": [{"name": str(n), "containerEdits": {"env": ["GPUOPS_SIM_CDI_GPU_%d=%d" % (n, n)]}} for n in range(8)],
        "containerEdits": {"mounts": [{"hostPath": state, "containerPath": state, "options": ["bind", "rw"]}]}}
with open(path, "w") as handle:
    json.dump(spec, handle)
PY
  volume_args=()
  for mount in "${mounts[@]}"; do volume_args+=(-v "$mount"); done
  podman run -d --name gpuops-demo-hand --restart=always -p 18003:18003 -e GPUOPS_SIM_STATE="$demo/gpu-node-03" \
    --device "$kind=0" --device "$kind=1" --device "$kind=2" --device "$kind=3" "${volume_args[@]}" \
    --runtime runc --ulimit nofile=1024:20000 --ulimit nproc=4096:4096 \
    "$image" "$py" "$root/simulator/fakevllm/bin/vllm" serve zai-org/GLM-5-GGUF --host 0.0.0.0 --port 18003 \
    --tensor-parallel-size 4 >/dev/null
  "$py" -c 'import sys, time, urllib.request
for _ in range(150):
    try:
        sys.exit(0 if urllib.request.urlopen("http://127.0.0.1:18003/health", timeout=2).status == 200 else 1)
    except OSError:
        time.sleep(0.2)
sys.exit("the hand-started container never answered /health")' 
fi
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

banner "6. The same command again: the servers match the inventory, nothing changes (restart_vllm.yml converges)"
ansible-playbook -i "$demo/inventory.json" playbooks/restart_vllm.yml

# the measurements run on gpu-node-01 and gpu-node-02 only, to keep the demo short
measured=(--limit "gpu-node-01,gpu-node-02")

banner "7. benchmark_matrix.yml: NCCL_PROTO unset / LL / LL128 on gpu-node-01 and gpu-node-02, 2 interleaved rounds"
matrix=$demo/benchmark
ansible-playbook -i "$demo/inventory.json" playbooks/benchmark_matrix.yml "${measured[@]}" \
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
ansible-playbook -i "$demo/inventory.json" playbooks/restart_vllm.yml "${measured[@]}" \
  -e '{"vllm_server_env": {}}' >"$demo/rollout-reset.log" 2>&1 || { tail -40 "$demo/rollout-reset.log"; exit 1; }
rollout_load=(-e vllm_server_benchmark_output_len=32 -e vllm_server_benchmark_num_requests=4 -e vllm_server_benchmark_concurrency=2
              -e vllm_server_benchmark_warmup_requests=1 -e vllm_server_benchmark_input_len=16 -e vllm_server_benchmark_repeats=3)
echo "rollout_vllm.yml -e '{\"vllm_server_env\": {\"NCCL_PROTO\": \"LL128\"}}' (serial 1: gpu-node-01 is the canary)"
if ansible-playbook -i "$demo/inventory.json" playbooks/rollout_vllm.yml "${measured[@]}" -e '{"vllm_server_env": {"NCCL_PROTO": "LL128"}}' \
     -e vllm_rollout_results_dir="$demo/rollout-LL128" "${rollout_load[@]}" >"$demo/rollout-LL128.log" 2>&1; then
  echo "the LL128 rollout was expected to halt"; tail -40 "$demo/rollout-LL128.log"; exit 1
fi
cat "$demo/rollout-LL128/summary.txt"
echo
echo "rollout_vllm.yml -e '{\"vllm_server_env\": {\"NCCL_PROTO\": \"LL\"}}'"
ansible-playbook -i "$demo/inventory.json" playbooks/rollout_vllm.yml "${measured[@]}" -e '{"vllm_server_env": {"NCCL_PROTO": "LL"}}' \
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

banner "10. One server across two hosts: an inventory group in rank order, changed whole or not at all"
for h in "${group_hosts[@]}"; do gpusim create --state "$demo/$h" >/dev/null; done
"$py" - "$demo" <<'PY'
import json, sys
from pathlib import Path
from gpusim.inventory import host_vars, role_inventory
demo = Path(sys.argv[1])
hosts = {name: host_vars(demo / name, 18004) for name in ("gpu-node-04", "gpu-node-05")}
inventory = role_inventory(hosts)
# gpu-node-04 is rank 0 (the head, its API on 18004), gpu-node-05 rank 1 (headless); TP 4 x PP 2, 4 GPUs on each
inventory["all"]["children"]["glm5_a"] = {"hosts": {name: {} for name in hosts}, "vars": {
    "vllm_server_nodes_group": "glm5_a", "vllm_server_node_address": "127.0.0.1", "vllm_server_nodes_port": 18504,
    "vllm_server_tensor_parallel_size": 4, "vllm_server_pipeline_parallel_size": 2}}
(demo / "across.json").write_text(json.dumps(inventory, indent=2))
PY
echo "inventory: $demo/across.json (group glm5_a: gpu-node-04 the head, gpu-node-05 headless)"
ansible-playbook -i "$demo/across.json" playbooks/restart_vllm.yml >"$demo/across.log" 2>&1 || { tail -40 "$demo/across.log"; exit 1; }
sed -n '/One line per host/,/PLAY RECAP/p' "$demo/across.log" | grep -E "gpu-node-0[45]:" || true
rank=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$demo/gpu-node-05/role/vllm-18004.json")
echo
echo "gpu-node-05's headless rank (PID $rank) killed -9: the head answers 503; the same command replaces the whole server"
kill -9 "$rank"
ansible-playbook -i "$demo/across.json" playbooks/restart_vllm.yml >"$demo/across-heal.log" 2>&1 || { tail -40 "$demo/across-heal.log"; exit 1; }
sed -n '/One line per host/,/PLAY RECAP/p' "$demo/across-heal.log" | grep -E "gpu-node-0[45]: +(RESTARTED|STARTED|ready)" || true

banner "Done"
if [ "${KEEP:-0}" = 1 ]; then
  echo "The fleet is still running (KEEP=1). Try: ansible-playbook -i $demo/inventory.json playbooks/restart_vllm.yml"
  echo "End it with: make demo-clean"
else
  echo "Every process the demo started is ended by recorded PID. KEEP=1 make demo leaves the fleet running."
fi
