"""The golden demo case, checked the same way through every entry point (CLI, Spark batch,
Spark streaming, spark-submit, ``debezium-bridge spark``).

The expectation comes from the traffic generator's inputs (:class:`DemoExpectation`, itself
checked against the raw traffic in ``tests/unit/test_samples.py``), not from any output.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from debezium_bridge.testing.simulator import DemoExpectation


def _text(key: Mapping[str, Any] | None) -> str:
    return json.dumps(dict(key), sort_keys=True) if key is not None else "null"


def _position(text: str | None) -> str | None:
    return text.lower() if text else None


def assert_demo_feed(records: Iterable[Mapping[str, Any]], expected: DemoExpectation) -> None:
    """``records``: canonical records (parsed JSON) in any order."""
    got = sorted(
        (r["op"], _text(r["key"]), _text(r["old_key"]), _position(r["position"]["commit_lsn"]),
         _position(r["position"]["change_lsn"]), tuple(r["unavailable_columns"]))
        for r in records)
    want = sorted(
        (c.op, _text(c.key), _text(c.old_key), _position(c.commit_lsn),
         _position(c.change_lsn), tuple(c.unavailable_columns))
        for c in expected.changes)
    assert got == want


def assert_demo_dead_letters(headers: Iterable[Mapping[str, str]], expected: DemoExpectation,
                             topic: str = "server1.testDB.dbo.customers") -> None:
    """``headers``: the ``__connect.errors.*`` headers of each dead letter, decoded."""
    letters = list(headers)
    assert len(letters) == expected.corrupt
    for h in letters:
        assert h["__connect.errors.topic"] == topic
        assert h["__connect.errors.stage"] == "decode"
        assert h["__connect.errors.offset"].isdigit()
        assert "invalid JSON" in h["__connect.errors.exception.message"]


def assert_demo_counters(c: Mapping[str, Any], expected: DemoExpectation,
                         extra_side_records: int = 0) -> None:
    assert c["balanced"] is True
    assert c["records_in"] == expected.records + extra_side_records
    assert c["changes_out"] == len(expected.changes)
    assert c["merged"] == 1
    assert c["duplicates"] == expected.duplicates
    assert c["tombstones"] == expected.tombstones
    assert c["dead_letters"] == expected.corrupt
    assert c["side_records"] == expected.side_records + extra_side_records
    assert c["pending"] == 0
