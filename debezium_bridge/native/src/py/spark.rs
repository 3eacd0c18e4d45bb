//! The Spark job's `translate` on the native core (`debezium_bridge.spark.translate`):
//!
//! * [`SparkDecoder`] (decode step, `mapInArrow`): the Kafka columns of one Arrow batch in one
//!   call, decoded natively into staged rows: one per state bucket, its events as
//!   [`crate::wire`] bytes packed by [`wire::pack`]; the rows it declines are returned by
//!   index for the Python decoder, whose events come back through [`SparkDecoder::wire`].
//! * [`release_batch`] (release step, `applyInArrow` of a batch DataFrame): one bucket's staged
//!   events through [`crate::window::BatchWindow`], out as one Arrow batch of output rows
//!   (canonical format).
//!
//! No panic crosses into Python: decoding runs under `catch_unwind` per record (a panic
//! declines the record), the rest under one `catch_unwind` per call, mapped to `ValueError`.

use super::NativeCore;
use crate::arrow::ArrowBatch;
use crate::decode::Input;
use crate::jsonw::token_bytes;
use crate::window::BatchWindow;
use crate::wire;
use arrow_array::builder::{BinaryBuilder, Int32Builder, Int64Builder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{
    new_null_array, Array, ArrayRef, BinaryArray, Int32Array, StringArray, StructArray,
};
use arrow_buffer::OffsetBuffer;
use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;
use arrow_schema::{DataType, Field, Fields};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyTuple};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

const NEWKEY: &[u8] = b"__debezium.newkey";
const OLDKEY: &[u8] = b"__debezium.oldkey";

/// An Arrow array from any object of the PyCapsule protocol (`__arrow_c_array__`).
fn import(obj: &Bound<'_, PyAny>) -> PyResult<ArrayRef> {
    let pair = obj.call_method0("__arrow_c_array__")?;
    let pair = pair.cast::<PyTuple>()?;
    let schema = pair.get_item(0)?;
    let schema = schema.cast::<PyCapsule>()?;
    let array = pair.get_item(1)?;
    let array = array.cast::<PyCapsule>()?;
    let schema_ptr = schema.pointer_checked(Some(c"arrow_schema"))?;
    let array_ptr = array.pointer_checked(Some(c"arrow_array"))?;
    // SAFETY: the capsules hold an FFI_ArrowSchema and an FFI_ArrowArray (the protocol's
    // names were checked); the array is moved out (its release callback moves with it) and
    // the schema only borrowed while the capsule lives.
    let data = unsafe {
        let ffi_array = FFI_ArrowArray::from_raw(array_ptr.as_ptr() as *mut FFI_ArrowArray);
        let ffi_schema = &*(schema_ptr.as_ptr() as *const FFI_ArrowSchema);
        arrow_array::ffi::from_ffi(ffi_array, ffi_schema)
    }
    .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(arrow_array::make_array(data))
}

fn bad(what: &str) -> PyErr {
    PyValueError::new_err(format!("native Spark step: {what}"))
}

fn caught<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    std::panic::catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(bad("internal error (panic caught)")))
}

/// The decode step's native decoder (one per worker process and configuration).
#[pyclass(unsendable, module = "debezium_bridge._native")]
pub struct SparkDecoder {
    inner: NativeCore,
    topic_names: hashbrown::HashMap<u32, Arc<str>>,
    /// Streaming: the progress of every partition from the events decoded here
    /// (`windowed.ProgressTracker.event`), per (topic id, partition).
    progress: Option<hashbrown::HashMap<(u32, i32), crate::stream::Mark>>,
}

/// Staged rows of the native events, rows declined, `(records, tombstones)`, the clock.
type Decoded = (ArrowBatch, Vec<u32>, (i64, i64), Option<i64>);

impl SparkDecoder {
    fn topic_name(&mut self, topic: u32) -> Arc<str> {
        self.topic_names
            .entry(topic)
            .or_insert_with(|| self.inner.core.topics[topic as usize].clone())
            .clone()
    }
}

#[pymethods]
impl SparkDecoder {
    #[new]
    #[pyo3(signature = (*, placeholder, binary_mode, table_schemas))]
    fn new(
        py: Python<'_>,
        placeholder: &str,
        binary_mode: &str,
        table_schemas: Vec<String>,
    ) -> PyResult<Self> {
        let mut inner = NativeCore::new(
            true,
            i64::MAX,
            0,
            placeholder,
            binary_mode,
            py.None(),
            py.None(),
        )?;
        inner.configure(table_schemas, false);
        Ok(SparkDecoder {
            inner,
            topic_names: Default::default(),
            progress: None,
        })
    }

