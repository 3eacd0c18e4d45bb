"""Clients of the services a run depends on: Kafka (confluent-kafka) and the schema registry.

A service that does not answer is retried with backoff; when it still fails, the clients raise
:class:`~debezium_bridge.errors.ServiceError` so the run stops loudly instead of rejecting good
records.
"""
