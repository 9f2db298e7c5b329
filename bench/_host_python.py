# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's Python for bench_restart_vllm.py: runs the real interpreter as a child, then logs one line per run.

bench_restart_vllm.py writes this file out with a shebang to the real interpreter (run with -S, standard library
only) and makes it the inventory's ansible_python_interpreter. Every module Ansible runs on a simulated host then
passes through here, and GPUOPS_BENCH_MODULE_LOG gets one JSON line per module execution: the module's name (from
the AnsiballZ file name, or from the payload on stdin when pipelining), the child's own CPU seconds from wait4()'s
rusage, and this wrapper's own CPU seconds, so that the bench can tell the host's CPU from the controller's.
"""

import json
import os
import re
import resource
import sys
import tempfile
import time

URL_PORT = re.compile(rb'"url": "https?://[^"/]*:([0-9]+)')
NAME = re.compile(rb"(?:AnsiballZ_|ansible_collections[./]gpuops[./]fleet[./]plugins[./]modules[./]|ansible[./]modules[./])([A-Za-z0-9_]+)")


def main():
    real = os.environ.get("GPUOPS_BENCH_REAL_PYTHON") or sys.executable
    args = sys.argv[1:]
    found = NAME.search(" ".join(args).encode())
    stdin_file = None
    port = None
    if not found and not os.isatty(0):
        # pipelining: the module arrives on stdin; keep a copy to read its name and hand it on unchanged
        payload = sys.stdin.buffer.read()
        found = NAME.search(payload)
        # the module's url option, when it has one (vllm_ready): which simulated host's server this run is for
        port = URL_PORT.search(payload)
        stdin_file = tempfile.TemporaryFile()
        stdin_file.write(payload)
        stdin_file.seek(0)
    started = time.time()
    pid = os.fork()
    if pid == 0:
        if stdin_file is not None:
            os.dup2(stdin_file.fileno(), 0)
        os.execv(real, [real] + args)
    status, usage = os.wait4(pid, 0)[1:]
    own = resource.getrusage(resource.RUSAGE_SELF)
    log = os.environ.get("GPUOPS_BENCH_MODULE_LOG")
    if log:
        line = json.dumps({"module": found.group(1).decode() if found else "?", "pid": pid,
                           "cpu_s": usage.ru_utime + usage.ru_stime, "start": started, "end": time.time(),
                           "port": int(port.group(1)) if port else None, "wrapper_cpu_s": own.ru_utime + own.ru_stime})
        with open(log, "a", encoding="utf-8") as out:
            out.write(line + "\n")
    sys.exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


if __name__ == "__main__":
    main()