    /// The source of Confluent Avro writer schemas (see `NativeCore.configure_avro`).
    fn configure_avro(&mut self, avro_schema: Py<PyAny>) {
        self.inner.configure_avro(avro_schema);
    }

    /// Decode one batch: `columns` is a struct array (`key` binary, `value` binary, `topic`
    /// string, `partition` int32, `offset` int64, `timestamp` int64 epoch ms, `headers`
    /// list<struct<key string, value binary>>). Returns the staged rows of the events decoded
    /// here, one per packed value in bucket order (`bucket` int32, `payload` binary: the
    /// events packed by [`wire::pack`] with their commit times, in the order they were read;
    /// a bucket's value is closed at [`PACKED_VALUE_BYTES`]), the indexes of the rows left to
    /// the Python decoder, `(records, tombstones)` handled here and the highest commit time.
    fn decode(
        &mut self,
        py: Python<'_>,
        columns: &Bound<'_, PyAny>,
        buckets: u32,
    ) -> PyResult<Decoded> {
        let array = import(columns)?;
        let s = array
            .as_struct_opt()
            .ok_or_else(|| bad("columns are not a struct array"))?;
        if s.num_columns() != 7 {
            return Err(bad("seven columns expected"));
        }
        let keys = s
            .column(0)
            .as_binary_opt::<i32>()
            .ok_or_else(|| bad("key: binary"))?;
        let values = s
            .column(1)
            .as_binary_opt::<i32>()
            .ok_or_else(|| bad("value: binary"))?;
        let topics = s
            .column(2)
            .as_string_opt::<i32>()
            .ok_or_else(|| bad("topic: string"))?;
        let partitions = s
            .column(3)
            .as_primitive_opt::<Int32Type>()
            .ok_or_else(|| bad("partition: int32"))?;
        let offsets = s
            .column(4)
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| bad("offset: int64"))?;
        let stamps = s
            .column(5)
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| bad("timestamp: int64"))?;
        let headers = s
            .column(6)
            .as_list_opt::<i32>()
            .ok_or_else(|| bad("headers: list"))?;
        let header_items = headers
            .values()
            .as_struct_opt()
            .ok_or_else(|| bad("headers: list of structs"))?;
        let header_names = header_items
            .column(0)
            .as_string_opt::<i32>()
            .ok_or_else(|| bad("header key: string"))?;
        let header_values = header_items
            .column(1)
            .as_binary_opt::<i32>()
            .ok_or_else(|| bad("header value: binary"))?;
        let n = s.len();
        // every event packed (`wire::pack`) into `staged`, its bucket and span in `spans`
        let mut staged: Vec<u8> = Vec::with_capacity(n * 512);
        let mut spans: Vec<(Packed, usize, usize)> = Vec::with_capacity(n);
        // per bucket: what its open value's last event holds, that value and its size
        let mut open: hashbrown::HashMap<u32, (wire::Repeats, u32, usize)> =
            hashbrown::HashMap::new();
        let mut declined = Vec::new();
        let mut records = 0i64;
        let mut tombstones = 0i64;
        let mut clock: Option<i64> = None;
        let mut buf = Vec::with_capacity(1024);
        let incremental = self.inner.core.interner.snapshot("incremental");
        for i in 0..n {
            if topics.is_null(i) || partitions.is_null(i) {
                declined.push(i as u32);
                continue;
            }
            let topic = topics.value(i);
            let partition = partitions.value(i);
            let offset = (!offsets.is_null(i)).then(|| offsets.value(i));
            let stamp = (!stamps.is_null(i)).then(|| stamps.value(i));
            if values.is_null(i) {
                records += 1;
                tombstones += 1;
                continue;
            }
            let mut has_headers = false;
            let mut newkey: Option<Option<&[u8]>> = None;
            let mut oldkey: Option<Option<&[u8]>> = None;
            let mut odd = false;
            if !headers.is_null(i) {
                let (from, to) = (
                    headers.value_offsets()[i] as usize,
                    headers.value_offsets()[i + 1] as usize,
                );
                has_headers = to > from;
                for h in from..to {
                    if header_items.is_null(h) || header_names.is_null(h) {
                        odd = true;
                        break;
                    }
                    let name = header_names.value(h).as_bytes();
                    if name != NEWKEY && name != OLDKEY {
                        continue;
                    }
                    let v = (!header_values.is_null(h)).then(|| header_values.value(h));
                    if name == NEWKEY {
                        newkey = Some(v);
                    } else {
                        oldkey = Some(v);
                    }
                }
            }
            if odd {
                declined.push(i as u32);
                continue;
            }
            let topic_id = self.inner.core.topic(topic);
            let tp = self.inner.core.tp(topic_id, partition);
            let input = Input {
                topic,
                topic_id,
                partition,
                offset,
                tp,
                key: (!keys.is_null(i)).then(|| keys.value(i)),
                value: values.value(i),
                has_headers,
                newkey,
                oldkey,
            };
            let Some(event) = self.inner.decode_input(py, &input) else {
                declined.push(i as u32);
                continue;
            };
            records += 1;
            if let Some(progress) = self.progress.as_mut() {
                let mark =
                    progress
                        .entry((topic_id, partition))
                        .or_insert_with(|| crate::stream::Mark {
                            offset: -1,
                            ..Default::default()
                        });
                mark.note(
                    &event,
                    !event.unordered && !event.is_snapshot_identity(incremental),
                );
            }
            let ms = event.source_ts_ms.unwrap_or(stamp.unwrap_or(0));
            clock = Some(clock.map_or(ms, |c| c.max(ms)));
            let name = self.topic_name(topic_id);
            let interner = &self.inner.core.interner;
            let snapshot = event.is_snapshot_identity(incremental);
            let table_id = &interner.tables[event.table as usize].table_id;
            let bucket = wire::bucket(&event, table_id, snapshot, buckets);
            let (repeats, value, size) = open.entry(bucket).or_default();
            if *size >= PACKED_VALUE_BYTES {
                (*repeats, *value, *size) = (wire::Repeats::default(), *value + 1, 0);
            }
            buf.clear();
            wire::write(&mut buf, &event, &name, stamp, interner, repeats);
            let start = staged.len();
            wire::pack(&mut staged, &buf, ms);
            *size += staged.len() - start;
            spans.push(((bucket, *value), start, staged.len()));
        }
        self.inner.declined_records += declined.len() as i64;
        self.inner.native_records += records;
        let (bucket, payload) = caught(|| packed_by_bucket(&staged, spans))?;
        let columns: Vec<(Arc<Field>, ArrayRef)> = vec![
            (
                Arc::new(Field::new("bucket", DataType::Int32, false)),
                Arc::new(bucket),
            ),
            (
                Arc::new(Field::new("payload", DataType::Binary, false)),
                Arc::new(payload),
            ),
        ];
        Ok((
            ArrowBatch::new(StructArray::from(columns)),
            declined,
            (records, tombstones),
            clock,
        ))
    }

    /// A `ChangeEvent` the Python decoder read (flattened by `core.native.flatten`) as staged
    /// bytes: `(bucket, payload)`; with `commit_ms`, the payload is packed with it as the
    /// decode step's rows are ([`wire::pack`]).
    #[pyo3(signature = (event, timestamp, buckets, commit_ms=None))]
    fn wire<'py>(
        &mut self,
        py: Python<'py>,
        event: &Bound<'py, PyTuple>,
        timestamp: Option<i64>,
        buckets: u32,
        commit_ms: Option<i64>,
    ) -> PyResult<(u32, Bound<'py, PyBytes>)> {
        let e = self.inner.event_from_tuple(event)?;
        let name = self.topic_name(e.origin.topic);
        let incremental = self.inner.core.interner.snapshot("incremental");
        let interner = &self.inner.core.interner;
        let table_id = &interner.tables[e.table as usize].table_id;
        let bucket = wire::bucket(&e, table_id, e.is_snapshot_identity(incremental), buckets);
        let mut buf = Vec::with_capacity(1024);
        wire::write(
            &mut buf,
            &e,
            &name,
            timestamp,
            interner,
            &mut Default::default(),
        );
        if let Some(ms) = commit_ms {
            let mut packed = Vec::with_capacity(buf.len() + 12);
            wire::pack(&mut packed, &buf, ms);
            return Ok((bucket, PyBytes::new(py, &packed)));
        }
        Ok((bucket, PyBytes::new(py, &buf)))
    }

    /// Track the progress of the partitions (streaming; see [`SparkDecoder::take_progress`]).
    fn track_progress(&mut self) {
        self.progress = Some(Default::default());
    }

    /// The progress tracked since the last call, from the events decoded here (offsets are
    /// the caller's: `-1`), as `StreamRelease.observe` takes it; tracking goes on.
    fn take_progress(&mut self) -> Vec<MarkTuple> {
        let Some(progress) = self.progress.as_mut() else {
            return Vec::new();
        };
        let lsn = crate::core::lsn_bytes;
        let mut out: Vec<MarkTuple> = std::mem::take(progress)
            .into_iter()
            .map(|((topic, partition), m)| {
                (
                    self.inner.core.topics[topic as usize].to_string(),
                    partition,
                    lsn(m.commit),
                    m.position.map(|(a, b, s)| (lsn(a), lsn(b), s)),
                    m.at,
                    m.offset,
                )
            })
            .collect();
        out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        out
    }

    /// Records the native decoder declined so far (read by the Python decoder).
    #[getter]
    fn declined_records(&self) -> i64 {
        self.inner.declined_records
    }
}

