"""Net changes of a closed LSN window: the rules of ``cdc.fn_cdc_get_net_changes_<ci>``.

Sources: WORK = MS Learn "Work with change data" (query functions, row filter options,
``sys.fn_cdc_increment_lsn``); NET = MS Learn ``cdc.fn_cdc_get_net_changes_<capture_instance>``
(``__$start_lsn`` of the final change, ``__$operation`` 1/2/4 or 1/5, ``__$update_mask`` only
with 'all with mask' and only for updates); the issue's contract (insert…delete gives nothing,
a key change is a delete of the old key and an insert of the new). Expected values follow from
those rules and the rows given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.core.net import (
    NetChanges,
    Window,
    apply_changes,
    apply_net_changes,
    consecutive_windows,
    net_changes,
    net_rows,
    windows_ending_at,
)
from debezium_bridge.core.pipeline import Pipeline
from debezium_bridge.errors import ConfigError, LsnFormatError
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.lsn import decrement_lsn, increment_lsn
from debezium_bridge.testing.simulator import demo
from tests.unit.cdc_model import mask_hex
from tests.unit.cdc_support import row, run

ALL = mask_hex([1, 2, 3, 4, 5])
T1, T2, T3, T4 = (0x0000002500000D080000 + 0x100 * i for i in range(1, 5))


def _r(i: int, **extra: Any) -> dict[str, Any]:
    return {"id": i, "name": f"n{i}", "amount": "1.50", "notes": "x", "flag": False, **extra}


def _changes(rows: list[dict[str, Any]], tmp: Path) -> list[ChangeRecord]:
    result = run(rows, tmp)
    assert not result.dead
    return result.changes


def _lsn(value: int) -> str:
    return f"0x{value + 0x10:020X}"  # the commit LSN of transaction T (row(T + 0x10, …))


def _rows_of(changes: list[ChangeRecord], mode: str, window: Window | None = None
             ) -> list[dict[str, Any]]:
    return list(net_rows(net_changes(changes, window, mode), mode))  # type: ignore[arg-type]


HISTORY = [
    row(T1 + 0x10, T1 + 2, 2, ALL, **_r(1)),                            # T1 insert 1
    row(T1 + 0x10, T1 + 4, 2, ALL, **_r(2)),                            # T1 insert 2
    row(T2 + 0x10, T2 + 2, 3, mask_hex([2]), **_r(1)),                  # T2 update 1 name
    row(T2 + 0x10, T2 + 2, 4, mask_hex([2]), **_r(1, name="a")),
    row(T2 + 0x10, T2 + 4, 2, ALL, **_r(3)),                            # T2 insert 3
    row(T3 + 0x10, T3 + 2, 3, mask_hex([3]), **_r(1, name="a")),        # T3 update 1 amount
    row(T3 + 0x10, T3 + 2, 4, mask_hex([3]), **_r(1, name="a", amount="9.00")),
    row(T3 + 0x10, T3 + 4, 1, ALL, **_r(3)),                            # T3 delete 3
    row(T3 + 0x10, T3 + 6, 1, ALL, **_r(2)),                            # T3 key change 2 → 5
    row(T3 + 0x10, T3 + 6, 2, ALL, **_r(5, name="n2")),
    row(T4 + 0x10, T4 + 2, 1, ALL, **_r(1, name="a", amount="9.00")),   # T4 delete 1
    row(T4 + 0x10, T4 + 4, 2, ALL, **_r(1, name="b")),                  # T4 insert 1 again
]


def test_window_is_closed_at_both_ends(tmp_path: Path) -> None:
    """WORK: both the lower and the upper LSN bound are included in the interval."""
    changes = _changes(HISTORY, tmp_path)
    window = Window.of(_lsn(T2), _lsn(T2))
    rows = _rows_of(changes, "all", window)
    assert {r["id"]: r["__$operation"] for r in rows} == {1: 4, 3: 2}
    assert all(r["__$start_lsn"] == _lsn(T2) for r in rows)


def test_one_row_per_key_with_its_final_content(tmp_path: Path) -> None:
    """WORK/NET: one change per changed source row; the values are the row's final content;
    insert then update is an insert with the final values; __$start_lsn is the LSN of the
    final change."""
    changes = _changes(HISTORY[:7], tmp_path)
    rows = _rows_of(changes, "all")
    assert len(rows) == 3 and {r["id"] for r in rows} == {1, 2, 3}
    one = next(r for r in rows if r["id"] == 1)
    assert (one["id"], one["__$operation"], one["name"], one["amount"]) == (1, 2, "a", "9.00")
    assert one["__$start_lsn"] == _lsn(T3)


def test_insert_then_delete_in_the_window_gives_nothing(tmp_path: Path) -> None:
    """The issue: insert … delete inside the interval gives nothing."""
    changes = _changes(HISTORY, tmp_path)
    rows = _rows_of(changes, "all", Window.of(_lsn(T2), _lsn(T3)))
    assert 3 not in {r["id"] for r in rows}


def test_operations_of_the_all_filter(tmp_path: Path) -> None:
    """WORK: with 'all' the operations are insert (2), delete (1) or update (4) and the mask is
    always NULL. Existed before and after (even deleted and inserted again in between) is an
    update; existed before, not after, a delete with the values it had; a key change is a
    delete of the old key and an insert of the new."""
    changes = _changes(HISTORY, tmp_path)
    rows = _rows_of(changes, "all", Window.of(_lsn(T2), _lsn(T4)))
    by_id = {r["id"]: r for r in rows}
    assert {k: r["__$operation"] for k, r in by_id.items()} == {1: 4, 2: 1, 5: 2}
    assert by_id[2]["name"] == "n2" and by_id[1]["name"] == "b"
    assert all(r["__$update_mask"] is None for r in rows)


def test_all_with_mask_aggregates_the_changed_columns_of_updates(tmp_path: Path) -> None:
    """WORK: 'all with mask' returns an aggregated mask reflecting all changes of the row
    (needed for a non-NULL mask on an update); NET: marked for __$operation = 4 only."""
    changes = _changes(HISTORY[:7], tmp_path)
    rows = _rows_of(changes, "all-with-mask", Window.of(_lsn(T2), _lsn(T3)))
    by_id = {r["id"]: r for r in rows}
    assert by_id[1]["__$operation"] == 4 and by_id[1]["__$update_mask"] == mask_hex([2, 3])
    assert by_id[3]["__$operation"] == 2 and by_id[3]["__$update_mask"] is None
    [net] = [c for c in net_changes(changes, Window.of(_lsn(T2), _lsn(T3)), "all-with-mask")
             if c.key == {"id": 1}]
    assert net.changed_columns == ["name", "amount"]


def test_all_with_merge_gives_delete_or_upsert(tmp_path: Path) -> None:
    """WORK: with 'all with merge' the operation is 1 for a delete and 5 for an insert or an
    update (canonical op ``upsert``)."""
    changes = _changes(HISTORY, tmp_path)
    rows = _rows_of(changes, "all-with-merge", Window.of(_lsn(T2), _lsn(T4)))
    assert {r["id"]: r["__$operation"] for r in rows} == {1: 5, 2: 1, 5: 5}
    ops = {c.key["id"]: c.op for c in net_changes(changes, Window.of(_lsn(T2), _lsn(T4)),
                                                  "all-with-merge")}
    assert ops == {1: "upsert", 2: "delete", 5: "upsert"}


def test_keyless_tables_have_no_net_changes(tmp_path: Path) -> None:
    """WORK: the net changes function exists only with a primary key or a unique index."""
    description = {"dbo_log": {"table": "db.dbo.log", "columns": [["msg", "nvarchar(20)"]]}}
    result = run([row(T1 + 0x10, T1 + 2, 2, "0x01", msg="hi")], tmp_path,
                 description=description)
    net = NetChanges()
    net.add_many(result.changes)
    assert net.result() == [] and net.counters.keyless == 1 and net.counters.balanced


def test_increment_lsn_leaves_no_lsn_between() -> None:
    """sys.fn_cdc_increment_lsn: the result is greater and no LSN lies between the two."""
    lsn = bytes.fromhex("0000002500000d08ffff")
    nxt = increment_lsn(lsn)
    assert nxt == bytes.fromhex("0000002500000d090000")
    assert int.from_bytes(nxt, "big") == int.from_bytes(lsn, "big") + 1
    assert decrement_lsn(nxt) == lsn
    with pytest.raises(LsnFormatError):
        increment_lsn(b"\xff" * 10)


def test_consecutive_windows_count_each_change_once(tmp_path: Path) -> None:
    """WORK: the next query's lower bound is sys.fn_cdc_increment_lsn of the previous upper
    bound, so rows are neither repeated nor lost."""
    changes = _changes(HISTORY, tmp_path)
    windows = consecutive_windows([_lsn(T1), _lsn(T2), _lsn(T3), _lsn(T4)])
    assert windows[1].from_lsn == increment_lsn(bytes.fromhex(_lsn(T2)[2:]))
    seen = []
    for window in windows:
        net = NetChanges(window)
        net.add_many(changes)
        seen.append(net.counters.in_window)
    assert sum(seen) == len(changes)
    assert windows_ending_at([_lsn(T2), _lsn(T4)])[1] == Window(windows[1].from_lsn,
                                                                windows[2].to_lsn)
    with pytest.raises(ConfigError):
        Window.of(_lsn(T3), _lsn(T1))


def test_unchanged_lob_keeps_the_value_the_window_saw(tmp_path: Path) -> None:
    """An update that did not send an unchanged nvarchar(max) column (NULL in row 3, bit 0)
    leaves the value the insert earlier in the window gave."""
    rows = [row(T1 + 0x10, T1 + 2, 2, ALL, **_r(1, notes="long")),
            row(T2 + 0x10, T2 + 2, 3, mask_hex([2]), **_r(1, notes=None)),
            row(T2 + 0x10, T2 + 2, 4, mask_hex([2]), **_r(1, name="z", notes=None))]
    [net] = net_changes(_changes(rows, tmp_path))
    assert net.op == "insert" and net.after is not None and net.after["notes"] == "long"
    assert net.unavailable_columns == []


def test_keys_rotated_inside_a_window_keep_their_unsent_columns(tmp_path: Path) -> None:
    """Keys 1 and 8 swap rows through key 4 in one transaction (1→4, 8→1, 4→8: three updates of
    the key column, each a 3/4 pair), the nvarchar(max) ``notes`` unchanged and so not sent.
    The window's net changes, applied as one set to the table before the window, give the
    table after it: key 1 holds 8's row and key 8 holds 1's, ``notes`` included (the values
    the window never saw come from the moved rows as they were before the window)."""
    key = mask_hex([1])
    rows = [row(T1 + 0x10, T1 + 2, 2, ALL, **_r(1, notes="one")),
            row(T1 + 0x10, T1 + 4, 2, ALL, **_r(8, notes="eight")),
            row(T2 + 0x10, T2 + 2, 3, key, **_r(1, notes=None)),             # 1 → 4
            row(T2 + 0x10, T2 + 2, 4, key, **_r(4, name="n1", notes=None)),
            row(T2 + 0x10, T2 + 4, 3, key, **_r(8, notes=None)),             # 8 → 1
            row(T2 + 0x10, T2 + 4, 4, key, **_r(1, name="n8", notes=None)),
            row(T2 + 0x10, T2 + 6, 3, key, **_r(4, name="n1", notes=None)),  # 4 → 8
            row(T2 + 0x10, T2 + 6, 4, key, **_r(8, name="n1", notes=None))]
    changes = _changes(rows, tmp_path)
    before = apply_changes({}, [c for c in changes if c.op == "insert"])  # T1
    assert {k[1]: v["notes"] for k, v in before.items()} == {b'{"id":1}': "one",
                                                             b'{"id":8}': "eight"}
    window = Window.of(_lsn(T2), _lsn(T2))
    after = apply_net_changes(dict(before), net_changes(changes, window))
    assert {k[1]: (v["name"], v["notes"]) for k, v in after.items()} == {
        b'{"id":1}': ("n8", "eight"), b'{"id":8}': ("n1", "one")}


def test_net_changes_from_debezium_input() -> None:
    """From Debezium input (positions instead of change-table rows): the README demo traffic
    (simulator inputs: snapshot of 1, 2, 3; insert 4 and 5; update 2; delete 3; key change
    4 → k; update 1) nets, over the whole stream, to: insert 5, update 2, delete 3, insert k
    (4 was inserted and moved away inside the window: nothing), update 1; snapshot reads are
    not changes."""
    records, expectation = demo()
    changes = [item for item in Pipeline().translate(records) if isinstance(item, ChangeRecord)]
    net = NetChanges()
    net.add_many(changes)
    result = {c.key["id"]: c.op for c in net.result()}
    key_change = next(c for c in expectation.changes if c.old_key is not None)
    assert result == {5: "insert", 2: "update", 3: "delete", key_change.key["id"]: "insert",
                      1: "update"}
    assert net.counters.skipped == 3 and net.counters.balanced
