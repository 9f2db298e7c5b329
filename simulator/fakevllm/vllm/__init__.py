# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fake vLLM for the simulated GPU host: same command lines, same process tree, simulated memory.

Configuration comes from vLLM's own flags plus GPUOPS_SIM_* environment variables (see _simhost).
"""

__version__ = "0.33.0+gpusim"
