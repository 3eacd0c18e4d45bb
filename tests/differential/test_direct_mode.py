"""Transactions whose ``change_lsn`` does not rise along a partition, through both cores.

The SQL Server connector's ``data.query.mode=direct`` (the default from Debezium 3.4, DBZ-9394)
reads a capture instance's change table ordered by ``__$start_lsn, __$command_id, __$seqval``
(DBZ-8858), and Microsoft's change-table reference says ``__$seqval`` "should not be used for
ordering. Instead, use the ``__$command_id`` column": inside one transaction, a later command
can carry a lower ``change_lsn`` (= ``__$seqval``) in the same partition. Such an event is new,
not a re-sent one (SPEC §4: only a re-sent event — same table, commit_lsn, change_lsn, serial,
op and key — produces no second output). Re-sent events, after a connector restart, are still
dropped, inside the transaction and before it.
"""

from __future__ import annotations

import json

import pytest

from debezium_bridge.core import native as native_core
from debezium_bridge.model.records import RawRecord
from tests.differential.streams import Stream
from tests.differential.test_cores import run_both
from tests.unit.envelopes import TOPIC, event, lsn, row


@pytest.fixture(autouse=True)
def _no_forced_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native_core.ENV, raising=False)


def transaction(first_offset: int) -> list[RawRecord]:
    """One transaction (commit 9) as direct mode sends it, by command: each command touches
    another row, with a lower ``__$seqval`` than the command before it."""
    return [event("u", 1, commit=lsn(9), change=lsn(9, 0x30), serial=2, before=row(1, "a"),
                  after=row(1, "b"), offset=first_offset),
            event("c", 2, commit=lsn(9), change=lsn(9, 0x20), serial=1, after=row(2),
                  offset=first_offset + 1),
            event("d", 3, commit=lsn(9), change=lsn(9, 0x10), serial=1, before=row(3),
                  offset=first_offset + 2)]


EARLIER = event("c", 3, commit=lsn(8), change=lsn(8, 1), serial=1, after=row(3), offset=0)


def outcome(records: list[RawRecord], batch: int) -> tuple[list[tuple[str, int]], dict[str, int]]:
    python, _ = run_both(Stream(records, [(TOPIC, 0)], {}, "bytes"), batch=batch, expect=True)
    lines = [json.loads(line) for line in python[0].splitlines()]
    return sorted((c["op"], c["key"]["id"]) for c in lines), python[2]


@pytest.mark.parametrize("batch", [1, 3, 100])
def test_every_command_of_the_transaction_comes_out(batch: int) -> None:
    changes, counters = outcome([EARLIER, *transaction(1)], batch)
    assert changes == [("delete", 3), ("insert", 2), ("insert", 3), ("update", 1)]
    assert counters["duplicates"] == 0


@pytest.mark.parametrize("batch", [1, 3, 100])
def test_a_restart_that_resends_the_transaction_adds_nothing(batch: int) -> None:
    """The connector restarts and re-sends from the earlier transaction on (later offsets,
    same source blocks): every copy is a duplicate."""
    resent = [RawRecord(r.topic, r.partition, r.offset + 4, r.timestamp, r.key, r.value)
              for r in (EARLIER, *transaction(1))]
    changes, counters = outcome([EARLIER, *transaction(1), *resent], batch)
    assert changes == [("delete", 3), ("insert", 2), ("insert", 3), ("update", 1)]
    assert counters["duplicates"] == 4
