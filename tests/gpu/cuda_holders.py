# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU memory holders shaped like a vLLM server: a parent whose command line is vLLM's, and titled workers.

    cuda_holders.py start   --dir D --gpus 0,0,... --mib M --mode cuda|sim|none   start them, wait until all hold
    cuda_holders.py cleanup --dir D                                               SIGKILL what `start` recorded

The parent runs as `python3 -m vllm.entrypoints.openai.api_server --model gpuops-gpu-check --tensor-parallel-size N`
(a stand-in package in D/shim, so gpu_reclaim's launcher patterns see exactly vLLM's command line); worker i titles
itself `VLLM::Worker_TP<i>` (setproctitle when importable, else prctl PR_SET_NAME, which keeps 15 characters) and holds
M MiB on its GPU: with PyTorch (cuda), as an allocation record of the simulated host (sim), or nothing (none).
Every process is recorded in D (pid and start time) before it holds anything; cleanup kills by those records only.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, NoReturn, Optional

HERE = Path(__file__).resolve().parent
MODEL = "gpuops-gpu-check"
ENV_DIR, ENV_GPUS, ENV_MIB, ENV_MODE = "GPU_CHECK_DIR", "GPU_CHECK_GPUS", "GPU_CHECK_MIB", "GPU_CHECK_MODE"
PR_SET_NAME = 15
SHUTDOWN_GRACE_S = 5.0  # as vLLM: SIGTERM the workers, wait, SIGKILL


