"""The one place where anyio/OS/TLS errors become aiokafka_ng errors (and where a
connection's stream is opened, the first place they arise).

Everything below ``net`` speaks ``OSError``, ``ssl.SSLError`` and anyio's stream exceptions;
everything above it sees :class:`~aiokafka_ng.errors.KafkaConnectionError` (retriable) with
the original chained as ``__cause__``; a certificate that fails verification becomes its
non-retriable subclass :class:`~aiokafka_ng.errors.SslAuthenticationError`. Connection code
wraps each I/O call site in :func:`translate_io_errors` instead of catching foreign exceptions
ad hoc.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import anyio.abc

from aiokafka_ng.errors import KafkaConnectionError, SslAuthenticationError
from aiokafka_ng.net._connection_types import ConnectionConfig
from aiokafka_ng.net.asyncio_stream import connect_plain
from aiokafka_ng.net.clock import running_asyncio_loop

# TimeoutError (from anyio.fail_after) and ssl.SSLError are OSError subclasses.
IO_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
)


def describe(exc: BaseException) -> str:
    """A short human reason for an I/O failure, for the translated error's message."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate verification failed: {exc.verify_message or exc}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS error: {exc.reason or exc}"
    if isinstance(exc, anyio.EndOfStream):
        return "connection closed by the broker"
    if isinstance(exc, anyio.ClosedResourceError):
        return "connection already closed"
    if isinstance(exc, anyio.BrokenResourceError):
        cause = exc.__cause__
        return f"connection broken ({describe(cause)})" if cause else "connection broken"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.errno is None and exc.__cause__ is not None:
        # anyio's "All connection attempts failed" wraps what each address answered (one
        # error, or a group of them): those are the reasons worth reading.
        reasons = dict.fromkeys(describe(leaf) for leaf in _leaves(exc.__cause__))
        return "; ".join(reasons)
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (nothing listens on that port)"
    if isinstance(exc, OSError) and exc.errno:
        # "Network is unreachable": the errno's meaning, which asyncio's text around the
        # call ("Connect call failed ('10.0.0.1', 9092)") leaves out.
        return os.strerror(exc.errno)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def connection_error(where: str, exc: BaseException) -> KafkaConnectionError:
    """The translated error for ``exc`` (the caller raises it ``from exc``)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        # Retrying cannot help: a wrong CA or host name fails the same way every time.
        return SslAuthenticationError(f"{where}: {describe(exc)}")
    return KafkaConnectionError(f"{where}: {describe(exc)}")


@contextmanager
def translate_io_errors(where: str) -> Iterator[None]:
    """Re-raise anyio/OS/TLS errors as KafkaConnectionError naming ``where`` (host:port)."""
    try:
        yield
    except IO_ERRORS as exc:
        raise connection_error(where, exc) from exc


async def open_stream(host: str, port: int, config: ConnectionConfig) -> anyio.abc.ByteStream:
    """A TCP (or TLS, with ``config.ssl_context``) stream within ``connect_timeout_s``."""
    with translate_io_errors(f"connecting to {host}:{port}"):
        with anyio.fail_after(config.connect_timeout_s):
            if config.transport is not None:
                stream: anyio.abc.ByteStream = await config.transport(host, port)
                return stream
            if config.ssl_context is None:
                if running_asyncio_loop() is not None:
                    return await connect_plain(host, port)  # see net/asyncio_stream.py
                return await anyio.connect_tcp(host, port)
            return await anyio.connect_tcp(
                host,
                port,
                ssl_context=config.ssl_context,
                tls_hostname=host,
                # Brokers may close without a TLS close_notify; treat that as EOF.
                tls_standard_compatible=False,
            )
