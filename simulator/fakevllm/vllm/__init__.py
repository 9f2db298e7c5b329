# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fake vLLM for the simulated GPU host: same command lines, same process tree, simulated memory.

Configuration comes from vLLM's own flags plus GPUOPS_SIM_* environment variables: the process tree's in
_simhost, the API server's (start-up, pace, chunking, faults) in _knobs; docs/simulator.md lists them all.
"""

__version__ = "0.33.0+gpusim"
