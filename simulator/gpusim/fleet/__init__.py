# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fleet of simulated GPU hosts reached over SSH, on one machine (docs/simulator.md, "SSH fleet").

Each node is a network namespace joined to the machine by a veth pair, with its own PID, mount and UTS
namespaces, its own sshd and its own simulated GPUs. Everything created is written to a record first and
removed by that record: `python -m gpusim.fleet up|down|status|exec|stop-sshd|start-sshd`.
"""
