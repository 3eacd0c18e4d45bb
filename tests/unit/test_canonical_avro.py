"""``avro/canonical.avsc`` accepts the canonical records the translator really produces."""

from __future__ import annotations

import io
import json

import fastavro

from debezium_bridge.core import Translator
from debezium_bridge.formats.canonical import to_dict
from debezium_bridge.formats.debezium.registry import InMemoryRegistry
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.testing.simulator import demo_traffic
from tests.paths import ROOT


def test_demo_feed_round_trips_through_the_canonical_avro_schema():
    schema = fastavro.parse_schema(json.loads((ROOT / "avro" / "canonical.avsc").read_text()))
    records = [to_dict(o) for o in Translator().translate(demo_traffic("json-schema", 3,
                                                                       InMemoryRegistry()))
               if isinstance(o, ChangeRecord)]
    assert {r["op"] for r in records} == {"read", "insert", "update", "delete"}
    assert any(r["key_changed"] for r in records)
    buffer = io.BytesIO()
    fastavro.writer(buffer, schema, records, validator=True)
    buffer.seek(0)
    assert list(fastavro.reader(buffer)) == records
