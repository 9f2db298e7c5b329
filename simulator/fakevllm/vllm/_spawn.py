# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Start a function in a fresh interpreter exactly as multiprocessing's spawn start method does.

Real vLLM starts its workers with the spawn method, so until a worker sets its `VLLM::Worker_TP<i>` title its
command line is `python3 -c "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=N,
pipe_handle=M)" --multiprocessing-fork`. This module runs the real `spawn_main` with that command line: the
preparation data and the pickled process object go through a pipe, as multiprocessing sends them, but the
child is a subprocess.Popen (so the Supervisor watches it like any other child) and no resource tracker
process is started (the tracker descriptor is /dev/null; the workers register no resource).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from multiprocessing import context as mp_context
from multiprocessing import reduction
from multiprocessing import spawn as mp_spawn
from typing import Any, Callable, Dict, Tuple

from vllm import _simhost


def start_spawned(target: Callable[..., Any], args: Tuple[Any, ...], name: str) -> "subprocess.Popen[bytes]":
    """Run target(*args) in a child started by `spawn_main`, its command line exactly multiprocessing's."""
    process = multiprocessing.get_context("spawn").Process(target=target, args=args, name=name)
    preparation: Dict[str, Any] = {"name": name, "authkey": bytes(process.authkey), "sys_path": list(sys.path),
                                   "dir": os.getcwd()}
    read_end, write_end = os.pipe()
    tracker = os.open(os.devnull, os.O_WRONLY)
    try:
        with open(write_end, "wb", closefd=True) as pipe:
            mp_context.set_spawning_popen(process)  # what lets the process object (and its authkey) be pickled
            try:
                reduction.dump(preparation, pipe)
                reduction.dump(process, pipe)
            finally:
                mp_context.set_spawning_popen(None)
        argv = mp_spawn.get_command_line(tracker_fd=tracker, pipe_handle=read_end)
        return subprocess.Popen(  # pylint: disable=consider-using-with  # reaped by the Supervisor
            argv, env=_simhost.child_env(), stdin=subprocess.DEVNULL, pass_fds=(tracker, read_end))
    finally:
        os.close(read_end)
        os.close(tracker)
