# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a vLLM server answers to the generation check's completion, for the modules' unit tests (the answers the
``api_server`` fixture of conftest.py is given): a live engine's four tokens, and a dead engine's HTTP 500."""

from __future__ import annotations

import json

DEAD_BODY = json.dumps({"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                                  "type": "EngineDeadError", "param": None, "code": 500}}).encode()
GOOD_BODY = json.dumps({"choices": [{"text": " a b c d"}], "usage": {"completion_tokens": 4}}).encode()
