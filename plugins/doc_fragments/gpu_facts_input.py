# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The input of the filters that judge a host's GPUs (free_gpus, unhealthy_gpus): _gpu/state.gpu_list reads it."""

    DOCUMENTATION = r"""
options:
  _input:
    description:
      - The host's C(ansible_facts) after M(gpuops.fleet.gpu_facts) or M(gpuops.fleet.gpu_report_facts), a registered result of
        either, or the list C(ansible_facts.gpus) itself.
    type: raw
    required: true
"""
