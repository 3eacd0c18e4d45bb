"""Writes tests/data/stream-state-v1.bin: a streaming window state of the native core at commit
5d6b823 (state version 1, its waiting event in wire format 1), one delete (id 1, serial 1) of
table db.dbo.t waiting. Run with that commit's extension first on the path:

    PYTHONPATH=<a build of 5d6b823> python stream-state-v1.py stream-state-v1.bin
"""

import sys
from pathlib import Path

import pyarrow as pa

from debezium_bridge import _native

VALUE = (b'{"before":{"id":1,"v":"b"},"after":null,"source":{"version":"2.5.0.Final",'
         b'"connector":"sqlserver","name":"srv","ts_ms":1700000000000,"snapshot":"false",'
         b'"db":"db","schema":"dbo","table":"t","change_lsn":"0000002a:00000100:0001",'
         b'"commit_lsn":"0000002a:00000100:0001","event_serial_no":1},"op":"d",'
         b'"ts_ms":1700000000001,"transaction":null}')
HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
columns = pa.StructArray.from_arrays(
    [pa.array([b'{"id":1}'], pa.binary()), pa.array([VALUE], pa.binary()),
     pa.array(["srv.db.dbo.t"], pa.string()), pa.array([1], pa.int32()),
     pa.array([7], pa.int64()), pa.array([1], pa.int64()), pa.array([[]], pa.list_(HEADER))],
    names=["key", "value", "topic", "partition", "offset", "timestamp", "headers"])
decoder = _native.SparkDecoder(placeholder="__debezium_unavailable_value", binary_mode="bytes",
                               table_schemas=[])
# at 5d6b823 the staged rows are per event: bucket, commit_ms, payload
staged, declined, _counts, _clock = decoder.decode(columns, 1)
rows = pa.record_batch(staged)
assert not declined and rows.num_rows == 1, (declined, rows)
window = _native.StreamRelease(None, True, {}, None)  # type: ignore[attr-defined]
window.push(rows.column(2), pa.array([5], pa.int64()))
window.observe([])
window.add_transactions([])
window.run(0)
window.output()
state = bytes(window.dump())
assert state[:5] == b"DBNW\x01"
Path(sys.argv[1]).write_bytes(state)