/// A packed value of the decode step: its state bucket and its number among the bucket's
/// values of the batch.
type Packed = (u32, u32);

/// A bucket's packed value is closed once it holds this many bytes (its next event starts a
/// new one): rows stay far below the JVM's 2 GB and shuffle blocks of a sensible size.
const PACKED_VALUE_BYTES: usize = 16 << 20;

/// One row per packed value of the events in `staged` (`spans`: value, start, end), in
/// bucket order, the events of a value in the order they were read: the bucket and the
/// packed bytes.
fn packed_by_bucket(
    staged: &[u8],
    mut spans: Vec<(Packed, usize, usize)>,
) -> PyResult<(Int32Array, BinaryArray)> {
    spans.sort_by_key(|&(value, _, _)| value);
    let mut buckets = Int32Builder::new();
    let mut values: Vec<u8> = Vec::with_capacity(staged.len());
    let mut offsets: Vec<i32> = vec![0];
    for run in spans.chunk_by(|a, b| a.0 == b.0) {
        buckets.append_value(run[0].0 .0 as i32);
        for &(_, start, end) in run {
            values.extend_from_slice(&staged[start..end]);
        }
        let end = i32::try_from(values.len())
            .map_err(|_| bad("the staged events of one batch exceed 2 GiB"))?;
        offsets.push(end);
    }
    let payload = BinaryArray::try_new(OffsetBuffer::new(offsets.into()), values.into(), None)
        .map_err(|e| bad(&e.to_string()))?;
    Ok((buckets.finish(), payload))
}

