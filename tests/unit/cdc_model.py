"""A small model of a SQL Server table with change data capture, for the tests: it applies
operations to a table and writes the change-table rows the documents describe, independently of
the product's code.

Rules it follows (MS Learn ``cdc.<capture_instance>_CT`` and "About change data capture"):

* every change of one transaction has the transaction's commit LSN in ``__$start_lsn``; each
  operation has its own ``__$seqval`` (increasing in the transaction), and the commit LSN is
  above every ``__$seqval`` of its transaction;
* an insert is one row 2, a delete one row 1 (values before the delete), an update two rows 3
  (old values) and 4 (new values) at one ``__$seqval``; an update of key columns that SQL Server
  logs as a "deferred update" is a row 1 and a row 2 at one ``__$seqval``;
* the update mask has all bits set for inserts and deletes; for updates the bits of the
  changed columns (bit n = ``column_ordinal`` n, the lowest bit of the last byte first);
* a ``varchar(max)``/``nvarchar(max)`` column is NULL in row 3 unless the update changed it;
* ``cdc.lsn_time_mapping.tran_end_time`` of each commit LSN is a ``datetime`` (server time).

The table's state after every commit LSN is kept, so tests can compare the product's net
changes with the truth.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "int"),
    ("name", "nvarchar(50)"),
    ("amount", "decimal(10,2)"),
    ("notes", "nvarchar(max)"),
    ("flag", "bit"),
)
"""The model table ``testDB.dbo.orders``: key ``id``; columns in change-table order."""
KEY = ("id",)
CAPTURE_INSTANCE = "dbo_orders"
DESCRIPTION = {
    CAPTURE_INSTANCE: {"table": "testDB.dbo.orders", "key": list(KEY),
                       "columns": [[name, sql] for name, sql in COLUMNS]},
}


def mask_hex(ordinals: Sequence[int], width: int = len(COLUMNS)) -> str:
    """``0x…`` of an update mask with the given ordinals set (bit n-1 of a big number)."""
    value = 0
    for ordinal in ordinals:
        value |= 1 << (ordinal - 1)
    return "0x" + value.to_bytes((width + 7) // 8, "big").hex().upper()


def lsn_hex(value: int) -> str:
    return f"0x{value:020X}"


def lsn_colons(value: int) -> str:
    h = f"{value:020x}"
    return f"{h[:8]}:{h[8:16]}:{h[16:]}"


@dataclass
class Change:
    """One operation in a transaction."""

    kind: str
    """insert, update, delete, key-delete-insert (rows 1+2), key-update (rows 3+4)."""
    key: int
    row: dict[str, Any] | None = None
    """insert: the row; update: the changed columns; key changes: the new row."""


@dataclass
class CdcModel:
    """Applies transactions to the table and records change-table rows and states."""

    state: dict[int, dict[str, Any]] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    states: list[tuple[int, dict[int, dict[str, Any]]]] = field(default_factory=list)
    """(commit LSN, state after it), in commit order."""
    times: dict[int, str] = field(default_factory=dict)
    lsn: int = 0x0000002500000D080000
    clock: dt.datetime = dt.datetime(2024, 1, 2, 3, 4, 5, 123000)  # noqa: DTZ001 (server time)

    def commit(self, changes: Sequence[Change]) -> int:
        seqvals = []
        for _ in changes:
            self.lsn += 2
            seqvals.append(self.lsn)
        self.lsn += 5
        commit = self.lsn
        self.clock += dt.timedelta(milliseconds=1003)
        when = self.clock.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        self.times[commit] = when
        for change, seqval in zip(changes, seqvals, strict=True):
            self._apply(change, commit, seqval, when)
        self.states.append((commit, {k: dict(v) for k, v in self.state.items()}))
        return commit

    def _row(self, commit: int, seqval: int, op: int, values: Mapping[str, Any],
             mask: str, when: str) -> None:
        self.rows.append({"__$start_lsn": lsn_hex(commit), "__$seqval": lsn_hex(seqval),
                          "__$operation": op, "__$update_mask": mask, **values,
                          "__$commit_time": when})

    def _apply(self, change: Change, commit: int, seqval: int, when: str) -> None:
        all_bits = mask_hex(range(1, len(COLUMNS) + 1))
        if change.kind == "insert":
            assert change.row is not None and change.key not in self.state
            row = {"id": change.key, **change.row}
            self.state[change.key] = row
            self._row(commit, seqval, 2, row, all_bits, when)
        elif change.kind == "delete":
            row = self.state.pop(change.key)
            self._row(commit, seqval, 1, row, all_bits, when)
        elif change.kind == "update":
            assert change.row is not None
            old = self.state[change.key]
            new = {**old, **change.row}
            changed = [i for i, (name, _) in enumerate(COLUMNS, start=1)
                       if old[name] != new[name]]
            mask = mask_hex(changed)
            old_row = dict(old)
            if old["notes"] is not None and new["notes"] == old["notes"]:
                old_row["notes"] = None  # nvarchar(max) unchanged: NULL in row 3
            self.state[change.key] = new
            self._row(commit, seqval, 3, old_row, mask, when)
            self._row(commit, seqval, 4, new, mask, when)
        else:  # a key change
            assert change.row is not None
            old = self.state.pop(change.key)
            new = {**old, **change.row}
            self.state[new["id"]] = new
            if change.kind == "key-delete-insert":
                self._row(commit, seqval, 1, old, all_bits, when)
                self._row(commit, seqval, 2, new, all_bits, when)
            else:
                changed = [i for i, (name, _) in enumerate(COLUMNS, start=1)
                           if old[name] != new[name]]
                old_row = dict(old)
                if old["notes"] is not None and new["notes"] == old["notes"]:
                    old_row["notes"] = None
                self._row(commit, seqval, 3, old_row, mask_hex(changed), when)
                self._row(commit, seqval, 4, new, mask_hex(changed), when)

    def state_at(self, commit: int | None) -> dict[int, dict[str, Any]]:
        """The table after the last transaction with commit LSN <= ``commit`` (``None``: before
        any)."""
        found: dict[int, dict[str, Any]] = {}
        for lsn, state in self.states:
            if commit is not None and lsn <= commit:
                found = state
        return found


def canonical_value(name: str, value: Any) -> Any:
    """The canonical form of a model value (decimals keep their scale)."""
    if value is None:
        return None
    if name == "amount":
        return f"{value:.2f}" if not isinstance(value, str) else value
    return value


def as_state(model_state: Mapping[int, Mapping[str, Any]]) -> dict[int, dict[str, Any]]:
    return {k: {n: canonical_value(n, v) for n, v in row.items()}
            for k, row in model_state.items()}
