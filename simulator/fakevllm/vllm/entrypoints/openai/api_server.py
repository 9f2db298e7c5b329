# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`python3 -m vllm.entrypoints.openai.api_server --model M --tensor-parallel-size N ...`"""

from __future__ import annotations

import sys
from typing import List, Optional

from vllm._args import parse_server_args
from vllm._server import run_server


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_server_args(sys.argv[1:] if argv is None else argv, "vllm.entrypoints.openai.api_server",
                             positional_model=False)
    return run_server(args)


if __name__ == "__main__":
    sys.exit(main())
