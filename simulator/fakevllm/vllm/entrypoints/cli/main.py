# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The `vllm` console script: `vllm serve MODEL --tensor-parallel-size N ...` and `vllm --version`."""

from __future__ import annotations

import sys
from typing import List, Optional

from vllm import __version__
from vllm._args import parse_server_args
from vllm._server import run_server

USAGE = "usage: vllm [-v] {serve} ..."


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-v"], ["--version"]):
        print(__version__)
        return 0
    if args[:1] != ["serve"]:
        print(USAGE, file=sys.stderr)
        return 2
    return run_server(parse_server_args(args[1:], "vllm serve", positional_model=True))
