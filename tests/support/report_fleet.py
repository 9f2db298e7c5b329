# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Generated fleet facts for the report's size test and bench (no ansible, no simulator), and a headless browser.

synthetic_results(hosts, gpus, holders): (host, registered gpu_report_facts result) pairs shaped like the module's
output, every GPU held by `holders` processes of a role-managed server. chromium(): Debian's chromium, headless;
dump_dom(): the DOM it rendered from a page, as a small tree (Dom, Node).
"""

from __future__ import annotations

import html.parser
import shutil
import subprocess
import tempfile
import time
import typing as t
from pathlib import Path

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-extensions", "--disable-dev-shm-usage")


def synthetic_results(hosts: int = 64, gpus: int = 8, holders: int = 4) -> t.List[t.Tuple[str, t.Dict[str, t.Any]]]:
    results = []
    for h in range(hosts):
        server_pid = 100000 + h * 100
        facts_gpus, owners = [], []
        for g in range(gpus):
            procs = []
            for k in range(holders):
                pid = server_pid + 1 + g * holders + k
                procs.append({"pid": pid, "name": "VLLM::Worker_TP%d" % g, "cmdline": ["VLLM::Worker_TP%d" % g], "username": "vllm",
                              "state": "sleeping", "ppid": server_pid, "create_time": 1764470000.0, "used_memory_mib": 20000 + k,
                              "type": "compute", "visible": True, "unverified": False})
                owners.append({"pid": pid, "kind": "server", "server": "vllm-8000", "launcher_pid": server_pid,
                               "launcher": "python3 -m vllm.entrypoints.openai.api_server --model zai-org/GLM-5-GGUF --tensor-parallel-size 8",
                               "why": "the owner, PID %d, or one of its descendants" % server_pid})
            facts_gpus.append({
                "index": g, "uuid": "GPU-%08x-0000-4000-8000-%012x" % (h, g), "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                "pci_bus_id": "00000000:%02X:00.0" % (0x1B + g), "memory_total_mib": 97887, "memory_used_mib": 80006 + 4 * 0,
                "memory_reserved_mib": 512, "memory_free_mib": 17369, "utilization_gpu_pct": 97, "utilization_memory_pct": 45,
                "temperature_c": 62, "power_draw_w": 310.0, "power_limit_w": 600.0, "persistence_mode": True, "mig_mode": False,
                "ecc_mode": True, "ecc_uncorrected_volatile": 0,
                "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
                "retired_pages": None, "clocks_event_reasons": [], "performance_state": "P0", "processes": procs, "error": None,
            })
        results.append(("gpu-node-%02d" % (h + 1), {
            "changed": False,
            "ansible_facts": {"gpus": facts_gpus, "gpu_driver": {"driver_version": "580.95.05", "cuda_driver_version": "13.0",
                                                                 "nvml_version": "13.580.95.05", "count": gpus, "source": "nvml"}},
            "owners": owners,
            "servers": [{"name": "vllm-8000", "pid": server_pid, "create_time": 1764470000.0, "running": True, "model": "zai-org/GLM-5-GGUF",
                         "port": 8000, "gpus": list(range(gpus)), "config_hash": "ab" * 32, "launched_at": 1764470000.0,
                         "argv": ["vllm", "serve", "zai-org/GLM-5-GGUF"], "health": "HTTP 200", "healthy": True, "error": None, "unit": None}],
        }))
    return results


def chromium_binary() -> t.Optional[str]:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(page: Path, *args: str, timeout: int = 120) -> t.Tuple[subprocess.CompletedProcess, float]:
    """Run headless chromium on a file:// page with a new, empty profile; (completed process, wall seconds)."""
    binary = chromium_binary()
    if binary is None:
        raise AssertionError("chromium is not installed: `make integration` installs Debian's chromium")
    with tempfile.TemporaryDirectory(prefix="gpuops-chromium-") as profile:
        argv = [binary, *CHROMIUM_FLAGS, "--user-data-dir=%s" % profile, *args, page.resolve().as_uri()]
        start = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                              start_new_session=True)
        return proc, time.monotonic() - start


class Node:
    def __init__(self, tag: str, attrs: t.Dict[str, t.Optional[str]], parent: t.Optional["Node"]) -> None:
        self.tag, self.attrs, self.parent, self.children, self.parts = tag, attrs, parent, [], []

    def text(self) -> str:
        return " ".join("".join(self.parts_all()).split())

    def parts_all(self) -> t.Iterator[str]:
        for part in self.parts:
            yield from ([part] if isinstance(part, str) else part.parts_all())

    def iter(self) -> t.Iterator["Node"]:
        for child in self.children:
            yield child
            yield from child.iter()

    def find_all(self, tag: str, **attrs: str) -> t.List["Node"]:
        def ok(node: "Node") -> bool:
            if node.tag != tag:
                return False
            for key, value in attrs.items():
                key = key.rstrip("_").replace("_", "-")
                have = node.attrs.get(key)
                if key == "class" and value not in (have or "").split() or key != "class" and have != value:
                    return False
            return True
        return [node for node in self.iter() if ok(node)]

    def find(self, tag: str, **attrs: str) -> "Node":
        found = self.find_all(tag, **attrs)
        assert found, "no <%s %s>" % (tag, attrs)
        return found[0]


class Dom(html.parser.HTMLParser):
    """The DOM chromium dumped, as a small tree (no third-party parser needed)."""
    VOID = {"meta", "br", "img", "input", "col", "link", "hr"}

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.cur = self.root
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.cur)
        self.cur.children.append(node)
        self.cur.parts.append(node)
        if tag not in self.VOID:
            self.cur = node

    def handle_endtag(self, tag):
        node = self.cur
        while node is not self.root and node.tag != tag:
            node = node.parent
        if node is not self.root:
            self.cur = node.parent

    def handle_data(self, data):
        self.cur.parts.append(data)


def dump_dom(page: Path, *flags: str) -> t.Tuple[Node, str, str]:
    proc, _wall = chromium(page, "--enable-logging=stderr", "--v=0", *flags, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Dom(proc.stdout).root, proc.stdout, proc.stderr


def console_errors(stderr: str) -> t.List[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line or "Content Security Policy" in line]


def assert_self_contained(page: Path) -> None:
    """The page names nothing outside itself, has no script, and its own policy forbids any script: a copy of it with a
    script added renders with the script blocked (the page as a reader with scripts off sees it)."""
    text = page.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text and "<script" not in text and " src=" not in text
    copy = page.with_name(page.stem + ".with-script.html")
    copy.write_text(text.replace("</body>", "<script>document.title='script ran'</script></body>"), encoding="utf-8")
    try:
        dom, _raw, stderr = dump_dom(copy)
    finally:
        copy.unlink()
    assert "Content Security Policy" in stderr and dom.find("title").text() != "script ran"


def numbers(row: "Node") -> t.List[t.Optional[float]]:
    """The exact figure (data-value) of each numeric cell of a table row, None for N/A."""
    return [float(td.attrs["data-value"]) if td.attrs.get("data-value") else None for td in row.find_all("td", class_="num")]


def chart_points(dom: "Node", chart_id: str) -> t.List["Node"]:
    """Each point (one bar, or n/a) of an inline SVG chart of the page, in order."""
    return dom.find("svg", id=chart_id).find_all("g", class_="point")
