# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report at 64 hosts x 8 GPUs x 4 holders: build + render time in Python, page size, and the page's render
time in headless chromium against a trivial page rendered the same way in the same run (the baseline).

    .venv/bin/python bench/run.py bench_gpu_report
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

from _benchlib import median, save_results, table
from report_fleet import chromium, chromium_binary, synthetic_results

from ansible_collections.gpuops.fleet.plugins.module_utils._report import model, render

REPO = Path(__file__).resolve().parents[1]

ROUNDS = 5
TRIVIAL = ('<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title></head><body><p>one line</p><script>'
           'void document.body.offsetHeight;document.documentElement.setAttribute("data-render-ms",performance.now().toFixed(1));'
           '</script></body></html>\n')


def in_browser(page: Path):
    proc, wall = chromium(page, "--dump-dom")
    found = re.search(r'data-render-ms="([0-9.]+)"', proc.stdout)
    if proc.returncode != 0 or not found:
        raise SystemExit("chromium failed on %s: %s" % (page, proc.stderr[-2000:]))
    return float(found.group(1)), wall


def main() -> int:
    if chromium_binary() is None:
        print("chromium is not installed (apt-get install chromium, or make integration)", file=sys.stderr)
        return 1
    results = synthetic_results(64, 8, 4)
    build = []
    for _round in range(ROUNDS):
        start = time.perf_counter()
        files = render.render_all(model.build_report(results, generated_at=time.time()))
        build.append(time.perf_counter() - start)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-report-") as folder:
        page, trivial = Path(folder) / "index.html", Path(folder) / "trivial.html"
        page.write_text(files["index.html"], encoding="utf-8")
        trivial.write_text(TRIVIAL, encoding="utf-8")
        samples = {"page": [], "trivial": []}
        for _round in range(ROUNDS):  # alternately, so a change in the machine's load hits both alike
            samples["trivial"].append(in_browser(trivial))
            samples["page"].append(in_browser(page))
    size = len(files["index.html"].encode("utf-8"))
    page_ms, trivial_ms = median([s[0] for s in samples["page"]]), median([s[0] for s in samples["trivial"]])
    page_wall, trivial_wall = median([s[1] for s in samples["page"]]), median([s[1] for s in samples["trivial"]])
    print(table(("what (64 hosts x 8 GPUs x 4 holders)", "median", "baseline (trivial page)", "ratio"), [
        ("build + render the 5 files in Python", "%.0f ms" % (1000 * median(build)), "-", "-"),
        ("in-page render (navigation to laid out)", "%.0f ms" % page_ms, "%.0f ms" % trivial_ms, "%.1fx" % (page_ms / max(trivial_ms, 0.1))),
        ("chromium --dump-dom, whole run", "%.2f s" % page_wall, "%.2f s" % trivial_wall, "%.2fx" % (page_wall / trivial_wall)),
        ("index.html size", "%.0f KiB" % (size / 1024), "-", "-"),
    ]))
    ok = page_ms < 2000 and size < 2 * 1024 * 1024
    print("%s: render < 2 s and page < 2 MB" % ("PASS" if ok else "FAIL"))
    save_results("bench_gpu_report", {"build_s": build, "page": samples["page"], "trivial": samples["trivial"], "bytes": size})
    return 0


if __name__ == "__main__":
    sys.exit(main())
