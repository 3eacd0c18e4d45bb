"""A replay whose image differs from the original is a dead letter, never a dropped duplicate.

Debezium re-sends a suffix after a restart with the same ``source``, ``op``, key and images; only
the envelope ``ts_ms`` and the Kafka coordinates change. An event with the identity of one
already translated (table, commit_lsn, change_lsn, event_serial_no, op, key; snapshot rows:
table, key, commit_lsn) but another ``before``/``after`` is corruption or a different event: it
goes to the DLQ (stage ``replay-mismatch``) and is counted in ``replay_mismatches`` (part of
``dead_letters``). The events are hand-built like reference §1 (see ``envelopes.py``).
"""

from __future__ import annotations

from typing import Any

from debezium_bridge.core import Translator, TranslatorConfig
from debezium_bridge.core.translator import image_digest
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import RawRecord
from tests.unit.envelopes import TOPIC, delete, event, insert, lsn, row, tombstone, update

LATER = 1_800_000_000_000
"""The envelope ts_ms of the replayed copies (the connector's clock after the restart)."""


def run(records: list[RawRecord], config: TranslatorConfig | None = None
        ) -> tuple[list[ChangeRecord], list[DeadLetter], Translator]:
    translator = Translator(config)
    out = list(translator.translate(records))
    counters = translator.counters
    assert counters.balanced, counters.summary()
    assert counters.pending == 0
    dead = [o for o in out if isinstance(o, DeadLetter)]
    assert len(dead) == counters.dead_letters
    return [o for o in out if isinstance(o, ChangeRecord)], dead, translator


def assert_mismatch(letter: DeadLetter, replay: RawRecord) -> None:
    assert letter.record == replay
    assert letter.stage == "replay-mismatch"
    assert letter.error_class == "ReplayMismatchError"
    assert "differ from" in letter.message and TOPIC.split(".", 1)[1] in letter.message


def test_an_identical_replay_is_a_duplicate() -> None:
    first = [insert(1, 1, offset=0), update(1, 2, "a", "b", offset=1)]
    replay = [update(1, 2, "a", "b", offset=2, ts_ms=LATER)]
    changes, dead, t = run(first + replay)
    assert [c.op for c in changes] == ["insert", "update"] and dead == []
    assert (t.counters.duplicates, t.counters.replay_mismatches) == (1, 0)


def test_a_replay_at_the_mark_with_another_after_image_is_a_dead_letter() -> None:
    original = update(1, 2, "a", "b", offset=1)
    replay = update(1, 2, "a", "CORRUPT", offset=2, ts_ms=LATER)
    changes, dead, t = run([insert(1, 1, offset=0), original, replay])
    assert [(c.op, c.after and c.after["name"]) for c in changes] == [("insert", "a"),
                                                                      ("update", "b")]
    (letter,) = dead
    assert_mismatch(letter, replay)
    assert (t.counters.duplicates, t.counters.replay_mismatches, t.counters.dead_letters) == \
        (0, 1, 1)


def test_a_replay_below_the_mark_with_another_before_image_is_a_dead_letter() -> None:
    first = [insert(1, 1, offset=0), update(1, 2, "a", "b", offset=1), delete(1, 3, offset=2),
             tombstone(1, offset=3)]
    replay = [update(1, 2, "x", "b", offset=4, ts_ms=LATER),  # before image differs
              delete(1, 3, offset=5, ts_ms=LATER), tombstone(1, offset=6)]  # identical
    changes, dead, t = run(first + replay)
    assert [c.op for c in changes] == ["insert", "update", "delete"]
    (letter,) = dead
    assert_mismatch(letter, replay[0])
    assert (t.counters.duplicates, t.counters.replay_mismatches) == (1, 1)


def test_a_snapshot_row_read_again_with_another_image_is_a_dead_letter() -> None:
    snap = [event("r", i, commit=lsn(1), change=None, serial=None, after=row(i),
                  snapshot="true", offset=i) for i in range(2)]
    again = event("r", 1, commit=lsn(1), change=None, serial=None, after=row(1, "z"),
                  snapshot="true", offset=9)
    changes, dead, t = run([*snap, again])
    assert [c.key["id"] for c in changes] == [0, 1]
    (letter,) = dead
    assert_mismatch(letter, again)
    assert t.counters.replay_mismatches == 1


def test_a_keyless_replay_in_another_partition_with_another_image_is_a_dead_letter() -> None:
    rec = event("c", None, commit=lsn(3), change=lsn(3, 1), serial=1, after=row(1), partition=0)
    again = event("c", None, commit=lsn(3), change=lsn(3, 1), serial=1, after=row(2),
                  partition=1, offset=5)
    changes, dead, t = run([rec, again])
    assert len(changes) == 1 and changes[0].after == row(1)
    (letter,) = dead
    assert_mismatch(letter, again)
    assert (t.counters.duplicates, t.counters.replay_mismatches) == (0, 1)


def test_a_replay_of_a_waiting_event_is_compared_too() -> None:
    """The original still waits for the watermark (partition 1 has not spoken) when the
    differing copy arrives."""
    t = Translator()
    t.expect([(TOPIC, 0), (TOPIC, 1)])
    original = insert(1, 4, offset=0)
    replay = insert(1, 4, name="other", offset=1, ts_ms=LATER)
    t.process_many([original, replay])
    changes, dead = t.drain()
    assert changes == [] and len(dead) == 1
    assert_mismatch(dead[0], replay)
    t.flush()
    assert [c.after for c in t.drain()[0]] == [row(1)]
    assert t.counters.balanced


def test_when_the_original_is_forgotten_the_replay_is_dropped_as_before() -> None:
    """The memory of images is bounded by ``dedupe_capacity`` (the most recent events): a
    replay of an event no longer remembered cannot be compared and counts as a duplicate."""
    config = TranslatorConfig(dedupe_capacity=4)
    first = [insert(i, i, offset=i) for i in range(1, 9)]  # 8 events: event 1 is forgotten
    replay = insert(1, 1, name="other", offset=20, ts_ms=LATER)  # below the mark
    changes, dead, t = run([*first, replay], config)
    assert len(changes) == 8 and dead == []
    assert (t.counters.duplicates, t.counters.replay_mismatches) == (1, 0)
    assert t.state_size()["image_digests"] <= 4


def test_the_digest_covers_the_images_and_nothing_else() -> None:
    t = Translator()
    decode = t.decoder.decode
    a = decode(update(1, 2, "a", "b", offset=1))
    same = decode(update(1, 2, "a", "b", offset=9, partition=3, ts_ms=LATER))
    other = decode(update(1, 2, "a", "c", offset=1))
    reordered: Any = decode(update(1, 2, "a", "b", offset=1))
    reordered.after = dict(reversed(list(reordered.after.items())))  # key order is not content
    assert image_digest(a) == image_digest(same) == image_digest(reordered)  # type: ignore[arg-type]
    assert image_digest(a) != image_digest(other)  # type: ignore[arg-type]
    assert len(image_digest(a)) == 8  # type: ignore[arg-type]
