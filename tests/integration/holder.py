# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A process that is not vLLM and holds simulated GPU memory: `python holder.py --gpu N --mib M` (GPUOPS_SIM_STATE set).

Started by tests as a bystander (say, someone's training job) with simulator/ on its PYTHONPATH
(gpusim.api.simulator_environ); the tests end it by its Popen handle.
"""

import argparse
import signal

from gpusim.api import hold_memory

parser = argparse.ArgumentParser()
parser.add_argument("--gpu", type=int, required=True)
parser.add_argument("--mib", type=int, required=True)
args = parser.parse_args()
hold_memory(args.gpu, args.mib)
print("holding", flush=True)
while True:
    signal.pause()
