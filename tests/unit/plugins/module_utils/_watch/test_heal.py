# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Self-healing's decisions over the endpoint's series: the conditions of one scrape, the hold-down, the end of a
remediation judged from the endpoint (healed, or the timeout), K failures then one person-needed event, dry run."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._http.prometheus import parse
from ansible_collections.gpuops.fleet.plugins.module_utils._watch import heal as h
from ansible_collections.gpuops.fleet.plugins.module_utils._watch.budget import Policy


def scrape(up=1, health=1, generates=1, orphan_mib=0, ok=1):
    text = ['gpuops_watch_reading_ok{host="n1"} %d' % ok,
            'gpuops_server_info{host="n1",server="vllm-main",pid="41"} 1',
            'gpuops_server_up{host="n1",server="vllm-main"} %d' % up,
            'gpuops_server_health{host="n1",server="vllm-main"} %d' % health,
            'gpuops_server_generates{host="n1",server="vllm-main"} %d' % generates]
    if orphan_mib:
        text.append('gpuops_gpu_holder_memory_mib{host="n1",gpu="3",class="orphan",pid="77",name="VLLM::Worker_TP1"} %d' % orphan_mib)
    text.append('gpuops_gpu_holder_memory_mib{host="n1",gpu="4",class="foreign",pid="88",name="python3"} 3000')
    return h.conditions(parse("\n".join(text) + "\n"))


def test_conditions_of_one_scrape():
    assert scrape() == {}
    assert list(scrape(generates=0)) == [h.ENGINE_DEAD]
    assert scrape(generates=0)[h.ENGINE_DEAD]["servers"][0]["pid"] == "41"
    assert list(scrape(up=0, health=0, generates=0)) == [h.SERVER_DOWN]
    assert list(scrape(health=0, generates=0)) == []  # starting (up, /health not 200 yet): not a condition of its own
    found = scrape(orphan_mib=5000)
    assert list(found) == [h.ORPHAN] and found[h.ORPHAN]["holders"][0]["pid"] == "77"  # the foreign job is not one
    assert scrape(generates=0, ok=0) == {}  # a reading that failed shows nothing


class World:
    def __init__(self, hold_down=2, timeout_s=60.0, **policy):
        self.now = 1000.0
        self.lines = []
        self.healer = h.Healer(Policy(**policy), hold_down=hold_down, timeout_s=timeout_s, clock=lambda: self.now, audit=self.lines.append)

    def tick(self, host, found, seconds=5.0):
        self.now += seconds
        return [e["gpuops_heal"] for e in self.healer.observe(host, found)]

    def audit(self):
        return [json.loads(line) for line in self.lines]


def test_hold_down_one_bad_scrape_does_nothing():
    w = World(hold_down=3)
    assert w.tick("n1", scrape(generates=0)) == [] and w.tick("n1", scrape(generates=0)) == []
    assert w.tick("n1", scrape()) == []  # cleared: the count starts again
    assert w.tick("n1", scrape(generates=0)) == [] and w.tick("n1", scrape(generates=0)) == []
    assert w.tick("n1", None) == []  # no answer: neither counts nor clears
    (event,) = w.tick("n1", scrape(generates=0))
    assert (event["action"], event["condition"], event["host"]) == ("remediate", h.ENGINE_DEAD, "n1")
    assert event["evidence"]["scrapes"] == 3


def test_healed_then_failed_then_person_needed_once():
    w = World(hold_down=1, timeout_s=60, window_s=1, max_failures=2)
    (first,) = w.tick("n1", scrape(generates=0))
    assert first["action"] == "remediate"
    assert w.tick("n1", scrape(up=0, health=0, generates=0)) == []  # in flight: no second event
    assert w.tick("n1", scrape()) == []
    assert [(l["event"], l.get("ok")) for l in w.audit()][-1] == ("finished", True)
    # a fault that outlasts two remediations: each fails at the timeout, then one person-needed event, then silence
    assert w.tick("n1", scrape(generates=0))[0]["action"] == "remediate"
    assert w.tick("n1", scrape(generates=0), 30) == []  # under the timeout: still in flight
    assert w.tick("n1", scrape(generates=0), 31) == []  # failed once (the timeout) ...
    assert [e["action"] for e in w.tick("n1", scrape(generates=0))] == ["remediate"]  # ... a second try at the next scrape
    events = [e for _tick in range(30) for e in w.tick("n1", scrape(generates=0), 30)]
    assert [e["action"] for e in events] == ["person_needed"], events
    assert events[0]["evidence"]["servers"][0]["pid"] == "41" and "2 remediations in a row failed" in events[0]["reason"]
    assert [l["ok"] for l in w.audit() if l["event"] == "finished"] == [True, False, False]


def test_at_most_m_hosts_and_dry_run():
    w = World(hold_down=1, max_hosts=2)
    acted = [e["host"] for host in ("n1", "n2", "n3") for e in w.tick(host, scrape(generates=0))]
    assert acted == ["n1", "n2"]
    w.tick("n1", scrape())  # n1 healed: n3 may go
    assert [e["host"] for e in w.tick("n3", scrape(generates=0))] == ["n3"]
    dry = World(hold_down=1, dry_run=True)
    (event,) = dry.tick("n1", scrape(generates=0))
    assert event["action"] == "dry_run" and not dry.healer.pending


@pytest.mark.parametrize("kwargs, message", [({"hold_down": 0}, "hold_down: 0"), ({"timeout_s": -1}, "timeout_s: -1")])
def test_bad_settings_name_the_setting(kwargs, message):
    with pytest.raises(ValueError, match=message):
        h.Healer(Policy(), **kwargs)
