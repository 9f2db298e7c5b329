# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_report): the fleet report's reading (on each host) and its files (on the controller). It may import
# the flat files of module_utils (_deps, _secrets), _gpu, _host and _http, and the read-only helpers of _reclaim (the
# owner rule) and _server (records, /health); never a module or a plugin.

"""The fleet report's files, from model.build_report(): index.html, gpus.csv, holders.csv, report.json, summary.md.

The page is one self-contained file: inline style, one short inline script (sorting the host table; the page is whole
without it, and its filters are CSS only), no fetch of anything, a Content-Security-Policy that allows nothing else.
Every value from a host is escaped, so a process named ``<script>`` shows as text.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import csv
import io
import json
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._html import csp, document, esc
from ansible_collections.gpuops.fleet.plugins.module_utils._report.model import CONTAINER_KEYS

FILES = ("index.html", "gpus.csv", "holders.csv", "report.json", "summary.md")

NUMBERS = (
    ("hosts_answered", "hosts answered"), ("hosts_unreachable", "hosts unreachable"), ("hosts_failed", "hosts failed"),
    ("gpus_free", "GPUs free"), ("gpus_held", "GPUs held"), ("gpus_unhealthy", "GPUs unhealthy"),
    ("orphans", "orphan holders"), ("problems", "problems"),
)

_STYLE = """
body{font:13px/1.35 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 16px 40px;color:#1d1d1f;background:#fff}
h1{font-size:20px;margin:14px 0 2px}h2{font-size:16px;margin:18px 0 6px}h3{font-size:14px;margin:0 0 4px}
.meta{color:#666;margin:0 0 8px}
.numbers{display:flex;flex-wrap:wrap;gap:8px;margin:0;padding:0}
.numbers div{border:1px solid #ccd;border-radius:6px;padding:6px 10px;min-width:110px}
.numbers dt{color:#555;font-size:12px}.numbers dd{margin:0;font-size:20px;font-weight:600}
.numbers .bad dd{color:#b00020}
#problems ul{margin:0;padding-left:18px}#problems li{margin:2px 0}
.k{display:inline-block;min-width:78px;font-weight:600;font-size:11px;text-transform:uppercase;color:#b00020}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #e4e4ea;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f7;font-weight:600}
#host-table th button{font:inherit;background:none;border:0;padding:0;cursor:pointer}
.host{border:1px solid #ccd;border-radius:6px;padding:8px 10px;margin:10px 0;content-visibility:auto;contain-intrinsic-size:auto 520px}
table.gpus{table-layout:fixed}table.gpus col.c1{width:9%}table.gpus col.c2{width:17%}table.gpus col.c3,table.gpus col.c4{width:6%}
table.gpus col.c5{width:9%}table.gpus col.c6{width:15%}
.host.has-problems{border-color:#d9534f}
.badge{display:inline-block;border-radius:9px;padding:0 7px;font-size:11px;font-weight:600;background:#e8e8ee}
.s-ok{background:#dff3e4}.s-unreachable,.s-failed,.s-no-result{background:#f8d7da}
.bar{width:140px;height:9px;background:#e8e8ee;border-radius:4px;overflow:hidden}.bar span{display:block;height:100%;background:#4a6fd8}
tr.state-free .bar span{background:#3a9d5d}tr.state-lost td,tr.state-unhealthy td{background:#fdecee}
ul.flags,ul.holders{margin:0;padding-left:16px}.flags li{color:#b00020}.flags li.throttle{color:#8a5a00}
.o-orphan{color:#b00020;font-weight:600}.o-other-namespace,.o-unverified,.o-unmanaged{color:#8a5a00;font-weight:600}.o-server{color:#1e6b35}
.cmd{font:11px ui-monospace,Menlo,Consolas,monospace;color:#555;word-break:break-all}
.ctr{color:#2f4a8a;word-break:break-all}
.na{color:#999}.reason{color:#b00020}
.filters{margin:6px 0}.filters label{margin-right:12px}
#f-problems:checked~#hosts .host:not(.has-problems),#f-problems:checked~#overview tr.h:not(.has-problems){display:none}
#f-free:checked~#hosts .host:not(.has-free),#f-free:checked~#overview tr.h:not(.has-free){display:none}
#f-containers:checked~#hosts .host:not(.has-containers),#f-containers:checked~#overview tr.h:not(.has-containers),
#f-containers:checked~#hosts tr.gpu:not(.in-container){display:none}
#f-all,#f-problems,#f-free,#f-containers{position:absolute;opacity:0}
#f-all:checked~.filters label[for=f-all],#f-problems:checked~.filters label[for=f-problems],
#f-free:checked~.filters label[for=f-free],#f-containers:checked~.filters label[for=f-containers]{font-weight:700;text-decoration:underline}
"""

# Sorting of the host table by a click on its headers; it also says, in the DOM, that it ran without error.
_SCRIPT = """(function(){var d=document.documentElement;window.addEventListener('error',function(e){d.setAttribute('data-script-error',String(e.message));});
var tb=document.querySelector('#host-table tbody');document.querySelectorAll('#host-table th[data-key]').forEach(function(th){
var b=document.createElement('button');b.textContent=th.textContent;th.textContent='';th.appendChild(b);b.addEventListener('click',function(){
var k=th.getAttribute('data-key'),n=th.hasAttribute('data-num'),up=th.getAttribute('aria-sort')!=='ascending';
var rows=Array.prototype.slice.call(tb.rows);rows.sort(function(x,y){var a=x.getAttribute('data-'+k),c=y.getAttribute('data-'+k);
var r=n?(parseFloat(a)-parseFloat(c)):a.localeCompare(c);return up?r:-r;});rows.forEach(function(r){tb.appendChild(r);});
document.querySelectorAll('#host-table th').forEach(function(h){h.removeAttribute('aria-sort');});
th.setAttribute('aria-sort',up?'ascending':'descending');});});
void document.body.offsetHeight;d.setAttribute('data-render-ms',performance.now().toFixed(1));d.setAttribute('data-script','ok');})();"""

CSP = csp(_SCRIPT)


def _na(value: t.Any, fmt: str = "{}") -> str:
    if value is None:
        return '<span class="na">N/A</span>'
    return esc(fmt.format(value))


def _mib(value: t.Any) -> str:
    return "N/A" if value is None else "{:,}".format(int(value))


def _slug(value: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in value)


def _container_html(container: t.Optional[t.Mapping[str, t.Any]]) -> str:
    """The holder's container: runtime, name (else the id's first 12 digits), image, and the pod's UID for Kubernetes."""
    if not container:
        return ""
    words = ["%s container %s" % (container["runtime"] or "unknown", container["name"] or (container["id"] or "")[:12] or "?")]
    if container["image"]:
        words.append("image %s" % container["image"])
    if container["pod_uid"]:
        words.append("pod %s" % container["pod_uid"])
    return '<div class="ctr" data-runtime="%s" title="%s">%s</div>' % (
        esc(container["runtime"] or ""), esc("container id %s" % (container["id"] or "unknown")), esc(", ".join(words)))


def _in_container(gpu: t.Mapping[str, t.Any]) -> bool:
    return any(holder["container"] for holder in gpu["holders"])


def _holder_html(holder: t.Mapping[str, t.Any]) -> str:
    owner = holder["owner"] or "unknown"
    if not holder["visible"]:
        who = "PID %s (another PID namespace%s)" % (holder["pid"], ", unverified" if owner == "unverified" else "")
        parts = ['<b>?</b> %s' % esc(who)]
    else:
        parts = ['<b>%s</b> PID %s' % (esc(holder["name"] or "?"), esc(holder["pid"])), "user %s" % esc(holder["username"] or "?")]
    parts.append("%s MiB" % esc(_mib(holder["used_memory_mib"])))
    tag = owner + (" " + holder["server"] if holder["server"] else "")
    why = ' title="%s"' % esc(holder["why"]) if holder["why"] and owner != "server" else ""  # a server's own worker needs no why
    parts.append('<span class="o-%s"%s>%s</span>' % (_slug(owner), why, esc(tag)))
    if holder["launcher_pid"] is not None:
        parts.append("launcher %s (PID %s)" % (esc(holder["launcher"]), esc(holder["launcher_pid"])))
    elif owner == "orphan":
        parts.append("launcher gone")
    cmd = '<div class="cmd">%s</div>' % esc(holder["cmdline"]) if holder["cmdline"] and holder["cmdline"] != holder["name"] else ""
    return '<li class="holder" data-pid="%s" data-owner="%s">%s%s%s</li>' % (
        esc(holder["pid"]), esc(owner), " · ".join(parts), _container_html(holder["container"]), cmd)


def _gpu_row(gpu: t.Mapping[str, t.Any]) -> str:
    used, total = gpu["memory_used_mib"], gpu["memory_total_mib"]
    pct = min(100.0, max(0.0, 100.0 * used / total)) if used is not None and total else 0.0
    flags = "".join("<li>%s</li>" % esc(flag) for flag in gpu["health"])
    flags += "".join('<li class="throttle">%s</li>' % esc(flag) for flag in gpu["throttle"])
    health = '<ul class="flags">%s</ul>' % flags if flags else "ok"
    if not gpu["processes_read"]:
        holders = '<span class="na">not read</span>'
    elif gpu["holders"]:
        holders = '<ul class="holders">%s</ul>' % "".join(_holder_html(h) for h in gpu["holders"])
    else:
        holders = "none"
    if gpu["unaccounted_mib"] is not None:
        holders += ' <span class="reason">%s MiB held by no process</span>' % esc(_mib(gpu["unaccounted_mib"]))
    limit = "N/A" if gpu["power_limit_w"] is None else "%.0f" % gpu["power_limit_w"]
    power = "N/A" if gpu["power_draw_w"] is None else "%.0f / %s W" % (gpu["power_draw_w"], limit)
    return (
        '<tr class="gpu state-%s%s" data-gpu="%s" data-state="%s"><td>%s<br><small>%s</small></td>'
        '<td><div class="bar"><span style="width:%.1f%%"></span></div>%s / %s MiB</td><td>%s</td><td>%s</td><td>%s</td>'
        '<td>%s</td><td>%s</td></tr>'
    ) % (esc(gpu["state"]), " in-container" if _in_container(gpu) else "", esc(gpu["index"]), esc(gpu["state"]), _na(gpu["index"]),
         esc(gpu["state"]), pct,
         esc(_mib(used)), esc(_mib(total)), _na(gpu["utilization_gpu_pct"], "{} %"), _na(gpu["temperature_c"], "{} °C"),
         esc(power), health, holders)


def _servers_html(host: t.Mapping[str, t.Any]) -> str:
    if not host["servers"]:
        return '<p class="servers">No server managed by the role here.</p>' if host["status"] == "ok" else ""
    rows = []
    for server in host["servers"]:
        box = server.get("container")
        if server["unit"]:
            state = "systemd unit %s" % server["unit"]
        elif box:
            state = "%s in %s container %s" % ("running" if server["running"] else "NOT RUNNING", box["runtime"], box["name"] or (box["id"] or "")[:12])
        elif server["running"]:
            state = "running"
        else:
            state = "NOT RUNNING" if server["running"] is False else "unknown"
        state += _rank_words(server.get("group"))
        rows.append('<tr class="server" data-server="%s"><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>' % (
            esc(server["name"]), esc(server["name"]), _na(server["model"]), _na((server["config_hash"] or "")[:12] or None),
            _na(server["pid"]), esc(state), _na(server["health"]), _na(server["up_since"]),
            _na(",".join(str(g) for g in server["gpus"]) if server["gpus"] else None)))
        if server["error"]:
            rows.append('<tr><td colspan="8" class="reason">%s</td></tr>' % esc(server["error"]))
    return ('<table class="servers"><thead><tr><th>Managed server</th><th>Model</th><th>Config hash</th><th>PID</th><th>State</th>'
            '<th>/health</th><th>Up since</th><th>GPUs</th></tr></thead><tbody>%s</tbody></table>' % "".join(rows))


def _rank_words(group: t.Optional[t.Mapping[str, t.Any]]) -> str:
    """A rank of a server across hosts, in words: ', rank R of N of GROUP' (the head, or headless, its /health the head's)."""
    if not group:
        return ""
    role = "the head" if group.get("rank") == 0 else "headless; /health is its head's, %s" % (group.get("head") or "?")
    return ", rank %s of %s of %s (%s)" % (_na_text(group.get("rank")), _na_text(group.get("size")), group["name"], role)


def _na_text(value: t.Any) -> str:
    return "?" if value is None else str(value)


def _groups_html(groups: t.Sequence[t.Mapping[str, t.Any]]) -> str:
    """One row per server across hosts, its hosts by rank: whether it is whole."""
    if not groups:
        return ""
    rows = []
    for group in groups:
        ranks = ", ".join('<span class="rank" data-rank="%s" data-host="%s">%s: %s</span>' % (
            esc(_na_text(r["rank"])), esc(r["host"]), esc(_na_text(r["rank"])),
            esc("%s (PID %s, %s)" % (r["host"], _na_text(r["pid"]), "running" if r["running"] else "NOT RUNNING"))) for r in group["ranks"])
        rows.append('<tr class="group" data-group="%s" data-whole="%s"><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>' % (
            esc(group["name"]), "yes" if group["whole"] else "no", esc(group["name"]), _na(group["model"]),
            esc("%d of %s" % (len(group["ranks"]), _na_text(group["size"]))), ranks,
            "whole" if group["whole"] else "NOT WHOLE (a rank missing or down, or its head unhealthy)"))
    return ('<section id="groups"><h2>Servers across hosts (%d)</h2><table id="group-table"><thead><tr><th>Server group</th><th>Model</th>'
            '<th>Ranks seen</th><th>Rank: host</th><th>State</th></tr></thead><tbody>%s</tbody></table></section>' % (len(groups), "".join(rows)))


def _filter_classes(host: t.Mapping[str, t.Any]) -> t.List[str]:
    """The classes the page's filters select a host by: has-problems, has-free, has-containers."""
    return ((["has-problems"] if host["problems"] else []) + (["has-free"] if host["free_gpus"] else [])
            + (["has-containers"] if any(_in_container(gpu) for gpu in host["gpus"]) else []))


def _host_block(host: t.Mapping[str, t.Any]) -> str:
    classes = ["host"] + _filter_classes(host)
    status = host["status"]
    head = '<h3>%s <span class="badge s-%s">%s</span>' % (esc(host["name"]), _slug(status), esc(status))
    if host["driver"]:
        head += ' <small>driver %s, CUDA %s, %d GPU(s), free: %s</small>' % (
            esc(host["driver"]["driver_version"] or "N/A"), esc(host["driver"]["cuda_driver_version"] or "N/A"), len(host["gpus"]),
            esc(", ".join(str(i) for i in host["free_gpus"]) or "none"))
    head += "</h3>"
    body = ['<p class="reason">%s</p>' % esc(host["reason"])] if host["reason"] else []
    body.append(_servers_html(host))
    if host["gpus"]:
        body.append('<table class="gpus"><colgroup><col class="c1"><col class="c2"><col class="c3"><col class="c4"><col class="c5">'
                    '<col class="c6"><col></colgroup><thead><tr><th>GPU</th><th>Memory used / total</th><th>Util</th><th>Temp</th><th>Power</th>'
                    '<th>Health</th><th>Holders</th></tr></thead><tbody>%s</tbody></table>' % "".join(_gpu_row(g) for g in host["gpus"]))
    return '<section class="%s" id="host-%s" data-host="%s" data-status="%s" data-problems="%d" data-free="%d">%s%s</section>' % (
        " ".join(classes), esc(_slug(host["name"])), esc(host["name"]), esc(status), host["problems"], len(host["free_gpus"]),
        head, "".join(body))


def _overview_row(host: t.Mapping[str, t.Any]) -> str:
    gpus = host["gpus"]
    used = int(sum(g["memory_used_mib"] or 0 for g in gpus))
    held = sum(1 for g in gpus if g["state"] == "held")
    bad = sum(1 for g in gpus if g["unhealthy"])
    servers = ", ".join("%s (%s)" % (s["name"], s["health"] or ("running" if s["running"] else "down")) for s in host["servers"]) or "-"
    classes = ["h"] + _filter_classes(host)
    return ('<tr class="%s" data-name="%s" data-status="%s" data-problems="%d" data-free="%d" data-held="%d" data-unhealthy="%d" data-used="%d">'
            '<td><a href="#host-%s">%s</a></td><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td></tr>') % (
        " ".join(classes), esc(host["name"]), esc(host["status"]), host["problems"], len(host["free_gpus"]), held, bad, used,
        esc(_slug(host["name"])), esc(host["name"]), esc(host["status"]), host["problems"], len(host["free_gpus"]), held, bad,
        esc(_mib(used)), esc(servers))


def render_html(report: t.Mapping[str, t.Any]) -> str:
    summary = report["summary"]
    numbers = "".join('<div data-key="%s"%s><dt>%s</dt><dd>%d</dd></div>' % (
        key, ' class="bad"' if key in ("hosts_unreachable", "hosts_failed", "gpus_unhealthy", "orphans", "problems") and summary[key] else "",
        esc(text), summary[key]) for key, text in NUMBERS)
    numbers += '<div data-key="memory"><dt>memory used</dt><dd>%s / %s MiB</dd></div>' % (
        esc(_mib(summary["memory_used_mib"])), esc(_mib(summary["memory_total_mib"])))
    if report["problems"]:
        problems = "<ul>%s</ul>" % "".join(
            '<li class="problem" data-kind="%s" data-host="%s" data-gpu="%s"><span class="k">%s</span> <a href="#host-%s">%s</a>: %s</li>' % (
                esc(p["kind"]), esc(p["host"]), esc("" if p["gpu"] is None else p["gpu"]), esc(p["kind"]), esc(_slug(p["host"])),
                esc(p["host"]), esc(p["text"])) for p in report["problems"])
    else:
        problems = '<p class="none">No problems.</p>'
    head_cells = "".join('<th data-key="%s"%s>%s</th>' % (key, " data-num" if num else "", text) for key, num, text in (
        ("name", False, "Host"), ("status", False, "Status"), ("problems", True, "Problems"), ("free", True, "Free"), ("held", True, "Held"),
        ("unhealthy", True, "Unhealthy"), ("used", True, "MiB used"))) + "<th>Managed servers</th>"
    return document(report["title"], _STYLE, "".join((
        '<h1>%s</h1><p class="meta">generated %s; a GPU is free when it has no holder and at most %s MiB in use</p>' % (
            esc(report["title"]), esc(report["generated_at"] or "N/A"), esc(_mib(report["threshold_mib"]))),
        '<section id="numbers"><h2>The fleet in numbers</h2><dl class="numbers">%s</dl></section>' % numbers,
        '<section id="problems"><h2>Problems (%d)</h2>%s</section>' % (len(report["problems"]), problems),
        _groups_html(report.get("groups") or []),
        '<input type="radio" name="show" id="f-all" checked><input type="radio" name="show" id="f-problems">'
        '<input type="radio" name="show" id="f-free"><input type="radio" name="show" id="f-containers">',
        '<p class="filters">Show: <label for="f-all">all hosts</label><label for="f-problems">hosts with problems</label>'
        '<label for="f-free">hosts with free GPUs</label><label for="f-containers">GPUs held by containers</label></p>',
        '<section id="overview"><h2>Hosts (%d)</h2><table id="host-table"><thead><tr>%s</tr></thead><tbody>%s</tbody></table></section>' % (
            len(report["hosts"]), head_cells, "".join(_overview_row(h) for h in report["hosts"])),
        '<section id="hosts">%s</section>' % "".join(_host_block(h) for h in report["hosts"]),
    )), _SCRIPT)


def cell(value: t.Any) -> t.Any:
    """A CSV cell; text that a spreadsheet would take for a formula gets a leading apostrophe."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "" if value is None else value


def _csv(header: t.Sequence[str], rows: t.Iterable[t.Sequence[t.Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([cell(value) for value in row])
    return out.getvalue()


GPU_COLUMNS = ("host", "host_status", "gpu", "name", "uuid", "state", "unhealthy", "health", "throttle", "memory_used_mib", "memory_total_mib",
               "utilization_gpu_pct", "temperature_c", "power_draw_w", "power_limit_w", "holders", "unaccounted_mib", "error")
HOLDER_COLUMNS = ("host", "gpu", "pid", "name", "username", "owner", "server", "launcher_pid", "launcher", "used_memory_mib", "visible", "cmdline",
                  "container_runtime", "container_id", "container_name", "container_image", "container_pod_uid")


def render_gpus_csv(report: t.Mapping[str, t.Any]) -> str:
    return _csv(GPU_COLUMNS, (
        (host["name"], host["status"], gpu["index"], gpu["name"], gpu["uuid"], gpu["state"], gpu["unhealthy"], "; ".join(gpu["health"]),
         "; ".join(gpu["throttle"]), gpu["memory_used_mib"], gpu["memory_total_mib"], gpu["utilization_gpu_pct"], gpu["temperature_c"],
         gpu["power_draw_w"], gpu["power_limit_w"], len(gpu["holders"]), gpu["unaccounted_mib"], gpu["error"])
        for host in report["hosts"] for gpu in host["gpus"]))


def render_holders_csv(report: t.Mapping[str, t.Any]) -> str:
    return _csv(HOLDER_COLUMNS, (
        (host["name"], gpu["index"], h["pid"], h["name"], h["username"], h["owner"], h["server"], h["launcher_pid"], h["launcher"],
         h["used_memory_mib"], h["visible"], h["cmdline"]) + tuple((h["container"] or {}).get(key) for key in CONTAINER_KEYS)
        for host in report["hosts"] for gpu in host["gpus"] for h in gpu["holders"]))


def render_summary_md(report: t.Mapping[str, t.Any]) -> str:
    s = report["summary"]
    lines = [
        "# %s (%s)" % (report["title"], report["generated_at"] or "N/A"),
        "",
        "- hosts: %d answered, %d unreachable, %d failed (of %d)" % (s["hosts_answered"], s["hosts_unreachable"], s["hosts_failed"], s["hosts"]),
        "- GPUs: %d free, %d held, %d unhealthy (%d lost) of %d" % (s["gpus_free"], s["gpus_held"], s["gpus_unhealthy"], s["gpus_lost"], s["gpus"]),
        "- memory used: %s of %s MiB; %d holders, %d orphans" % (_mib(s["memory_used_mib"]), _mib(s["memory_total_mib"]), s["holders"], s["orphans"]),
        "",
        "## Problems (%d)" % len(report["problems"]),
        "",
    ]
    lines += ["- **%s** `%s`: %s" % (p["kind"], p["host"], p["text"].replace("`", "'")) for p in report["problems"]] or ["None."]
    groups = ["`%s`: %s - %s" % (g["name"], ", ".join("rank %s on `%s`" % (_na_text(r["rank"]), r["host"]) for r in g["ranks"]),
                                 "whole" if g["whole"] else "NOT WHOLE") for g in report.get("groups") or []]
    if groups:
        lines += ["", "## Servers across hosts", ""] + ["- " + entry for entry in groups]
    free = ["`%s`: %s" % (h["name"], ",".join(str(i) for i in h["free_gpus"])) for h in report["hosts"] if h["free_gpus"]]
    lines += ["", "## Free GPUs", ""] + (["- " + entry for entry in free] or ["None."])
    return "\n".join(lines) + "\n"


def render_all(report: t.Mapping[str, t.Any]) -> t.Dict[str, str]:
    """File name -> content, for every file of the report."""
    return {
        "index.html": render_html(report),
        "gpus.csv": render_gpus_csv(report),
        "holders.csv": render_holders_csv(report),
        "report.json": json.dumps(report, indent=1, sort_keys=True) + "\n",
        "summary.md": render_summary_md(report),
    }
