"""The one bootstrap parser: properties over every spelling a user writes, and the end of
the two parsers that used to disagree (``aiokafka_ng.config`` read ``"::1"`` as host ``":"``
port 1; ``aiokafka_ng.cluster`` read it as ``::1`` port 9092)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import aiokafka_ng.cluster
import aiokafka_ng.config
from aiokafka_ng.admin import AdminConfig
from aiokafka_ng.cluster import parse_bootstrap_servers
from aiokafka_ng.config import ClientConfig, ProducerConfig
from aiokafka_ng.consumer import ConsumerConfig
from aiokafka_ng.errors import ConfigError

PORTS = st.integers(1, 65535) | st.sampled_from([1, 2, 9092, 65534, 65535])
LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)
HOST_NAMES = st.lists(LABEL, min_size=1, max_size=4).map(".".join)
IPV4 = st.ip_addresses(v=4).map(str)
IPV6 = st.ip_addresses(v=6).flatmap(lambda a: st.sampled_from([a.compressed, a.exploded]))
SPACE = st.sampled_from(["", " ", "  ", "\t"])


def _ambiguous(bare: str) -> bool:
    """A bare IPv6 literal that also reads as address + port (``fe80::1:9092``)."""
    address, _, last = bare.rpartition(":")
    if not (last.isdigit() and 0 < int(last) < 65536):
        return False
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return False
    return True


@st.composite
def entries(draw: st.DrawFn) -> tuple[str, tuple[str, int] | None]:
    """One list entry as a user writes it, and the (host, port) it means (None: refused
    as ambiguous)."""
    port = draw(st.none() | PORTS)
    kind = draw(st.sampled_from(["name", "ipv4", "ipv6", "bare-ipv6"]))
    if kind == "bare-ipv6":
        host = draw(IPV6)
        return host, None if _ambiguous(host) else (host, 9092)
    host = draw({"name": HOST_NAMES, "ipv4": IPV4, "ipv6": IPV6}[kind])
    text = f"[{host}]" if kind == "ipv6" else host
    if port is not None:
        text += f":{port}"
    return text, (host, 9092 if port is None else port)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(entries(), SPACE, SPACE), min_size=1, max_size=6), st.booleans())
def test_every_spelling_parses_to_what_it_means(
    drawn: list[tuple[tuple[str, tuple[str, int] | None], str, str]], as_list: bool
) -> None:
    texts = [f"{before}{text}{after}" for (text, _), before, after in drawn]
    meant = [pair for (_, pair), _, _ in drawn]
    servers: str | list[str] = texts if as_list else ",".join(texts)
    if None in meant:
        with pytest.raises(ConfigError, match="ambiguous bootstrap server") as info:
            parse_bootstrap_servers(servers)
        assert set(info.value.errors) == {"bootstrap_servers"}
        return
    parsed = parse_bootstrap_servers(servers)
    assert parsed == meant
    # What the parser returns, written back in canonical form, parses to itself.
    canonical = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in parsed)
    assert parse_bootstrap_servers(canonical) == parsed


@settings(max_examples=200, deadline=None)
@given(IPV6, PORTS)
def test_an_ambiguous_bare_ipv6_names_both_bracketed_readings(address: str, port: int) -> None:
    bare = f"{address}:{port}"
    try:
        ipaddress.IPv6Address(bare)
    except ValueError:
        return  # not an address on its own: a plain "bad host"
    with pytest.raises(ConfigError) as info:
        parse_bootstrap_servers(bare)
    problem = info.value.errors["bootstrap_servers"]
    assert f"[{address}]:{port}" in problem and f"[{bare}]" in problem
    # Both readings the message offers parse to what they say.
    assert parse_bootstrap_servers(f"[{address}]:{port}") == [(address, port)]
    assert parse_bootstrap_servers(f"[{bare}]") == [(bare, 9092)]


@given(HOST_NAMES | IPV4, st.integers(-5, 0) | st.integers(65536, 10**30))
def test_a_port_out_of_range_is_named(host: str, port: int) -> None:
    with pytest.raises(ConfigError) as info:
        parse_bootstrap_servers(f"{host}:{port}")
    problem = info.value.errors["bootstrap_servers"]
    assert ("out of range" if port >= 0 else "bad port") in problem


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=60) | st.lists(st.text(max_size=20), max_size=4))
@example("h:" + "9" * 5000)  # beyond int()'s digit limit: still a ConfigError
@example("h:²")  # str.isdigit() but not a number int() reads
@example("h:٣")  # a non-ASCII decimal digit
@example("[fe80::1%a b]:1")  # ipaddress takes any zone text, spaces included
@example("fe80::1%\x00")
def test_any_input_parses_or_raises_config_error(servers: str | list[str]) -> None:
    try:
        parsed = parse_bootstrap_servers(servers)
    except ConfigError as exc:
        assert set(exc.errors) == {"bootstrap_servers"}
        assert len(str(exc)) < 400  # a pasted blob is quoted cut short
        return
    assert parsed
    for host, port in parsed:
        # Letters, digits, "-._" -- and ":%" of an IPv6 address and its zone.
        assert host and all(c.isalnum() or c in "-._:%" for c in host), host
        assert 0 < port < 65536


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("::1", [("::1", 9092)]),
        ("[::1]:1", [("::1", 1)]),
        ("fe80::1%eth0", [("fe80::1%eth0", 9092)]),
        ("[fe80::1%eth0]:9093", [("fe80::1%eth0", 9093)]),
        ("::ffff:10.0.0.1", [("::ffff:10.0.0.1", 9092)]),
        ("h:09092", [("h", 9092)]),
        (" a:1 ,, b ", [("a", 1), ("b", 9092)]),
    ],
)
def test_edges(text: str, expected: list[tuple[str, int]]) -> None:
    assert parse_bootstrap_servers(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("fe80::1:9092", "ambiguous"),
        ("::1:9092", "ambiguous"),
        ("h:1:2", "bad host"),
        ("http://h:9092", "has a scheme \\(http://\\): write host:port alone, e.g. 'h:9092'"),
        ("kafka://127.0.0.1:9092", "has a scheme"),  # not taken for an IPv6 address
        ("h1:1,SASL_SSL://h2:9093", "'SASL_SSL://h2:9093' has a scheme"),
        ("h/x:1", "bad host"),
        ("[1.2.3.4]:1", "bad IPv6 address"),
        ("[fe80::1%a b]:1", "bad IPv6 address"),
        ("fe80::1%a/b", "bad host"),
        ("h:65536", "out of range"),
        ("h:0", "out of range"),
    ],
)
def test_refused(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_bootstrap_servers(text)


def test_one_parser_everywhere() -> None:
    """The old disagreement: both public names are now one function, and every client's
    config reads a list as the cluster layer does."""
    assert aiokafka_ng.config.parse_bootstrap_servers is aiokafka_ng.cluster.parse_bootstrap_servers
    for text in ("::1", "[fe80::1]:9093, h", "127.0.0.1:1"):
        want = parse_bootstrap_servers(text)
        for cls in (ClientConfig, ProducerConfig, ConsumerConfig, AdminConfig):
            config = cls(bootstrap_servers=text)
            assert config.bootstrap_addresses == want
            assert config.cluster_config().bootstrap_servers == want
    assert ClientConfig(bootstrap_servers="::1").bootstrap_addresses == [("::1", 9092)]


@pytest.mark.parametrize("cls", [ClientConfig, ProducerConfig, ConsumerConfig, AdminConfig])
def test_config_names_the_bad_entry_once(cls: type[ClientConfig]) -> None:
    with pytest.raises(ConfigError) as info:
        cls(bootstrap_servers="fe80::1:9092")
    problem = info.value.errors["bootstrap_servers"]
    assert "ambiguous bootstrap server 'fe80::1:9092'" in problem
    assert "invalid configuration" not in problem  # not an error message nested in another


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (9092, "got int 9092 (for port 9092 on this machine: 'localhost:9092')"),
        (None, "got NoneType None"),
        ({"h": 1}, "got dict"),
    ],
)
def test_a_value_of_another_type_says_what_is_expected(value: object, problem: str) -> None:
    # Issue 49 item 10: pydantic's own "Input should be a valid string" hid that a list is
    # taken too, and the likely mistake (a bare port).
    with pytest.raises(ConfigError) as info:
        ProducerConfig(bootstrap_servers=value)  # type: ignore[arg-type]
    text = info.value.errors["bootstrap_servers"]
    assert "expected 'host:port[,host:port...]' or a list of 'host:port' strings" in text
    assert problem in text