def starttime(pid: int) -> Optional[int]:
    """Field 22 of /proc/PID/stat (clock ticks since boot); None when the PID is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            return int(handle.read().rpartition(")")[2].split()[19])
    except (FileNotFoundError, ProcessLookupError):
        return None


def record(path: Path, data: Dict[str, Any]) -> None:
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.rename(path)


def read_records(folder: Path) -> List[Dict[str, Any]]:
    records = []
    for path in sorted(folder.glob("*.json")):
        try:
            records.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return records


def set_title(title: str) -> str:
    """Title this process as vLLM does; returns how."""
    try:
        import setproctitle  # pylint: disable=import-outside-toplevel  # optional
    except ImportError:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, title.encode()[:15], 0, 0, 0)
        return "prctl"
    setproctitle.setproctitle(title)
    return "setproctitle"


def hold_memory(mode: str, gpu: int, mib: int) -> Any:
    """Hold ``mib`` on ``gpu``; the returned object must stay referenced."""
    if mode == "cuda":
        import torch  # pylint: disable=import-outside-toplevel  # only where CUDA is used

        block = torch.empty(mib * 1024 * 1024, dtype=torch.uint8, device=f"cuda:{gpu}")
        block.fill_(1)
        torch.cuda.synchronize(gpu)
        return block
    if mode == "sim":
        from gpusim.allocs import register_own_alloc  # pylint: disable=import-outside-toplevel  # simulated host only
        from gpusim.statedir import resolve_state  # pylint: disable=import-outside-toplevel

        return register_own_alloc(resolve_state(None), gpu, mib)
    return None


def worker_main(rank: int, gpu: int, mib: int, mode: str, folder: Path) -> NoReturn:
    title = f"VLLM::Worker_TP{rank}"
    info: Dict[str, Any] = {"role": "worker", "rank": rank, "gpu": gpu, "mib": mib, "mode": mode, "title": title,
                            "pid": os.getpid(), "starttime": starttime(os.getpid()), "ready": False}
    info["title_method"] = set_title(title)
    record(folder / f"worker-{rank}.json", info)
    _held = hold_memory(mode, gpu, mib)  # referenced until the process ends
    record(folder / f"worker-{rank}.json", dict(info, ready=True))
    while True:
        signal.pause()


def parent_main() -> int:
    """The stand-in API server (run as vllm.entrypoints.openai.api_server): start the workers, end them on SIGTERM."""
    folder = Path(os.environ[ENV_DIR])
    gpus = [int(gpu) for gpu in os.environ[ENV_GPUS].split(",")]
    children = []
    for rank, gpu in enumerate(gpus):
        log = open(folder / f"worker-{rank}.log", "wb")  # pylint: disable=consider-using-with  # the child keeps it
        children.append(subprocess.Popen(  # pylint: disable=consider-using-with  # reaped on shutdown
            [sys.executable, str(HERE / "cuda_holders.py"), "worker", str(rank), str(gpu), os.environ[ENV_MIB],
             os.environ[ENV_MODE], str(folder)], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
        log.close()
    stop: List[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stop.append(signum))
    while not stop and all(child.poll() is None for child in children):
        time.sleep(0.05)
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + SHUTDOWN_GRACE_S
    while time.monotonic() < deadline and any(child.poll() is None for child in children):
        time.sleep(0.02)
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()
    return 0


def write_shim(shim: Path) -> None:
    """A package `vllm` whose entrypoints.openai.api_server runs parent_main() (PYTHONPATH puts it first)."""
    package = shim / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True, exist_ok=True)
    for folder in (shim / "vllm", shim / "vllm" / "entrypoints", package):
        (folder / "__init__.py").write_text("", encoding="utf-8")
    (package / "api_server.py").write_text("import sys\nfrom cuda_holders import parent_main\nsys.exit(parent_main())\n", encoding="utf-8")


def start(folder: Path, gpus: List[int], mib: int, mode: str, timeout: float) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    write_shim(folder / "shim")
    env = dict(os.environ)
    env.update({ENV_DIR: str(folder), ENV_GPUS: ",".join(map(str, gpus)), ENV_MIB: str(mib), ENV_MODE: mode})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder / "shim"), str(HERE), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL, "--tensor-parallel-size", str(len(gpus))]
    with open(folder / "parent.log", "wb") as log:
        parent = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)  # pylint: disable=consider-using-with
    record(folder / "parent.json", {"role": "parent", "pid": parent.pid, "starttime": starttime(parent.pid), "argv": argv})
    deadline = time.monotonic() + timeout
    while True:
        workers = [r for r in read_records(folder) if r["role"] == "worker"]
        if len(workers) == len(gpus) and all(w["ready"] for w in workers):
            break
        if parent.poll() is not None or time.monotonic() > deadline:
            why = "the parent exited" if parent.poll() is not None else f"not all ready after {timeout:g} s"
            logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in sorted(folder.glob("*.log")))
            print(f"holders did not start ({why}):\n{logs}", file=sys.stderr)
            return 1
        time.sleep(0.1)
    print(f"parent pid {parent.pid}: {' '.join(argv[1:])}")
    for worker in sorted(workers, key=lambda w: w["rank"]):
        holds = "nothing" if mode == "none" else f"{mib} MiB"
        print(f"  worker pid {worker['pid']} {worker['title']} ({worker['title_method']}) holds {holds} on GPU {worker['gpu']} ({mode})")
    return 0


def cleanup(folder: Path) -> int:
    """SIGKILL every recorded process that is still the one recorded (same start time); parent first."""
    records = sorted(read_records(folder), key=lambda r: r["role"] != "parent")
    for rec in records:
        if _alive(rec):
            try:
                os.kill(rec["pid"], signal.SIGKILL)
                print(f"cleanup: killed {rec['role']} pid {rec['pid']}")
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 10
    left = records
    while left and time.monotonic() < deadline:
        left = [r for r in records if _alive(r)]
        time.sleep(0.05)
    for rec in left:
        print(f"cleanup: pid {rec['pid']} ({rec['role']}) is still running", file=sys.stderr)
    return 1 if left else 0


def _alive(rec: Dict[str, Any]) -> bool:
    """The recorded process still runs: same PID and start time, not a zombie."""
    try:
        with open(f"/proc/{rec['pid']}/stat", encoding="utf-8", errors="replace") as handle:
            fields = handle.read().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return rec.get("starttime") is not None and int(fields[19]) == rec["starttime"] and fields[0] not in ("Z", "X")


def main(argv: List[str]) -> int:
    if argv[:1] == ["worker"]:
        rank, gpu, mib, mode, folder = argv[1:6]
        return worker_main(int(rank), int(gpu), int(mib), mode, Path(folder))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("start")
    cmd.add_argument("--dir", type=Path, required=True)
    cmd.add_argument("--gpus", required=True, help="the GPU of each worker, e.g. 0,0,0,0,0,0,0,0")
    cmd.add_argument("--mib", type=int, required=True)
    cmd.add_argument("--mode", choices=("cuda", "sim", "none"), required=True)
    cmd.add_argument("--timeout", type=float, default=180)
    sub.add_parser("cleanup").add_argument("--dir", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "start":
        return start(args.dir, [int(gpu) for gpu in args.gpus.split(",")], args.mib, args.mode, args.timeout)
    return cleanup(args.dir)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
