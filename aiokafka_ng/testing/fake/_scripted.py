"""Scripted answers (:meth:`FakeKafka.answer`) and the log of received requests
(:meth:`FakeKafka.received`).

The model answers what it models; a test answers the rest itself -- an API the fake does not
model (DescribeAcls, DescribeQuorum, SaslAuthenticate, ...), or a modelled one answered
otherwise for a while ("the first CreateTopics at node 1 answers NOT_CONTROLLER"). A script
is a rule: API key, a handler, how many requests it answers (``times``, None for all) and
which (``match``: a node id, or a predicate on the :class:`Received` request). Rules are
tried in the order they were added; the first active one that matches answers, so "once
this, then always that" is two rules. A request no rule matches goes to the model.

The handler gets the :class:`Received` request (decoded request, version, node, connection)
and returns the answer:

* a response message, encoded at the request's version;
* ``bytes``: the response *body*, framed here (size, correlation id, header tagged fields)
  -- a hand-written answer, byte for byte;
* :class:`~._raw.RawFrames`: bytes written to the connection as they are, framing and
  correlation id included (:mod:`._raw`) -- an answer wrong in its framing;
* None: the connection is closed without an answer;
* or an awaitable of one of these (an answer held until the test lets it go).

A script can also start from the model's own answer, ``await kafka.model_answer(call)``,
and hold it or edit it: a Metadata answer held until an event is set, a topic in it given
an authorization error, a leader taken away for the first rounds.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from aiokafka_ng.protocol import framing
from aiokafka_ng.protocol.messages import REQUEST_TYPES, RESPONSE_TYPES
from aiokafka_ng.protocol.primitives import ApiMessage
from aiokafka_ng.testing.fake._raw import RawFrames

__all__ = ["Answer", "Handler", "Received", "Script", "Scripts", "frame_body"]


@dataclass(frozen=True, slots=True, eq=False)
class Received:
    """One request a node received, decoded."""

    node: int
    #: Which client connection it came on: a number, unique within the FakeKafka, given to
    #: connections in the order they were accepted (per-connection state, e.g. SASL's).
    connection: int
    api_key: int
    version: int
    request: Any
    #: ``anyio.current_time()`` when it was read (virtual under a mock clock).
    at: float
    #: The request header's correlation id (what a :class:`~._raw.RawFrames` answer
    #: writes, or deliberately does not) and client id.
    correlation_id: int = 0
    client_id: str | None = None


Answer: TypeAlias = ApiMessage | bytes | RawFrames | None
Handler: TypeAlias = Callable[[Received], Answer | Awaitable[Answer]]
#: A node id, or a predicate on the request; None matches every request.
ScriptMatch: TypeAlias = int | Callable[[Received], bool] | None


class Script:
    """One :meth:`FakeKafka.answer` rule; ``hits`` counts the requests it answered."""

    __slots__ = ("api_key", "handler", "hits", "match", "remaining")

    def __init__(
        self, api_key: int, handler: Handler, times: int | None, match: ScriptMatch
    ) -> None:
        self.api_key = api_key
        self.handler = handler
        self.remaining = times
        self.match = match
        self.hits = 0

    def __repr__(self) -> str:
        left = "inf" if self.remaining is None else self.remaining
        return f"<Script api={self.api_key} hits={self.hits} remaining={left}>"

    @property
    def active(self) -> bool:
        return self.remaining is None or self.remaining > 0

    def cancel(self) -> None:
        """Answer nothing more (requests go to the model, or the next matching rule)."""
        self.remaining = 0

    def applies(self, call: Received) -> bool:
        if not self.active or self.api_key != call.api_key:
            return False
        if self.match is None:
            return True
        if callable(self.match):
            return bool(self.match(call))
        return self.match == call.node


class Scripts:
    """The rules of one FakeKafka, and what its nodes received."""

    def __init__(self, max_received: int | None = None) -> None:
        if max_received is not None and max_received < 0:
            raise ValueError("max_received must be >= 0 or None")
        self.rules: list[Script] = []
        self.log: deque[Received] = deque(maxlen=max_received)

    def add(self, api_key: int, handler: Handler, times: int | None, match: ScriptMatch) -> Script:
        if api_key not in REQUEST_TYPES:
            raise ValueError(f"unknown API key {api_key}")
        if times is not None and times < 1:
            raise ValueError("times must be >= 1 or None")
        if isinstance(match, bool):  # True == 1 would match node 1
            raise TypeError("match is a node id, a predicate or None")
        rule = Script(api_key, handler, times, match)
        self.rules.append(rule)
        return rule

    def find(self, call: Received) -> Script | None:
        return next((rule for rule in self.rules if rule.applies(call)), None)

    async def run(self, rule: Script, call: Received) -> Answer:
        # Counted before the handler runs: a handler held on an event must not answer the
        # next request too when it was meant to answer one.
        rule.hits += 1
        if rule.remaining is not None:
            rule.remaining -= 1
        out = rule.handler(call)
        if inspect.isawaitable(out):
            out = await out
        if out is not None and not isinstance(out, (bytes, ApiMessage, RawFrames)):
            raise TypeError(
                f"a script for API key {call.api_key} returned {type(out).__name__}: "
                "answer with a response message, bytes (a response body), RawFrames or None"
            )
        return out

    def received(self, api_key: int | None, node: int | None) -> list[Received]:
        return [
            r
            for r in self.log
            if (api_key is None or r.api_key == api_key) and (node is None or r.node == node)
        ]


def advertised(api_key: int) -> tuple[int, int]:
    """The versions a scripted API is advertised with when the model lacks it: the codec's
    range up to the last stable version both sides share."""
    req, resp = REQUEST_TYPES[api_key], RESPONSE_TYPES[api_key]
    return req.MIN_VERSION, min(req.MAX_STABLE_VERSION, resp.MAX_STABLE_VERSION)


def frame_body(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """Size prefix + response header + ``body`` (a hand-written response body)."""
    out = bytearray(correlation_id.to_bytes(4, "big", signed=True))
    if framing.response_header_version(api_key, version) >= 1:
        out += b"\x00"  # no tagged fields in the header
    out += body
    return len(out).to_bytes(4, "big") + bytes(out)
