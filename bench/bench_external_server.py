# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_benchmark (the real module, through ansible) against a server this project did not write: AIPerf's mock server.

AIPerf's mock server is a FastAPI app that streams chat completions with a configured TTFT and inter-token latency,
lists no models (/v1/models answers 404) and sends no usage. It is not part of this repository or of CI: it runs from
build/aiperf-mock (ignored by git), in a virtual environment of its own, never .venv. Set it up once:

    python3 -m venv build/aiperf-mock/venv
    build/aiperf-mock/venv/bin/pip install fastapi uvicorn "pydantic<2.12" pydantic-settings cyclopts transformers
    mkdir -p build/aiperf-mock/src   # then put AIPerf's mock_server package there (build/aiperf-mock/src/mock_server),
                                     # from a checkout of github.com/ai-dynamo/aiperf (integration-tests/mock_server)

The mock echoes the prompt token by token, tokenized by a Hugging Face tokenizer it loads by name; with no network
this bench builds a word-level tokenizer of its own (build/aiperf-mock/tokenizer) and names it as the model, so one
prompt word is one token. Then it starts the mock on loopback, runs vllm_benchmark as a sweep of concurrency levels
(model set, metrics_url empty: this mock has no metrics), and compares TTFT, ITL and the decode rate with the
configured TTFT and ITL.

Run from the repository root: .venv/bin/python bench/run.py bench_external_server
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List

from _benchlib import REPO, BenchError, save_results, table
from gpusim.api import free_port  # simulator/ is on PYTHONPATH (bench/run.py)

BUILD = REPO / "build" / "aiperf-mock"
PYTHON = BUILD / "venv" / "bin" / "python"
SOURCE = BUILD / "src"
TOKENIZER = BUILD / "tokenizer"

MAKE_TOKENIZER = r"""
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
words = sys.argv[2].split()
vocab = {"[UNK]": 0}
for word in words:
    vocab.setdefault(word, len(vocab))
core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
core.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]").save_pretrained(sys.argv[1])
"""


