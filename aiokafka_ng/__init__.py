"""aiokafka_ng: an asyncio-native (anyio) Kafka client."""

__version__ = "0.1.0.dev0"