/// A replay mismatch: topic, partition, offset, timestamp, table_id, seq, op, key, before,
/// after, unavailable.
type MismatchTuple = (
    String,
    i32,
    Option<i64>,
    Option<i64>,
    String,
    String,
    String,
    Vec<u8>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<String>,
);

/// Each value of `payloads` (binary: staged events packed by [`wire::pack`]).
fn staged_events(
    payloads: &ArrayRef,
    mut take: impl FnMut(&[u8]) -> Result<(), wire::BadWire>,
) -> PyResult<()> {
    let payloads = payloads
        .as_binary_opt::<i32>()
        .ok_or_else(|| bad("payload: binary"))?;
    for packed in payloads.iter() {
        let packed = packed.ok_or_else(|| bad("a null staged value"))?;
        take(packed).map_err(|_| bad("a staged event that cannot be read"))?;
    }
    Ok(())
}

/// The release step of a batch DataFrame for one bucket: `payloads`, a binary array of its
/// staged events (packed by [`wire::pack`]). Returns the output rows (canonical format) as one
/// Arrow batch, the counters and the replay mismatches (their dead letters are written by the
/// Python side).
#[pyfunction]
pub fn release_batch(
    payloads: &Bound<'_, PyAny>,
    pair_key_changes: bool,
) -> PyResult<(ArrowBatch, StreamCounts, Vec<MismatchTuple>)> {
    let payloads = import(payloads)?;
    caught(|| {
        let mut window = BatchWindow::new(pair_key_changes);
        staged_events(&payloads, |packed| window.push_packed(packed))?;
        window.release_all();
        let batch = output_rows(&window.core)?;
        let counts = window.counts.as_tuple();
        Ok((batch, counts, mismatch_tuples(&mut window.mismatches)))
    })
}

