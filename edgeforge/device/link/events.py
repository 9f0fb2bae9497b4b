"""The runner's event stream, read on the host: the ``@@edgeforge {json}`` lines it prints as it
goes (bench, load, deploy's smoke test and releases all read it), and the last plain line of its
stderr, which says why when it failed."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

EVENT_PREFIX = "@@edgeforge "


@dataclass
class Partial:
    """What the runner has reported so far (events, in order)."""
    events: list = field(default_factory=list)

    def first(self, name):
        return next((e for e in self.events if e.get("event") == name), None)

    def fingerprint(self, when):
        return next((e["fingerprint"] for e in self.events
                     if e.get("event") == "fingerprint" and e.get("when") == when), None)

    @property
    def last(self) -> str:
        """The last event that is a step (an ``error`` event says why, not where)."""
        steps = [e["event"] for e in self.events if e.get("event") != "error"]
        return steps[-1] if steps else "nothing"

    def feed(self, line: str) -> dict | None:
        if not line.startswith(EVENT_PREFIX):
            return None
        try:
            ev = json.loads(line[len(EVENT_PREFIX):])
        except ValueError:
            return None
        self.events.append(ev)
        return ev


def tail(text: str) -> str:
    """The last line of ``text`` that is not an event, cut to 300 characters."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip() and not ln.startswith(EVENT_PREFIX)]
    return lines[-1][:300] if lines else ""
