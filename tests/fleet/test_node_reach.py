# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A folder closed to others (as pyenv's /root is) opened to a node's unprivileged login inside a mount namespace only.

The binds nodefiles.reach_binds plans are mounted by nodeinit's own mount_binds in a throwaway mount namespace;
what the login can read there is read with its user ID (setpriv), and the machine's folder is checked unchanged.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from fleetlib import REPO
from gpusim.fleet import nodefiles

NODEINIT_DIR = REPO / "simulator" / "gpusim" / "fleet"
NODEINIT_ENV = dict(os.environ, PYTHONPATH=str(NODEINIT_DIR))  # INSIDE imports nodeinit from there
# run in the new mount namespace: mount as a node's init does, then read as the login would
INSIDE = """
import json, subprocess, sys
import nodeinit  # from PYTHONPATH: the node init's own folder
nodeinit.mount_binds(json.loads(sys.argv[1]))
login = ["setpriv", "--reuid=%d", "--regid=%d", "--clear-groups", "--"]
found = {}
for name, argv in json.loads(sys.argv[2]).items():
    proc = subprocess.run(login + argv, capture_output=True, text=True, check=False)
    found[name] = [proc.returncode, proc.stdout, proc.stderr]
print(json.dumps(found))
""" % (nodefiles.OPERATOR_UID, nodefiles.OPERATOR_UID)


def test_a_closed_folder_is_opened_only_to_the_paths_asked_for(fleet_base):
    closed = fleet_base / "home-of-root"
    tool = closed / ".pyenv" / "versions" / "9.9" / "bin" / "tool"
    tool.parent.mkdir(parents=True)
    tool.write_text("the interpreter\n")
    (closed / ".pyenv" / "other").mkdir()
    (closed / "secret").write_text("root's own\n")
    (closed / "secret").chmod(0o644)  # readable once the folder may be passed: the skeleton must hide it
    closed.chmod(0o700)
    wanted = closed / ".pyenv" / "versions" / "9.9"
    skeletons = fleet_base / "reach"

    binds = nodefiles.reach_binds(skeletons, [wanted, fleet_base / "open", REPO])
    # only the closed folder gets a skeleton; open ones (this test's folder, the checkout) are left as they are
    assert binds == [(str(wanted), str(skeletons / "0" / ".pyenv" / "versions" / "9.9")),
                     (str(skeletons / "0"), str(closed), "rbind")]
    assert stat.S_IMODE((skeletons / "0" / ".pyenv").stat().st_mode) == 0o711

    reads = {"tool": ["cat", str(tool)], "secret": ["cat", str(closed / "secret")], "list": ["ls", str(closed)],
             "other": ["ls", str(closed / ".pyenv" / "other")]}
    # on the machine (no binds): the login can reach none of it
    before = json.loads(subprocess.run([sys.executable, "-c", INSIDE, "[]", json.dumps(reads)], env=NODEINIT_ENV,
                                       capture_output=True, text=True, timeout=60, check=True).stdout)
    assert all(code != 0 and "Permission denied" in err for code, _out, err in before.values()), before

    inside = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", sys.executable, "-c", INSIDE,
                             json.dumps(binds), json.dumps(reads)], env=NODEINIT_ENV,
                            capture_output=True, text=True, timeout=60, check=False)
    assert inside.returncode == 0, inside.stderr
    found = json.loads(inside.stdout)
    assert found["tool"] == [0, "the interpreter\n", ""]
    assert found["secret"][0] != 0 and "No such file" in found["secret"][2]  # not there in the skeleton
    assert found["other"][0] != 0 and "No such file" in found["other"][2]
    assert found["list"][0] != 0 and "Permission denied" in found["list"][2]  # 0711: pass through, not list

    # the machine's folder: mode unchanged, nothing left mounted on it
    assert stat.S_IMODE(closed.stat().st_mode) == 0o700
    assert sorted(os.listdir(closed)) == [".pyenv", "secret"]
    with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
        assert str(closed) not in mounts.read()