fn mismatch_tuples(window: &mut Vec<crate::window::Mismatch>) -> Vec<MismatchTuple> {
    window
        .drain(..)
        .map(|m| {
            (
                m.topic,
                m.partition,
                m.offset,
                m.timestamp,
                m.table_id,
                m.seq,
                (m.op as char).to_string(),
                m.key,
                m.before,
                m.after,
                m.unavailable,
            )
        })
        .collect()
}

/// A partition mark as Python gives it: topic, partition, commit LSN bytes, position
/// `(commit, change, serial)` or `None`, `op + key` at the position, offset.
type MarkTuple = (
    String,
    i32,
    Vec<u8>,
    Option<(Vec<u8>, Vec<u8>, i64)>,
    Vec<Vec<u8>>,
    i64,
);

/// A waiting group of the Python reference's state: see `StreamRelease.adopt`.
type ReferenceGroupTuple = (
    String,
    Vec<u8>,
    bool,
    Vec<u8>,
    i64,
    String,
    Vec<(i64, String, Vec<u8>)>,
    Vec<Vec<u8>>,
);

fn marks_of(marks: Vec<MarkTuple>) -> PyResult<Vec<(String, i32, crate::stream::Mark)>> {
    let lsn = |b: &[u8]| crate::stream::lsn_of(b).map_err(|_| bad("a mark that is not an LSN"));
    let mut out = Vec::with_capacity(marks.len());
    for (topic, partition, commit, position, at, offset) in marks {
        let position = match position {
            None => None,
            Some((a, b, serial)) => Some((lsn(&a)?, lsn(&b)?, serial)),
        };
        let mark = crate::stream::Mark {
            commit: lsn(&commit)?,
            position,
            at,
            offset,
            at_index: Default::default(),
        };
        out.push((topic, partition, mark));
    }
    Ok(out)
}

/// Counters of one release: changes_out, merged, duplicates, replay_mismatches, late,
/// pending, released by position, transaction, end, watermark.
type StreamCounts = (i64, i64, i64, i64, i64, i64, i64, i64, i64, i64);

fn bad_state(_: wire::BadWire) -> PyErr {
    bad("a window state that cannot be read")
}

/// The release step of a streaming DataFrame for one bucket and one call
/// ([`crate::stream::StreamWindow`]; `core/windowed.py::WindowState`'s rules), state in and
/// out as bytes.
#[pyclass(unsendable, module = "debezium_bridge._native")]
pub struct StreamRelease {
    window: crate::stream::StreamWindow,
}

impl StreamRelease {
    fn counts(&self) -> StreamCounts {
        self.window.counts.as_tuple()
    }
}

#[pymethods]
impl StreamRelease {
    /// `stored`: the state bytes of the previous call (`None`: a new bucket); `partitions`:
    /// partition count per topic; `ends`: per topic and partition the last offset of this run
    /// (`None`: the input has no end).
    #[new]
    #[pyo3(signature = (stored, pair_key_changes, partitions, ends))]
    fn new(
        stored: Option<&[u8]>,
        pair_key_changes: bool,
        partitions: std::collections::HashMap<String, i32>,
        ends: Option<std::collections::HashMap<String, std::collections::HashMap<i32, i64>>>,
    ) -> PyResult<Self> {
        caught(|| {
            let topology = crate::stream::Topology {
                partitions: partitions.into_iter().collect(),
                ends: ends.map(|e| {
                    e.into_iter()
                        .map(|(t, m)| (t, m.into_iter().collect()))
                        .collect()
                }),
            };
            let mut window = crate::stream::StreamWindow::new(pair_key_changes, topology);
            if let Some(data) = stored {
                window.load(data).map_err(bad_state)?;
            }
            Ok(StreamRelease { window })
        })
    }

