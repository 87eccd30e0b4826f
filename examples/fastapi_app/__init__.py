"""A FastAPI app that publishes to Kafka (see ``app.py``)."""
