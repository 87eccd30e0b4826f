"""Nemesis: network faults between the nodes of an addressable :class:`KafkaCluster` and its
clients -- partitions, isolation, lossy and slow links -- with iptables and tc, as root.

Theory of operation
-------------------
Who sends a packet. In an addressable cluster (``KafkaCluster(addressable=True)``) node N
listens on 127.0.0.(N+1) alone, so the *destination* of a packet names the node it goes to
(its address and one of its ports). The *source* address does not name the sender: no node
binds its outgoing sockets, so every connection, a node's or a client's, leaves from
127.0.0.1. What names the sender is the group its process runs under: every node of an
addressable cluster started as root runs under a group of its own (:attr:`KafkaNode.gid`),
and ``iptables -m owner --gid-owner`` matches the group of the socket that sent a packet
(in the OUTPUT chain, which every loopback packet crosses). A *client* is any process that
is none of the nodes: the test itself, a Java or librdkafka peer. (What the kernel still
sends for a socket its process has closed -- the rest of its send buffer, its FIN -- has no
owner left to match, and counts as a client's.)

Cutting. Every connection between two parties is opened by one towards the other's
listener: a node's to another node (replication, the quorum, AlterPartition), a client's to
a node. A cut drops, first, the packets that the opener sends to the other's address and
ports: no connection can be set up, no request gets through. That alone would leak the
answer to a request sent just before the cut (a follower's fetch waiting at the leader:
the record produced after the cut would still reach the follower), and the answers go to
127.0.0.1 and an ephemeral port, which say nothing of whose they are. So, while the nemesis
is entered, every connection to a node's listener is tagged with its opener (``CONNMARK``,
set from the opener's packets in the mangle table, which runs before the filter: even a
packet the cut then drops tags its connection), and a cut also drops what the listener sends
on connections tagged with the cut opener. A connection is tagged by the first packet its
opener sends after the nemesis was entered, so enter it before the traffic it must cut
starts, not just before the cut. DROP, not REJECT: a partition is silence, and clients and
brokers must notice it by their timeouts.
:meth:`Nemesis.partition` takes groups of parties (node ids and :data:`CLIENTS`) and cuts
every party from every party of another group; :meth:`heal` removes every cut.

Replication without the quorum. In the combined broker+controller nodes, a follower fetches
from its leader's broker listener, and the leader reaches the controller (heartbeats,
AlterPartition) and the other voters on their CONTROLLER listeners. :meth:`cut_replication`
cuts only the broker listeners between a node and the others (a cut of ``listeners="broker"``:
every port of the node but CONTROLLER): its followers stop fetching, it stays in the quorum
and unfenced, so it shrinks its partitions' ISR to itself -- the first half of the path to
an unclean election, which a cut of the whole node cannot take (the controller would fence
the leader before its ISR shrank, and elect an in-sync follower).

Links. :meth:`lossy` drops a fraction of every packet to or from a node (``-m statistic``,
in the same filter chain). :meth:`slow` limits a node's bandwidth both ways with an HTB class
on ``lo``: the mangle table puts the node's packets (to its address and ports, or sent by its
group) in the node's class (``-j CLASSIFY``), and every other packet takes HTB's direct
queue, unshaped (the qdisc has no default class). Not a tc filter on a packet mark: the
kernels this runs on lack the ``fw`` classifier, and their u32 accepts ``match mark`` but
ignores it -- built without CONFIG_CLS_U32_MARK, the filter matched every packet, and while a
node was "slow" every loopback packet of the machine went at its rate (other processes'
tests among them: a refused connect waited for its RST, a browser test timed out).
(Delay and jitter would be netem's; these kernels have no ``sch_netem``, so there is none.)

Cleanup. The nemesis owns two chains named after its process (``AKNG-<pid>`` in the
filter and mangle tables, each jumped to from OUTPUT) and, once :meth:`slow` is used, the
root qdisc of ``lo``, which it only adds where ``lo`` had the default (none). Leaving the
``with`` block -- normally, on an error, on Ctrl-C (KeyboardInterrupt) or a cancellation --
deletes all of it, so the tables are as they were. A process killed outright cannot clean
up: the next nemesis removes the chains of processes that no longer exist.

Without root, iptables, tc or the kernel's owner match, :meth:`Nemesis.unavailable` says which
is missing, in one line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Literal, Self

from aiokafka_ng.testing._kafka import KafkaCluster, KafkaNode

__all__ = ["CLIENTS", "Nemesis", "NemesisError"]

#: The party of :meth:`Nemesis.partition` that stands for every process that is not a node.
CLIENTS: Final = "clients"

_CHAIN_PREFIX: Final = "AKNG-"
_TABLES: Final = ("filter", "mangle")
#: connmark of a connection opened by node N (the low bits) or by a client (0xFF).
_OPENER_BASE: Final = 0x4B4F0000
_CLIENT_TAG: Final = 0xFF
_LO: Final = "lo"

Party = int | Literal["clients"]


class NemesisError(RuntimeError):
    """A nemesis could not be set up (the first line says why) or a command failed."""


@dataclass(frozen=True, slots=True)
class _Cut:
    sender: Party
    receiver: int
    #: "all": every listener of the receiver; "broker": all but its CONTROLLER listener.
    listeners: Literal["all", "broker"] = "all"


class Nemesis:
    """Network faults on an addressable :class:`KafkaCluster` (see the module docstring).

    ``with Nemesis(cluster) as nemesis:`` (or ``async with``); every rule it added is gone
    when the block is left, however it is left. Parties are node ids and :data:`CLIENTS`.
    """

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster: Final = cluster
        self._chain = f"{_CHAIN_PREFIX}{os.getpid()}"
        self._entered = False
        self._cuts: set[_Cut] = set()
        self._lossy: dict[int, float] = {}
        self._slow: dict[int, str] = {}
        self._qdisc = False

    # -- availability ------------------------------------------------------------------------

    @staticmethod
    def unavailable(cluster: KafkaCluster | None = None) -> str | None:
        """Why no nemesis can run here (one line), or None. With ``cluster``, also whether its
        nodes can be told apart (addressable, started as root)."""
        if os.geteuid() != 0:
            return "the nemesis needs root (iptables and tc change the machine's tables)"
        for tool in ("iptables", "iptables-restore", "tc"):
            if shutil.which(tool) is None:
                return f"the nemesis needs {tool}, which is not on PATH (apt install iptables)"
        if cluster is not None:
            if not cluster.addressable:
                return "the nemesis needs KafkaCluster(addressable=True)"
            if any(node.gid is None for node in cluster.brokers):
                return "the cluster's nodes run under no group of their own (not started as root)"
        probe = f"{_CHAIN_PREFIX}probe-{os.getpid()}"
        try:
            _run("iptables", "-w", "-N", probe)
        except NemesisError as exc:
            return f"iptables cannot add a chain: {exc}"
        try:
            _run("iptables", "-w", "-A", probe, "-m", "owner", "--gid-owner", "0", "-j", "RETURN")
            _run("iptables", "-w", "-A", probe, "-m", "statistic", "--mode", "random",
                 "--probability", "0.5", "-j", "RETURN")  # fmt: skip
            _run("iptables", "-w", "-A", probe, "-m", "connmark", "--mark", "1", "-j", "RETURN")
        except NemesisError as exc:
            return f"the kernel lacks a match the nemesis needs: {exc}"
        finally:
            _run("iptables", "-w", "-F", probe, check=False)
            _run("iptables", "-w", "-X", probe, check=False)
        try:
            _run("iptables", "-w", "-t", "mangle", "-N", probe)
            _run("iptables", "-w", "-t", "mangle", "-A", probe, "-j", "CLASSIFY",
                 "--set-class", _class_of(0))  # fmt: skip
        except NemesisError as exc:
            return f"the kernel lacks the CLASSIFY target slow links need: {exc}"
        finally:
            _run("iptables", "-w", "-t", "mangle", "-F", probe, check=False)
            _run("iptables", "-w", "-t", "mangle", "-X", probe, check=False)
        return None

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Self:
        reason = self.unavailable(self.cluster)
        if reason is not None:
            raise NemesisError(reason)
        remove_stale_chains()
        try:
            for table in _TABLES:
                _run("iptables", "-w", "-t", table, "-N", self._chain)
                _run("iptables", "-w", "-t", table, "-I", "OUTPUT", "1", "-j", self._chain)
            self._entered = True
            self._apply()  # the openers' tags, from now on (see "Cutting")
        except BaseException:
            self._remove_all()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._remove_all()

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._remove_all()

    def __repr__(self) -> str:
        cuts = sorted(
            f"{c.sender}->{c.receiver}" + ("" if c.listeners == "all" else f"({c.listeners})")
            for c in self._cuts
        )
        return f"<Nemesis cuts={cuts} lossy={self._lossy} slow={self._slow}>"

    # -- partitions --------------------------------------------------------------------------

    def partition(self, *groups: Iterable[Party]) -> None:
        """Cut every party of each group from every party of every other group (both ways).
        Parties in no group keep every link. Adds to the cuts already made."""
        sets = [set(group) for group in groups]
        for i, group in enumerate(sets):
            for other in sets[i + 1 :]:
                if group & other:
                    raise ValueError(f"a party is in two groups: {sorted(map(str, group & other))}")
                for a in group:
                    for b in other:
                        self._cut(a, b)
                        self._cut(b, a)
        self._apply()

    def isolate(self, node_id: int) -> None:
        """Cut ``node_id`` from every other node and from the clients."""
        self.partition({node_id}, {*self._others(node_id), CLIENTS})

    def isolate_from_nodes(self, node_id: int) -> None:
        """Cut ``node_id`` from every other node; clients still reach it (a leader cut off
        from its followers and from the controller quorum, but not from producers)."""
        self.partition({node_id}, self._others(node_id))

    def cut_replication(self, node_id: int) -> None:
        """Cut ``node_id``'s broker listeners from the other nodes, and theirs from it:
        no replica fetches from it nor it from another, but every node still reaches every
        CONTROLLER listener (the quorum, heartbeats, AlterPartition) and the clients reach
        every node. A leader cut so stays unfenced and shrinks its ISR to itself (see
        "Replication without the quorum")."""
        for other in self._others(node_id):
            assert other != CLIENTS
            self._cut(node_id, other, "broker")
            self._cut(other, node_id, "broker")
        self._apply()

    def cut_clients(self, node_id: int) -> None:
        """Cut the clients from ``node_id``; the nodes still reach each other."""
        self.partition({CLIENTS}, {node_id})

    def heal(self) -> None:
        """Remove every cut and every lossy link (slow links stay: :meth:`fast`)."""
        self._cuts.clear()
        self._lossy.clear()
        self._apply()

    def lossy(self, node_id: int, probability: float) -> None:
        """Drop each packet to or from ``node_id`` with ``probability`` (0 < p < 1)."""
        if not 0.0 < probability < 1.0:
            raise ValueError(f"probability must be between 0 and 1, got {probability}")
        self._node(node_id)
        self._lossy[node_id] = probability
        self._apply()

    # -- slow links --------------------------------------------------------------------------

    def slow(self, node_id: int, rate: str = "1mbit") -> None:
        """Limit the bandwidth of everything to and from ``node_id`` to ``rate`` (tc's
        units: ``512kbit``, ``2mbit``), each way sharing one HTB class."""
        self._node(node_id)
        if not re.fullmatch(r"[0-9]+(?:\.[0-9]+)?[kmg]?bit", rate):
            raise ValueError(f"rate must read like 512kbit or 2mbit, got {rate!r}")
        if not self._qdisc:
            shown = _run("tc", "qdisc", "show", "dev", _LO)
            if not shown.startswith("qdisc noqueue 0: root"):
                raise NemesisError(f"lo already has a root qdisc, left alone: {shown.strip()}")
            # No default class: what no CLASSIFY rule names goes out unshaped.
            _run("tc", "qdisc", "add", "dev", _LO, "root", "handle", "1:", "htb", "r2q", "1000")
            self._qdisc = True
        verb = "change" if node_id in self._slow else "add"
        _run("tc", "class", verb, "dev", _LO, "parent", "1:", "classid", _class_of(node_id),
             "htb", "rate", rate, "ceil", rate)  # fmt: skip
        self._slow[node_id] = rate
        self._apply()

    def fast(self) -> None:
        """Remove every bandwidth limit (and ``lo``'s qdisc)."""
        self._slow.clear()
        self._apply()
        if self._qdisc:
            _run("tc", "qdisc", "del", "dev", _LO, "root", check=False)
            self._qdisc = False

    def reset(self) -> None:
        """:meth:`heal` and :meth:`fast`."""
        self.heal()
        self.fast()

    # -- internals ---------------------------------------------------------------------------

    def _others(self, node_id: int) -> set[Party]:
        self._node(node_id)
        return {node.node_id for node in self.cluster.brokers if node.node_id != node_id}

    def _node(self, node_id: int) -> KafkaNode:
        try:
            return self.cluster.node(node_id)
        except KeyError:
            raise ValueError(f"no node {node_id} in {self.cluster!r}") from None

    def _cut(
        self, sender: Party, receiver: Party, listeners: Literal["all", "broker"] = "all"
    ) -> None:
        if receiver == CLIENTS:
            return  # nothing listens on a client: cutting what it sends cuts both ways
        if sender != CLIENTS:
            self._node(sender)
        self._node(receiver)
        if sender != receiver:
            self._cuts.add(_Cut(sender, receiver, listeners))

    def _apply(self) -> None:
        """Rewrite both chains from the state, each table in one commit (iptables-restore)."""
        if not self._entered:
            raise NemesisError("use the nemesis inside its with block")
        rules: list[tuple[str, list[str]]] = []
        openers: list[Party] = [n.node_id for n in self.cluster.brokers]
        openers.append(CLIENTS)
        for node in self.cluster.brokers:
            for opener in openers:
                if opener != node.node_id:
                    tag = ["-j", "CONNMARK", "--set-mark", self._opener_tag(opener)]
                    rules.append(
                        ("mangle", [*self._to(node.node_id), *self._sent_by(opener), *tag])
                    )
        for cut in sorted(self._cuts, key=lambda c: (str(c.sender), c.receiver, c.listeners)):
            broker = cut.listeners == "broker"
            opened_by = ["-m", "connmark", "--mark", self._opener_tag(cut.sender)]
            rules.append(("filter", [*self._to(cut.receiver, broker=broker),
                                     *self._sent_by(cut.sender), "-j", "DROP"]))  # fmt: skip
            rules.append(("filter", [*self._from(cut.receiver, broker=broker), *opened_by,
                                     "-j", "DROP"]))  # fmt: skip
        for node_id, probability in sorted(self._lossy.items()):
            chance = ["-m", "statistic", "--mode", "random", "--probability", f"{probability}"]
            node = self._node(node_id)
            rules.append(("filter", [*self._to(node_id), *chance, "-j", "DROP"]))
            rules.append(("filter", [*self._sent_by(node.node_id), *chance, "-j", "DROP"]))
        for node_id in sorted(self._slow):
            shaped = ["-j", "CLASSIFY", "--set-class", _class_of(node_id)]
            rules.append(("mangle", [*self._to(node_id), *shaped]))
            rules.append(("mangle", [*self._sent_by(node_id), *shaped]))
        # One iptables-restore, not a flush and then one append per rule: between those,
        # every cut was briefly gone, and a follower cut from its leader could catch up
        # while another cut was being added (the unclean-election test's follower, once
        # in CI; with a 6 s pause put in that gap, it did). --noflush touches
        # only the chains named; each table's chain is replaced in one commit.
        lines: list[str] = []
        for table in _TABLES:
            lines += [f"*{table}", f"-F {self._chain}"]
            lines += [" ".join(["-A", self._chain, *r]) for t, r in rules if t == table]
            lines.append("COMMIT")
        _run("iptables-restore", "--noflush", stdin="\n".join(lines) + "\n")

    def _ports(self, node_id: int, broker: bool) -> tuple[KafkaNode, str]:
        """The node and its listeners' ports (``broker``: all but CONTROLLER), for multiport."""
        node = self._node(node_id)
        ports = [p for p in node.ports.all() if not (broker and p == node.ports.CONTROLLER)]
        return node, ",".join(str(port) for port in ports)

    def _to(self, node_id: int, *, broker: bool = False) -> list[str]:
        node, ports = self._ports(node_id, broker)
        return ["-d", node.host, "-p", "tcp", "-m", "multiport", "--dports", ports]

    def _from(self, node_id: int, *, broker: bool = False) -> list[str]:
        """What ``node_id``'s listeners send (answers on connections others opened)."""
        node, ports = self._ports(node_id, broker)
        return ["-s", node.host, "-p", "tcp", "-m", "multiport", "--sports", ports]

    @staticmethod
    def _opener_tag(party: Party) -> str:
        return hex(_OPENER_BASE + (_CLIENT_TAG if party == CLIENTS else int(party)))

    def _sent_by(self, party: Party) -> list[str]:
        if party == CLIENTS:
            args: list[str] = []
            for node in self.cluster.brokers:
                args += ["-m", "owner", "!", "--gid-owner", str(node.gid)]
            return args
        return ["-m", "owner", "--gid-owner", str(self._node(party).gid)]

    def _remove_all(self) -> None:
        if self._qdisc:
            _run("tc", "qdisc", "del", "dev", _LO, "root", check=False)
            self._qdisc = False
        _remove_chain(self._chain)
        self._entered = False
        self._cuts.clear()
        self._lossy.clear()
        self._slow.clear()


def _class_of(node_id: int) -> str:
    """The HTB class on ``lo`` that :meth:`Nemesis.slow` puts ``node_id``'s packets in."""
    return f"1:{0x100 + node_id:x}"


def remove_stale_chains() -> list[str]:
    """Remove the chains of nemeses whose process is gone (killed before it could clean up);
    the names removed."""
    removed = []
    listing = _run("iptables", "-w", "-S", check=False) + _run(
        "iptables", "-w", "-t", "mangle", "-S", check=False
    )
    for pid in sorted(set(re.findall(rf"^-N {_CHAIN_PREFIX}([0-9]+)$", listing, re.MULTILINE))):
        if not os.path.exists(f"/proc/{pid}"):
            _remove_chain(f"{_CHAIN_PREFIX}{pid}")
            removed.append(f"{_CHAIN_PREFIX}{pid}")
    return removed


def _remove_chain(chain: str) -> None:
    for table in _TABLES:
        # Every jump to it (one, unless something went wrong half-way), then the chain.
        while _run_ok("iptables", "-w", "-t", table, "-D", "OUTPUT", "-j", chain):
            pass
        _run("iptables", "-w", "-t", table, "-F", chain, check=False)
        _run("iptables", "-w", "-t", table, "-X", chain, check=False)


def _run_ok(*command: str) -> bool:
    return subprocess.run(command, capture_output=True, check=False).returncode == 0


def _run(*command: str, check: bool = True, stdin: str | None = None) -> str:
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise NemesisError(f"cannot run {command[0]}: {exc}") from exc
    if check and done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        raise NemesisError(f"{' '.join(command)}: {why[0] if why else done.returncode}")
    return done.stdout