    /// A window holding what a state of the Python reference holds (`core.windowed_native.
    /// adopt_reference_state`): `marks` as [`MarkTuple`]s; `groups` as (table_id, commit,
    /// snapshot, local, commit_ms, topic, seen (serial, op, key), waiting staged events);
    /// `commits` (commit, seen events); `transactions` (commit, event_count, ms).
    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    fn adopt(
        pair_key_changes: bool,
        partitions: std::collections::HashMap<String, i32>,
        ends: Option<std::collections::HashMap<String, std::collections::HashMap<i32, i64>>>,
        marks: Vec<MarkTuple>,
        groups: Vec<ReferenceGroupTuple>,
        commits: Vec<(Vec<u8>, i64)>,
        transactions: Vec<(Vec<u8>, i64, i64)>,
    ) -> PyResult<Self> {
        let mut me = Self::new(None, pair_key_changes, partitions, ends)?;
        caught(|| {
            let lsn = |b: &[u8]| crate::stream::lsn_of(b).map_err(bad_state);
            for (topic, partition, mark) in marks_of(marks)? {
                me.window.adopt_mark(&topic, partition, mark);
            }
            for (table_id, commit, snapshot, local, commit_ms, topic, seen, waiting) in &groups {
                let mut seen_ops = Vec::with_capacity(seen.len());
                for (serial, op, key) in seen {
                    let op = match op.as_bytes() {
                        [b] => *b,
                        _ => return Err(bad("an op of more than one letter")),
                    };
                    seen_ops.push((*serial, op, key.as_slice()));
                }
                me.window
                    .adopt_group(crate::stream::ReferenceGroup {
                        table_id,
                        commit: lsn(commit)?,
                        snapshot: *snapshot,
                        local,
                        commit_ms: *commit_ms,
                        topic,
                        seen: seen_ops,
                        waiting: waiting.iter().map(Vec::as_slice).collect(),
                    })
                    .map_err(bad_state)?;
            }
            for (commit, n) in commits {
                me.window.adopt_commit(lsn(&commit)?, n);
            }
            let mut txs = Vec::with_capacity(transactions.len());
            for (commit, count, ms) in transactions {
                txs.push((lsn(&commit)?, count, ms));
            }
            me.window.add_transactions(txs);
            Ok(())
        })?;
        Ok(me)
    }

    /// How many transaction END records the state keeps.
    fn transactions(&self) -> usize {
        self.window.transactions()
    }

    /// The call's staged events: a binary array, each value packed by [`wire::pack`].
    fn push(&mut self, payloads: &Bound<'_, PyAny>) -> PyResult<()> {
        let payloads = import(payloads)?;
        caught(|| staged_events(&payloads, |packed| self.window.push_packed(packed)))
    }

    /// Staged events one by one (the Python window API: events staged by `SparkDecoder.wire`).
    fn push_one(&mut self, payload: &[u8], commit_ms: i64) -> PyResult<()> {
        caught(|| {
            self.window
                .push(payload, commit_ms)
                .map_err(|_| bad("a staged event that cannot be read"))
        })
    }

