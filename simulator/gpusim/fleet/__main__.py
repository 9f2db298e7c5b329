# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`PYTHONPATH=simulator python -m gpusim.fleet up|down|status|exec|stop-sshd|start-sshd` (as root)."""

from __future__ import annotations

import sys

from gpusim.fleet.cli import main

sys.exit(main())
