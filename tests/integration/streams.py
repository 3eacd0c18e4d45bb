"""Helpers for integration tests: run a streaming query to completion and collect its rows."""

from __future__ import annotations

from typing import Any


def run_available_now(frame: Any, checkpoint: str) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    """Run ``frame`` with ``Trigger.AvailableNow``; the rows of each micro-batch and the
    progress reports."""
    batches: list[list[Any]] = []

    def collect(batch: Any, batch_id: int) -> None:
        batches.append(batch.collect())

    query = (frame.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise AssertionError(f"query failed: {query.exception()}")
    return batches, list(query.recentProgress)