def make_tokenizer() -> None:
    from ansible_collections.gpuops.fleet.plugins.module_utils._bench.prompts import WORDS  # pylint: disable=import-outside-toplevel
    done = subprocess.run([str(PYTHON), "-c", MAKE_TOKENIZER, str(TOKENIZER), " ".join(WORDS)], capture_output=True,
                          text=True, check=False, env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error"))
    if done.returncode != 0:
        raise BenchError("building the word tokenizer failed:\n%s" % done.stderr[-2000:])


class MockServer:
    """AIPerf's mock server as our child on loopback, stopped by its own Popen handle."""

    def __init__(self, ttft_ms: float, itl_ms: float, log: Path) -> None:
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", PYTHONPATH=str(SOURCE),
                   MOCK_SERVER_HOST="127.0.0.1", MOCK_SERVER_PORT=str(self.port), MOCK_SERVER_TTFT=str(ttft_ms),
                   MOCK_SERVER_ITL=str(itl_ms), MOCK_SERVER_LOG_LEVEL="WARNING",
                   MOCK_SERVER_TOKENIZER_MODELS=json.dumps([str(TOKENIZER)]))
        self.log = log.open("w")
        self.proc = subprocess.Popen([str(PYTHON), "-c", "from mock_server.main import main; main()"], cwd=str(BUILD),
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError("the mock server exited with %s; see %s" % (self.proc.returncode, self.log.name))
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise BenchError("the mock server did not answer /health within %g s" % timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
        self.log.close()


def run_module(args: Dict[str, Any]) -> Dict[str, Any]:
    """vllm_benchmark through ansible (ad hoc, local connection), its result as JSON."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    argv = [str(REPO / ".venv" / "bin" / "ansible"), "localhost", "-c", "local", "-o", "-e",
            "ansible_python_interpreter=%s" % (REPO / ".venv" / "bin" / "python"), "-m", "gpuops.fleet.vllm_benchmark",
            "-a", json.dumps(args)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800, check=False)
    try:  # one line: "localhost | SUCCESS => {...}" (or FAILED!)
        line = next(line for line in done.stdout.splitlines() if line.startswith("localhost | "))
        return json.loads(line.split(" => ", 1)[1])
    except (StopIteration, IndexError, ValueError):
        raise BenchError("ansible gave no result (%d):\n%s\n%s" % (done.returncode, done.stdout[-2000:], done.stderr[-2000:])) from None


def summarise(result: Dict[str, Any], ttft_ms: float, itl_ms: float) -> List[Dict[str, Any]]:
    rows = []
    truth = 1000.0 / itl_ms
    for level in result["sweep"]:
        metrics = level["metrics"]

        def med(name: str) -> float:
            return (metrics.get(name) or {}).get("median", float("nan"))
        rows.append({
            "concurrency": level["concurrency"], "completed": sum(run["completed"] for run in level["runs"]),
            "failed": sum(run["failed"] for run in level["runs"]), "ttft_ms": med("median_ttft_ms"),
            "ttft_err_ms": med("median_ttft_ms") - ttft_ms, "itl_ms": med("median_itl_ms"),
            "itl_err_ms": med("median_itl_ms") - itl_ms, "decode_tok_s": med("decode_tok_s"),
            "decode_err_pct": 100.0 * (med("decode_tok_s") / truth - 1), "p99_itl_ms": med("p99_itl_ms"),
            "tokens_per_chunk": med("tokens_per_chunk"),
        })
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--ttft-ms", type=float, default=30.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--levels", default="1,8,32", help="concurrency levels, one sweep")
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--requests", type=int, default=16, help="requests per repeat at each level")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if not PYTHON.exists() or not (SOURCE / "mock_server" / "app.py").exists():
        print("AIPerf's mock server is not set up under %s: see this script's docstring" % BUILD.relative_to(REPO), file=sys.stderr)
        return 1
    try:
        make_tokenizer()
        server = MockServer(args.ttft_ms, args.itl_ms, BUILD / "mock-server.log")
        try:
            server.wait_ready()
            started = time.monotonic()
            result = run_module({
                "url": server.url, "model": str(TOKENIZER), "endpoint": "chat", "metrics_url": "",
                "input_len": args.output_len + 16, "output_len": args.output_len, "num_requests": args.requests,
                "concurrency": [int(level) for level in args.levels.split(",")], "warmup_requests": 2,
                "repeats": args.repeats, "timeout": 120})
            wall = time.monotonic() - started
        finally:
            server.stop()
    except BenchError as exc:
        print("bench failed: %s" % exc, file=sys.stderr)
        return 1
    if result.get("failed"):
        print("vllm_benchmark failed: %s" % result.get("msg"), file=sys.stderr)
        return 1
    rows = summarise(result, args.ttft_ms, args.itl_ms)
    print(table(["streams", "completed", "failed", "median TTFT ms", "TTFT err ms", "median ITL ms", "ITL err ms",
                 "decode tok/s", "decode err %", "p99 ITL ms", "tok/chunk"],
                [[r["concurrency"], r["completed"], r["failed"], r["ttft_ms"], "%+.2f" % r["ttft_err_ms"], r["itl_ms"],
                  "%+.3f" % r["itl_err_ms"], r["decode_tok_s"], "%+.2f" % r["decode_err_pct"], r["p99_itl_ms"],
                  r["tokens_per_chunk"]] for r in rows]))
    print("configured: TTFT %g ms, ITL %g ms (%.1f tok/s per stream); one task, %.0f s; warnings:" % (
        args.ttft_ms, args.itl_ms, 1000.0 / args.itl_ms, wall))
    for warning in result.get("warnings", []):
        print("  - %s" % warning)
    print("load average: %s" % " ".join("%.2f" % v for v in os.getloadavg()))
    path = save_results("bench_external_server", {"rows": rows, "args": vars(args), "warnings": result.get("warnings", [])})
    if path:
        print("figures: %s" % path.relative_to(REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
