"""Pure, sans-IO Kafka protocol: primitives, generated messages, framing, record batches.

Nothing in this package performs I/O, reads clocks, logs or imports anyio/pydantic.
"""
