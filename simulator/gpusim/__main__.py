# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Entry point: `PYTHONPATH=simulator python -m gpusim ...`."""

from __future__ import annotations

import sys

from gpusim.cli import main

sys.exit(main())
