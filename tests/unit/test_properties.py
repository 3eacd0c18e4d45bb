"""Property tests (hypothesis): the output does not depend on partition interleaving or replays."""

from __future__ import annotations

import zlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from debezium_bridge.core import Translator
from debezium_bridge.formats.canonical import to_json
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.records import RawRecord
from tests.unit.envelopes import TOPIC, event, lsn, row, tombstone

PARTITIONS = 3


def _partition(key: int) -> int:
    return zlib.crc32(str(key).encode()) % PARTITIONS


@st.composite
def histories(draw) -> list[list[RawRecord]]:
    """A simulated table history as per-partition record lists (Debezium's emission rules)."""
    live: dict[int, str] = {}
    next_key = 0
    parts: list[list[RawRecord]] = [[] for _ in range(PARTITIONS)]

    def put(op, key, **kw):
        p = _partition(key)
        if op == "tombstone":
            parts[p].append(tombstone(key, partition=p, offset=len(parts[p])))
        else:
            parts[p].append(event(op, key, partition=p, offset=len(parts[p]), **kw))

    n_tx = draw(st.integers(1, 12))
    for tx in range(1, n_tx + 1):
        commit = lsn(tx * 10)
        for change_no in range(1, draw(st.integers(1, 3)) + 1):
            pos = {"commit": commit, "change": lsn(tx * 10 - 5, change_no)}
            choices = ["insert"] + (["update", "delete", "pk"] if live else [])
            kind = draw(st.sampled_from(choices))
            if kind == "insert":
                k, next_key = next_key, next_key + 1
                live[k] = "v0"
                put("c", k, serial=1, after=row(k, "v0"), **pos)
            elif kind == "update":
                k = draw(st.sampled_from(sorted(live)))
                old, new = live[k], f"v{tx}{change_no}"
                live[k] = new
                put("u", k, serial=2, before=row(k, old), after=row(k, new), **pos)
            else:
                k = draw(st.sampled_from(sorted(live)))
                val = live.pop(k)
                put("d", k, serial=1, before=row(k, val), **pos)
                put("tombstone", k)
                if kind == "pk":
                    nk, next_key = next_key, next_key + 1
                    live[nk] = val
                    put("c", nk, serial=2, after=row(nk, val), **pos)
    return parts


def translate(records: list[RawRecord]) -> list[bytes]:
    t = Translator()
    t.expect((TOPIC, p) for p in range(PARTITIONS))
    out = [to_json(o) for o in t.translate(records) if isinstance(o, ChangeRecord)]
    assert t.counters.balanced and t.counters.dead_letters == 0
    return out


def _round_robin(parts: list[list[RawRecord]]) -> list[RawRecord]:
    out, idx = [], [0] * len(parts)
    while any(idx[p] < len(parts[p]) for p in range(len(parts))):
        for p in range(len(parts)):
            if idx[p] < len(parts[p]):
                out.append(parts[p][idx[p]])
                idx[p] += 1
    return out


def _interleave(parts: list[list[RawRecord]], choices: list[int]) -> list[RawRecord]:
    idx, out, i = [0] * len(parts), [], 0
    while True:
        open_parts = [p for p in range(len(parts)) if idx[p] < len(parts[p])]
        if not open_parts:
            return out
        p = open_parts[choices[i % len(choices)] % len(open_parts)] if choices else open_parts[0]
        i += 1
        out.append(parts[p][idx[p]])
        idx[p] += 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.lists(st.integers(0, 10), max_size=60))
def test_any_interleaving_gives_the_same_output(parts, choices):
    assert translate(_interleave(parts, choices)) == translate(_round_robin(parts))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.integers(0, PARTITIONS - 1), st.integers(0, 1000), st.integers(0, 1000),
       st.lists(st.integers(0, 10), max_size=60))
def test_replaying_any_suffix_gives_the_same_output(parts, p, cut, start, choices):
    expected = translate(_round_robin(parts))
    part = parts[p]
    if part:
        cut = cut % (len(part) + 1)  # the replay happens after `cut` records were delivered
        start = start % (cut + 1)    # and re-sends records start..cut-1 with new offsets
        replay = [RawRecord(r.topic, r.partition, len(part) + i, r.timestamp, r.key, r.value,
                            r.headers) for i, r in enumerate(part[start:cut])]
        parts = [list(x) for x in parts]
        parts[p] = part[:cut] + replay + part[cut:]
    assert translate(_interleave(parts, choices)) == expected