    /// The canonical lines written since the last call, in the order they were written, the
    /// counters (of the whole window) and the replay mismatches since the last call.
    fn take_lines<'py>(
        &mut self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyBytes>, StreamCounts, Vec<MismatchTuple>)> {
        let (counts, mismatches) =
            caught(|| Ok((self.counts(), mismatch_tuples(&mut self.window.mismatches))))?;
        let lines = PyBytes::new(py, &self.window.core.out);
        self.window.core.clear_output();
        Ok((lines, counts, mismatches))
    }

    /// Progress rows: see [`MarkTuple`].
    fn observe(&mut self, marks: Vec<MarkTuple>) -> PyResult<()> {
        caught(|| {
            for (topic, partition, mark) in marks_of(marks)? {
                self.window.observe(&topic, partition, mark);
            }
            Ok(())
        })
    }

    /// Transaction END rows: (commit LSN bytes, event_count, ms).
    fn add_transactions(&mut self, ends: Vec<(Vec<u8>, i64, i64)>) -> PyResult<()> {
        caught(|| {
            let mut out = Vec::with_capacity(ends.len());
            for (commit, count, ms) in ends {
                let c = crate::stream::lsn_of(&commit)
                    .map_err(|_| bad("a transaction END that is not an LSN"))?;
                out.push((c, count, ms));
            }
            self.window.add_transactions(out);
            Ok(())
        })
    }

    /// Dedupe, pair and release (`WindowState.add` then `WindowState.release`).
    fn run(&mut self, watermark_ms: i64) -> PyResult<()> {
        caught(|| {
            self.window.add(watermark_ms);
            self.window.release(watermark_ms);
            Ok(())
        })
    }

    /// `WindowState.add` alone (tests drive the rules step by step).
    fn add(&mut self, watermark_ms: i64) -> PyResult<()> {
        caught(|| {
            self.window.add(watermark_ms);
            Ok(())
        })
    }

    /// `WindowState.release` alone.
    fn release(&mut self, watermark_ms: i64) -> PyResult<()> {
        caught(|| {
            self.window.release(watermark_ms);
            Ok(())
        })
    }

    /// The output rows of this call (canonical, in (seq, event_id) order), the counters and
    /// the replay mismatches.
    fn output(&mut self) -> PyResult<(ArrowBatch, StreamCounts, Vec<MismatchTuple>)> {
        caught(|| {
            let batch = output_rows(&self.window.core)?;
            self.window.core.clear_output();
            Ok((
                batch,
                self.counts(),
                mismatch_tuples(&mut self.window.mismatches),
            ))
        })
    }

    /// The state as bytes.
    fn dump<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let data = caught(|| Ok(self.window.dump()))?;
        Ok(PyBytes::new(py, &data))
    }

    /// The lowest commit time still in state.
    fn next_timeout_ms(&self) -> Option<i64> {
        self.window.next_timeout_ms()
    }

    fn waiting_events(&self) -> usize {
        self.window.waiting_events()
    }

    fn __len__(&self) -> usize {
        self.window.groups()
    }

    /// The partition marks after the last release, as [`MarkTuple`]s.
    fn marks(&self) -> Vec<MarkTuple> {
        let lsn = crate::core::lsn_bytes;
        self.window
            .marks()
            .map(|(t, p, m)| {
                (
                    t.to_string(),
                    p,
                    lsn(m.commit),
                    m.position.map(|(a, b, s)| (lsn(a), lsn(b), s)),
                    m.at.clone(),
                    m.offset,
                )
            })
            .collect()
    }
}

/// Whether `data` is a native window state (else the Python reference's).
#[pyfunction]
fn is_native_state(data: &[u8]) -> bool {
    crate::stream::is_native_state(data)
}

