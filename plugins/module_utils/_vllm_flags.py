# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What a vLLM command line says about how its engine runs (on a Ray cluster; one rank of a server across hosts), read
by the plan (the new server's) and the takeover (the running one's).

A flat file of module_utils: it imports no package of this collection.
Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

BACKEND_FLAG = "--distributed-executor-backend"


def runs_on_ray(argv: t.Sequence[t.Any]) -> bool:
    """Whether the engine runs on a Ray cluster: ``--distributed-executor-backend ray`` (or ``=ray``)."""
    words = [str(word) for word in argv]
    for index, word in enumerate(words):
        if word == BACKEND_FLAG and words[index + 1:index + 2] == ["ray"]:
            return True
        if word == BACKEND_FLAG + "=ray":
            return True
    return False


def _value(words: t.Sequence[str], flag: str) -> t.Optional[str]:
    """The value of ``flag`` (``--flag V`` or ``--flag=V``; the last one given wins, as argparse does), or None."""
    found = None
    for index, word in enumerate(words):
        if word == flag and index + 1 < len(words):
            found = words[index + 1]
        elif word.startswith(flag + "="):
            found = word[len(flag) + 1:]
    return found


def _number(words: t.Sequence[str], flags: t.Sequence[str]) -> t.Optional[int]:
    for flag in flags:
        value = _value(words, flag)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def spans_hosts(argv: t.Sequence[t.Any]) -> t.Optional[str]:
    """How a vLLM command line makes its server one rank of a server across hosts, in its own flags (``--nnodes 2``,
    ``--headless``, data parallel with fewer local ranks than ranks), or None for a server of one host."""
    words = [str(word) for word in argv]
    nodes = _number(words, ("--nnodes",))
    if nodes is not None and nodes > 1:
        rank = _value(words, "--node-rank")
        return "--nnodes %d%s" % (nodes, ", --node-rank %s" % rank if rank is not None else "")
    size = _number(words, ("--data-parallel-size", "-dp"))
    local = _number(words, ("--data-parallel-size-local", "-dpl"))
    if size is not None and local is not None and size > local:
        return "--data-parallel-size %d, --data-parallel-size-local %d" % (size, local)
    if "--headless" in words:
        return "--headless"
    return None


def node_count(argv: t.Sequence[t.Any]) -> t.Optional[int]:
    """How many hosts a server across hosts spans, by its flags (``--nnodes``, or data parallel's size over its local
    size); None when the flags do not say (``--headless`` alone) or for a server of one host."""
    words = [str(word) for word in argv]
    nodes = _number(words, ("--nnodes",))
    if nodes is not None and nodes > 1:
        return nodes
    size = _number(words, ("--data-parallel-size", "-dp"))
    local = _number(words, ("--data-parallel-size-local", "-dpl"))
    if size is not None and local and size > local and size % local == 0:
        return size // local
    return None


def head_address(argv: t.Sequence[t.Any]) -> t.Optional[str]:
    """The address a rank of a server across hosts joins its head at (``--master-addr``, else
    ``--data-parallel-address``), None when it names none."""
    words = [str(word) for word in argv]
    return _value(words, "--master-addr") or _value(words, "--data-parallel-address") or _value(words, "-dpa")


def head_port(argv: t.Sequence[t.Any]) -> t.Optional[int]:
    """The port a rank of a server across hosts joins its head on (``--master-port``, else ``--data-parallel-rpc-port``),
    None when it names none."""
    return _number([str(word) for word in argv], ("--master-port", "--data-parallel-rpc-port", "-dpp"))


def download_dir(argv: t.Sequence[t.Any]) -> t.Optional[str]:
    """Where the server downloads its weights when its command line says: ``--download-dir D`` (or ``=D``); None when
    it does not (then the Hugging Face cache, HF_HOME or HF_HUB_CACHE)."""
    return _value([str(word) for word in argv], "--download-dir")
