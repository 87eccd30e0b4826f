"""Request cuts (:meth:`FakeKafka.cut_after`): which request closes which connections.

A rule counts requests down as a node handles them. ``scope`` says what closes when it
fires: all of the node's connections (a broker dying), or only the connection that carried
the request; a rule armed with ``scope="each"`` gives every connection a rule of its own.
``forward_last``: the broker still handles the request that fired the rule (its answer is
lost), or drops it unseen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Cut", "CutScope", "fire"]

#: Which connections a cut closes: all of the node's, the one that carried the request, or
#: each connection after its own count.
CutScope = Literal["node", "connection", "each"]


@dataclass(slots=True)
class Cut:
    remaining: int
    every: int | None  # re-armed with this count after firing, or one shot
    forward_last: bool
    scope: CutScope

    def fresh(self) -> Cut:
        return Cut(self.remaining if self.every is None else self.every, self.every,
                   self.forward_last, "connection")  # fmt: skip


def fire(rule: Cut | None) -> tuple[bool, Cut | None]:
    """Count one request against ``rule``: (fired, the rule left armed afterwards)."""
    if rule is None:
        return False, None
    rule.remaining -= 1
    if rule.remaining > 0:
        return False, rule
    if rule.every is None:
        return True, None
    rule.remaining = rule.every
    return True, rule