/// The output rows (`spark.translate.OUTPUT_COLUMNS`, then `lineage`) of the records written,
/// in (seq, event_id) order: canonical format, topic `<source topic>.canonical`, the source
/// coordinates of the lineage's last record. `headers` is null: the JVM writes the event id,
/// seq and lineage headers from the `event_id`, `seq` and `lineage` columns
/// (`spark.translate.NATIVE_HEADERS`), so no nested values cross to Python's Arrow-to-pandas
/// conversion (streaming: a Python loop per row) or the JVM's; `lineage` is the lineage as
/// `[[topic, partition, offset], ...]`, msgspec's JSON of the reference's tuples.
fn output_rows(core: &crate::core::Core) -> PyResult<ArrowBatch> {
    let out = &core.out;
    let order = crate::window::sorted_lines(core);
    let n = order.len();
    let span_bytes =
        |k: usize| -> usize { core.spans.iter().map(|s| (s[k].1 - s[k].0) as usize).sum() };
    if core.lineage_ends.len() != core.spans.len() {
        return Err(bad("the records' lineage was not kept"));
    }
    let topic_names: Vec<&str> = core.topics.iter().map(|t| &**t).collect();
    let canonical_topics: Vec<String> = topic_names
        .iter()
        .map(|t| format!("{t}.canonical"))
        .collect();
    let lineage_bytes: usize = core
        .lineage
        .iter()
        .map(|o| core.topic_json(o.topic).len() + 48)
        .sum();
    let mut kind = StringBuilder::with_capacity(n, n * 6);
    let mut format = StringBuilder::with_capacity(n, n * 9);
    let mut event_ids = BinaryBuilder::with_capacity(n, span_bytes(5));
    let mut tables = BinaryBuilder::with_capacity(n, span_bytes(1));
    let mut ops = BinaryBuilder::with_capacity(n, span_bytes(0));
    let mut seqs = BinaryBuilder::with_capacity(n, span_bytes(2));
    let mut commit_ts = BinaryBuilder::with_capacity(n, span_bytes(3));
    let longest_topic = topic_names.iter().map(|t| t.len()).max().unwrap_or(0);
    let mut topics = StringBuilder::with_capacity(n, n * (longest_topic + 10));
    let mut key = BinaryBuilder::with_capacity(n, span_bytes(4));
    let mut value = BinaryBuilder::with_capacity(n, out.len());
    let mut lineages = BinaryBuilder::with_capacity(n, lineage_bytes);
    let mut source_topic = StringBuilder::with_capacity(n, n * longest_topic);
    let mut source_partition = Int32Builder::with_capacity(n);
    let mut source_offset = Int64Builder::with_capacity(n);
    let mut lineage_json: Vec<u8> = Vec::with_capacity(256);
    for &i in &order {
        let spans = &core.spans[i];
        let start = if i == 0 { 0 } else { core.line_ends[i - 1] };
        let end = core.line_ends[i] - 1;
        let from = if i == 0 {
            0
        } else {
            core.lineage_ends[i - 1] as usize
        };
        let lineage = &core.lineage[from..core.lineage_ends[i] as usize];
        let last = lineage.last().ok_or_else(|| bad("lineage"))?;
        let event_id = token_bytes(out, spans[5]).ok_or_else(|| bad("event id"))?;
        let seq = token_bytes(out, spans[2]).ok_or_else(|| bad("seq"))?;
        lineage_json.clear();
        lineage_json.push(b'[');
        for (k, origin) in lineage.iter().enumerate() {
            if k > 0 {
                lineage_json.push(b',');
            }
            lineage_json.push(b'[');
            lineage_json.extend_from_slice(core.topic_json(origin.topic));
            lineage_json.push(b',');
            crate::jsonw::write_i64(&mut lineage_json, origin.partition as i64);
            lineage_json.push(b',');
            crate::jsonw::write_opt_i64(&mut lineage_json, origin.offset);
            lineage_json.push(b']');
        }
        lineage_json.push(b']');
        kind.append_value("change");
        format.append_value("canonical");
        event_ids.append_value(&event_id);
        tables.append_option(token_bytes(out, spans[1]));
        ops.append_option(token_bytes(out, spans[0]));
        seqs.append_value(&seq);
        commit_ts.append_option(token_bytes(out, spans[3]));
        topics.append_value(&canonical_topics[last.topic as usize]);
        key.append_value(&out[spans[4].0 as usize..spans[4].1 as usize]);
        value.append_value(&out[start..end]);
        lineages.append_value(&lineage_json);
        source_topic.append_value(topic_names[last.topic as usize]);
        source_partition.append_value(last.partition);
        source_offset.append_option(last.offset);
    }
    // the tokens' bytes, checked as UTF-8 once per column
    let text = |mut b: BinaryBuilder| -> PyResult<ArrayRef> {
        Ok(Arc::new(
            StringArray::try_from_binary(b.finish()).map_err(|e| bad(&e.to_string()))?,
        ))
    };
    let item_fields = Fields::from(vec![
        Field::new("key", DataType::Utf8, true),
        Field::new("value", DataType::Binary, true),
    ]);
    let item = Arc::new(Field::new("item", DataType::Struct(item_fields), true));
    let headers = new_null_array(&DataType::List(item), n);
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("kind", Arc::new(kind.finish())),
        ("format", Arc::new(format.finish())),
        ("event_id", text(event_ids)?),
        ("table", text(tables)?),
        ("op", text(ops)?),
        ("seq", text(seqs)?),
        ("commit_ts", text(commit_ts)?),
        ("topic", Arc::new(topics.finish())),
        ("key", Arc::new(key.finish())),
        ("value", Arc::new(value.finish())),
        ("headers", headers),
        ("source_topic", Arc::new(source_topic.finish())),
        ("source_partition", Arc::new(source_partition.finish())),
        ("source_offset", Arc::new(source_offset.finish())),
        ("lineage", Arc::new(lineages.finish())),
    ];
    Ok(ArrowBatch::new(StructArray::from(
        columns
            .into_iter()
            .map(|(name, a)| (Arc::new(Field::new(name, a.data_type().clone(), true)), a))
            .collect::<Vec<_>>(),
    )))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SparkDecoder>()?;
    m.add_function(pyo3::wrap_pyfunction!(release_batch, m)?)?;
    m.add_class::<StreamRelease>()?;
    m.add_function(pyo3::wrap_pyfunction!(is_native_state, m)?)?;
    Ok(())
}
