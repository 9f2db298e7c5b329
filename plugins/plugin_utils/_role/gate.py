# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A server across hosts is changed whole or not at all: the verdicts that read every node's step.

Each node runs the role's steps in the same play; after the reading, after the preflight and after the ready step, each
node reads what the others registered (``results``: node -> that step's registered result, None where it has none) and
which nodes are still in the run (``active``: the play batch's hosts that have not failed):

- ``reading``: the server is left alone only when every node reads "runs this configuration" (the head answers and
  generates, every rank runs); a node that reads anything else, or is not in the run, makes every node go on.
- ``preflight``: nothing stops on any node unless every node's preflight passed; the refusal names each node and why.
- ``ready``: a launch is kept only when every node's new rank is ready and held its check; otherwise every node undoes
  its own.

For a server of one host (no group, or a group of one) each verdict is the host's own.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

Results = t.Mapping[str, t.Optional[t.Mapping[str, t.Any]]]


def nodes(plan: t.Mapping[str, t.Any]) -> t.List[str]:
    """The nodes of the plan's server across hosts; [] for a server of one host."""
    group = plan.get("group") or {}
    return list(group.get("nodes") or []) if group.get("size", 1) > 1 else []


def _why(node: str, result: t.Optional[t.Mapping[str, t.Any]], active: t.Collection[str], step: str) -> str:
    if result is None and node not in active:
        return "%s is not in this run (left out by --limit or a serial batch, or it failed or was unreachable before the %s)" % (node, step)
    if result is None:
        return "%s has no %s" % (node, step)
    if result.get("unreachable"):
        return "%s was unreachable: %s" % (node, result.get("msg") or "")
    return "%s: %s" % (node, result.get("msg") or "failed")


def missing(plan: t.Mapping[str, t.Any], active: t.Collection[str]) -> t.List[str]:
    """The nodes of the server that are not in this run."""
    return [node for node in nodes(plan) if node not in active]


def reading(plan: t.Mapping[str, t.Any], own: t.Optional[t.Mapping[str, t.Any]], results: Results,
            active: t.Collection[str]) -> t.Dict[str, t.Any]:
    """Whether the server is left alone (``unchanged``), and why not, node by node (``nodes``)."""
    members = nodes(plan)
    if not members:
        unchanged = bool(own) and own.get("reason") == ""
        return {"failed": False, "unchanged": unchanged, "nodes": {}, "msg": "this host's server %s" % ("runs this configuration" if unchanged else "changes")}
    left_out = missing(plan, active)
    if left_out:
        return {"failed": True, "unchanged": False, "nodes": {},
                "msg": "server group %s is changed whole, but %s not in this run: nothing was stopped on any host; run the play on"
                       " every host of the group, in one batch (no --limit that splits it; restart_vllm.yml: vllm_restart_serial"
                       " a multiple of the group's size)" % (plan["group"]["name"], ", ".join(left_out) + (" is" if len(left_out) == 1 else " are"))}
    said = {}
    for node in members:
        result = results.get(node)
        if result is None or result.get("failed") or result.get("unreachable"):
            said[node] = _why(node, result, active, "reading")
        elif result.get("reason") != "":
            said[node] = str(result.get("reason") or "not read (a forced restart or a stop)")
    if said:
        return {"failed": False, "unchanged": False, "nodes": said,
                "msg": "server group %s changes on every host: %s" % (plan["group"]["name"], "; ".join("%s: %s" % item for item in said.items()))}
    return {"failed": False, "unchanged": True, "nodes": {}, "msg": "every host of server group %s runs this configuration" % plan["group"]["name"]}


def _refused(plan: t.Mapping[str, t.Any], results: Results, active: t.Collection[str], step: str) -> t.List[str]:
    host = plan.get("host")
    return [_why(node, results.get(node), active, step) for node in nodes(plan)
            if node != host and (results.get(node) is None or results[node].get("failed") or results[node].get("unreachable")
                                 or node not in active)]


def preflight(plan: t.Mapping[str, t.Any], results: Results, active: t.Collection[str]) -> t.Dict[str, t.Any]:
    """Whether every node may stop: failed, naming each node whose preflight (or lock) refused."""
    refused = _refused(plan, results, active, "preflight")
    if not refused:
        return {"failed": False, "msg": "every host of server group %s passed its preflight" % plan["group"]["name"] if nodes(plan) else "one host"}
    return {"failed": True, "refused": refused,
            "msg": "nothing was stopped on any host of server group %s: %s" % (plan["group"]["name"], "; ".join(refused))}


def ready(plan: t.Mapping[str, t.Any], results: Results, active: t.Collection[str]) -> t.Dict[str, t.Any]:
    """Whether every node's new rank is ready and held its check: failed, naming each node that is not (each undoes its own)."""
    failed = _refused(plan, results, active, "ready step")
    if not failed:
        return {"failed": False, "msg": "every host of server group %s is ready" % plan["group"]["name"] if nodes(plan) else "one host"}
    return {"failed": True, "refused": failed,
            "msg": "server group %s did not come up whole: %s" % (plan["group"]["name"], "; ".join(failed))}
