//! The Python extension `debezium_bridge._native`: [`NativeCore`], the translator state and the
//! native decoders behind `debezium_bridge.core.Translator`.
//!
//! Per record nothing is built in Python: the record's attributes are read in place, the
//! event is decoded, ordered, paired and written as canonical JSON into one buffer that the
//! caller takes as one `bytes` per drain. A record the native decoder declines is handed to the
//! `fallback` callable (the Python decoder), whose results come back as plain tuples and enter
//! the same state, in input order. No panic crosses into Python: a panic while decoding one
//! record is caught and the record goes to the Python decoder like any declined one.

use crate::core::{Config, Core};
use crate::decode::{Decoder, Input};
use crate::event::{Event, Image, Origin, Tx};
use crate::schema::{BinaryMode, Options};
use crate::value::{self, Decline};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use std::panic::AssertUnwindSafe;

mod spark;

/// Bytes consumed, data partitions `(topic, partition, is CES)`, lines left to Python.
type ScanResult<'py> = (usize, Vec<(String, i32, bool)>, Vec<Bound<'py, PyBytes>>);

type TxTuple = (String, Option<i64>, Option<i64>, Option<String>);

/// A saved replay mark: topic, partition, commit, change, serial, (op, key id) pairs.
type SavedMark = (String, i32, Vec<u8>, Vec<u8>, i64, Vec<(String, Vec<u8>)>);

const NEWKEY: &str = "__debezium.newkey";
const OLDKEY: &str = "__debezium.oldkey";

#[pyclass(unsendable, module = "debezium_bridge._native")]
pub struct NativeCore {
    core: Core,
    decoder: Decoder,
    fallback: Py<PyAny>,
    mismatch: Py<PyAny>,
    dead: Vec<Py<PyAny>>,
    native_records: i64,
    declined_records: i64,
    /// `avro_schema(schema_id, is_key) -> str | None`: a writer schema for the Avro reader.
    avro_schema: Option<Py<PyAny>>,
}

fn binary_mode(name: &str) -> PyResult<BinaryMode> {
    Ok(match name {
        "bytes" => BinaryMode::Bytes,
        "base64" => BinaryMode::Base64,
        "base64-url-safe" => BinaryMode::Base64UrlSafe,
        "hex" => BinaryMode::Hex,
        _ => {
            return Err(PyValueError::new_err(format!(
                "unknown binary handling mode {name:?}"
            )))
        }
    })
}

/// The attributes of one Kafka record, read in place.
struct Fields<'py> {
    topic: Bound<'py, PyAny>,
    partition: i64,
    offset: Option<i64>,
    key: Option<Bound<'py, PyAny>>,
    value: Option<Bound<'py, PyAny>>,
    headers: Bound<'py, PyAny>,
}

fn opt_int(v: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if v.is_none() {
        Ok(None)
    } else {
        v.extract::<i64>().map(Some)
    }
}

/// `RawRecord` (the package's own record, a `msgspec.Struct`): its fields are object slots of
/// the instance, at the offsets its member descriptors give, and are read there (six attribute
/// lookups cost ~1.4k instructions per record, `msgspec.structs.astuple` and the tuple ~0.9k;
/// callgrind 2026-11-25 and 2026-11-28). Only while its fields are the ones [`fields`] reads,
/// in that order, each a member descriptor of an object slot; otherwise `None` (attributes are
/// read by name).
const RAW_RECORD_FIELDS: [&str; 7] = [
    "topic",
    "partition",
    "offset",
    "timestamp",
    "key",
    "value",
    "headers",
];

/// The `RawRecord` type and the offset of each of its fields' slots in an instance.
struct RawRecordLayout {
    record_type: Py<PyAny>,
    offsets: [isize; 7],
}

static RAW_RECORD: pyo3::sync::PyOnceLock<Option<RawRecordLayout>> = pyo3::sync::PyOnceLock::new();

fn raw_record(py: Python<'_>) -> Option<&RawRecordLayout> {
    RAW_RECORD
        .get_or_init(py, || {
            let record_type = py
                .import("debezium_bridge.model.records")
                .and_then(|m| m.getattr("RawRecord"))
                .ok()?;
            let names: Vec<String> = record_type
                .getattr("__struct_fields__")
                .ok()?
                .extract()
                .ok()?;
            if names != RAW_RECORD_FIELDS {
                return None;
            }
            let mut offsets = [0isize; 7];
            for (offset, name) in offsets.iter_mut().zip(RAW_RECORD_FIELDS) {
                *offset = slot_offset(&record_type, name)?;
            }
            Some(RawRecordLayout {
                record_type: record_type.unbind(),
                offsets,
            })
        })
        .as_ref()
}

/// The offset of the object slot behind attribute `name` of `owner` (a type), if it is a
/// member descriptor of an object slot (`Py_T_OBJECT_EX`).
fn slot_offset(owner: &Bound<'_, PyAny>, name: &str) -> Option<isize> {
    let descriptor = owner.getattr("__dict__").ok()?.get_item(name).ok()?;
    // (CPython's static type object of member descriptors)
    let member_type = &raw mut pyo3::ffi::PyMemberDescr_Type;
    if descriptor.get_type().as_type_ptr() != member_type {
        return None;
    }
    // SAFETY: a member descriptor is a `PyMemberDescrObject`, whose member definition is a
    // `PyMemberDef` (pyo3-ffi declares the field as a `PyGetSetDef` pointer: only the pointer
    // is read here, as the right type)
    let member = unsafe {
        let descr = descriptor.as_ptr() as *const pyo3::ffi::PyMemberDescrObject;
        &*((*descr).d_member as *const pyo3::ffi::PyMemberDef)
    };
    (member.type_code == pyo3::ffi::Py_T_OBJECT_EX && member.offset > 0).then_some(member.offset)
}

fn fields<'py>(py: Python<'py>, record: &Bound<'py, PyAny>) -> PyResult<Fields<'py>> {
    if let Some(layout) = raw_record(py) {
        if record.get_type().is(layout.record_type.bind(py)) {
            let slot = |i: usize| {
                // SAFETY: `record` is an instance of exactly `RawRecord`, whose field `i` is an
                // object slot at `offsets[i]` (checked when the layout was read); a set slot
                // holds a reference the record owns, borrowed here
                unsafe {
                    let at = record.as_ptr().cast::<u8>().offset(layout.offsets[i]);
                    let object = *at.cast::<*mut pyo3::ffi::PyObject>();
                    (!object.is_null()).then(|| Bound::from_borrowed_ptr(py, object))
                }
            };
            if let (
                Some(topic),
                Some(partition),
                Some(offset),
                Some(key),
                Some(value),
                Some(headers),
            ) = (slot(0), slot(1), slot(2), slot(4), slot(5), slot(6))
            {
                return Ok(Fields {
                    topic,
                    partition: partition.extract::<i64>()?,
                    offset: opt_int(&offset)?,
                    key: if key.is_none() { None } else { Some(key) },
                    value: if value.is_none() { None } else { Some(value) },
                    headers,
                });
            }
        }
    }
    let key = record.getattr(intern!(py, "key"))?;
    let value = record.getattr(intern!(py, "value"))?;
    Ok(Fields {
        topic: record.getattr(intern!(py, "topic"))?,
        partition: record.getattr(intern!(py, "partition"))?.extract::<i64>()?,
        offset: opt_int(&record.getattr(intern!(py, "offset"))?)?,
        key: if key.is_none() { None } else { Some(key) },
        value: if value.is_none() { None } else { Some(value) },
        headers: record.getattr(intern!(py, "headers"))?,
    })
}

/// The last `__debezium.newkey` / `oldkey` header values (copied: they are rare); `Err` for
/// headers that are not `(str, bytes | None)` pairs (the Python path reads those).
type HeaderValue = Option<Option<Vec<u8>>>;

fn header_keys(headers: &Bound<'_, PyAny>) -> Result<(bool, HeaderValue, HeaderValue), Decline> {
    let Ok(tuple) = headers.cast::<PyTuple>() else {
        if headers.is_none() {
            return Ok((false, None, None));
        }
        return match headers.cast::<PyList>() {
            Ok(list) if list.is_empty() => Ok((false, None, None)),
            _ => Err(Decline),
        };
    };
    if tuple.is_empty() {
        return Ok((false, None, None));
    }
    let mut newkey = None;
    let mut oldkey = None;
    for item in tuple.iter() {
        let pair = item.cast::<PyTuple>().map_err(|_| Decline)?;
        if pair.len() != 2 {
            return Err(Decline);
        }
        let name_obj = pair.get_item(0).map_err(|_| Decline)?;
        let name = name_obj.cast::<PyString>().map_err(|_| Decline)?;
        let name = name.to_str().map_err(|_| Decline)?;
        if name != NEWKEY && name != OLDKEY {
            continue;
        }
        let value = pair.get_item(1).map_err(|_| Decline)?;
        let bytes = if value.is_none() {
            None
        } else {
            Some(
                value
                    .cast::<PyBytes>()
                    .map_err(|_| Decline)?
                    .as_bytes()
                    .to_vec(),
            )
        };
        if name == NEWKEY {
            newkey = Some(bytes);
        } else {
            oldkey = Some(bytes);
        }
    }
    Ok((true, newkey, oldkey))
}

impl NativeCore {
    /// Hand the writer schema of a Confluent Avro value or key to the decoder on its first
    /// record (the Python side resolves and compiles it first; an exception there leaves the
    /// id unknown, and the record declined: the Python decoder raises it again).
    fn ensure_avro(&mut self, py: Python<'_>, raw: &[u8], key: bool) {
        let Some(id) = crate::avro::schema_id(raw) else {
            return;
        };
        if self.decoder.knows_avro(id, key) {
            return;
        }
        let Some(resolve) = self.avro_schema.as_ref() else {
            return;
        };
        if let Ok(schema) = resolve
            .call1(py, (id, key))
            .and_then(|s| s.extract::<Option<String>>(py))
        {
            let decoder = &mut self.decoder;
            let done = std::panic::catch_unwind(AssertUnwindSafe(|| {
                decoder.add_avro(id, key, schema.as_deref())
            }));
            if done.is_err() {
                self.decoder.add_avro(id, key, None);
            }
        }
    }

    /// Decode one record, resolving Avro writer schemas on first sight; no panic escapes.
    fn decode_input(&mut self, py: Python<'_>, input: &Input<'_>) -> Option<Box<Event>> {
        if input.value.first() == Some(&0) {
            self.ensure_avro(py, input.value, false);
        }
        for _ in 0..2 {
            self.decoder.missing_avro_key = None;
            let decoder = &mut self.decoder;
            let interner = &mut self.core.interner;
            let spare = &mut self.core.spare;
            let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| {
                decoder.decode(input, interner, spare)
            }));
            if let Ok(Ok(event)) = decoded {
                return Some(event);
            }
            // an Avro key schema not seen yet: resolved (as the reference does, after the
            // value was read) and the record decoded again
            match (self.decoder.missing_avro_key.take(), input.key) {
                (Some(_), Some(key)) => self.ensure_avro(py, key, true),
                _ => return None,
            }
        }
        None
    }

    /// `(topic, partition)` of a tp id.
    fn tp_key(&self, tp: u32) -> (&str, i32) {
        let (topic, partition) = self.core.tps[tp as usize];
        (&self.core.topics[topic as usize], partition)
    }

    fn push_dead(&mut self, letter: Py<PyAny>) {
        self.dead.push(letter);
    }

    fn mismatch_letter(
        &mut self,
        py: Python<'_>,
        record: &Bound<'_, PyAny>,
        message: String,
    ) -> PyResult<()> {
        let letter = self.mismatch.call1(py, (record, message))?;
        self.push_dead(letter);
        Ok(())
    }

    /// One record natively; `Ok(false)` when it is declined.
    fn native_one(&mut self, py: Python<'_>, record: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Ok(f) = fields(py, record) else {
            return Ok(false);
        };
        let Ok(topic) = f.topic.cast::<PyString>() else {
            return Ok(false);
        };
        let Ok(topic) = topic.to_str() else {
            return Ok(false);
        };
        let Ok(partition) = i32::try_from(f.partition) else {
            return Ok(false);
        };
        let Some(value) = f.value.as_ref() else {
            // a tombstone: counted, never a change
            if f.key.as_ref().is_some_and(|k| k.cast::<PyBytes>().is_err()) {
                return Ok(false);
            }
            self.core.counters.records_in += 1;
            self.core.counters.tombstones += 1;
            self.native_records += 1;
            return Ok(true);
        };
        let Ok(value) = value.cast::<PyBytes>() else {
            return Ok(false);
        };
        let key = match f.key.as_ref() {
            None => None,
            Some(k) => match k.cast::<PyBytes>() {
                Ok(b) => Some(b.as_bytes()),
                Err(_) => return Ok(false),
            },
        };
        let Ok((has_headers, newkey, oldkey)) = header_keys(&f.headers) else {
            return Ok(false);
        };
        let topic_id = self.core.topic(topic);
        let tp = self.core.tp(topic_id, partition);
        let input = Input {
            topic,
            topic_id,
            partition,
            offset: f.offset,
            tp,
            key,
            value: value.as_bytes(),
            has_headers,
            newkey: newkey.as_ref().map(|v| v.as_deref()),
            oldkey: oldkey.as_ref().map(|v| v.as_deref()),
        };
        let Some(event) = self.decode_input(py, &input) else {
            return Ok(false);
        };
        self.core.counters.records_in += 1;
        self.native_records += 1;
        if let Some(message) = self.core.accept(event) {
            self.mismatch_letter(py, record, message)?;
        }
        Ok(true)
    }

    /// The Python decoder's results for one declined record.
    fn fallback_one(&mut self, py: Python<'_>, record: &Bound<'_, PyAny>) -> PyResult<()> {
        let results = self.fallback.call1(py, (record,))?;
        let results = results.bind(py);
        for item in results.try_iter()? {
            self.take_result(py, &item?)?;
        }
        Ok(())
    }

    fn take_result(&mut self, py: Python<'_>, item: &Bound<'_, PyAny>) -> PyResult<()> {
        let tuple = item.cast::<PyTuple>()?;
        let kind: String = tuple.get_item(0)?.extract()?;
        let counters = &mut self.core.counters;
        if kind == "event" {
            counters.records_in += 1;
            let fields = tuple.get_item(1)?;
            let event = self.event_from_tuple(fields.cast::<PyTuple>()?)?;
            if let Some(message) = self.core.accept(event) {
                let record = tuple.get_item(2)?;
                self.mismatch_letter(py, &record, message)?;
            }
            return Ok(());
        }
        match kind.as_str() {
            "dead" => {
                counters.records_in += 1;
                counters.dead_letters += 1;
                self.push_dead(tuple.get_item(1)?.unbind());
            }
            "tombstone" => {
                counters.records_in += 1;
                counters.tombstones += 1;
            }
            "message" => {
                counters.records_in += 1;
                counters.skipped += 1;
            }
            "side" => {
                counters.records_in += 1;
                counters.side_records += 1;
            }
            "tx_end" => {
                counters.records_in += 1;
                counters.side_records += 1;
                let tx_id: String = tuple.get_item(1)?.extract()?;
                let count: i64 = tuple.get_item(2)?.extract()?;
                if let Ok(lsn) = crate::lsn::parse(&tx_id) {
                    self.core.tx_end(crate::core::lsn_key(&lsn), count);
                }
            }
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown fallback result {other:?}"
                )))
            }
        }
        Ok(())
    }

    /// A `ChangeEvent` the Python decoder made, flattened by `debezium_bridge.core.native`.
    fn event_from_tuple(&mut self, t: &Bound<'_, PyTuple>) -> PyResult<Box<Event>> {
        let topic: String = t.get_item(0)?.extract()?;
        let partition: i32 = t.get_item(1)?.extract()?;
        let offset = opt_int(&t.get_item(2)?)?;
        let db: String = t.get_item(3)?.extract()?;
        let schema: String = t.get_item(4)?.extract()?;
        let name: String = t.get_item(5)?.extract()?;
        let op: String = t.get_item(6)?.extract()?;
        let key: Vec<u8> = t.get_item(7)?.extract()?;
        let before: Option<Vec<u8>> = t.get_item(8)?.extract()?;
        let after: Option<Vec<u8>> = t.get_item(9)?.extract()?;
        let unavailable: Vec<String> = t.get_item(10)?.extract()?;
        let commit_text: Option<String> = t.get_item(11)?.extract()?;
        let change_text: Option<String> = t.get_item(12)?.extract()?;
        let commit_bytes: Vec<u8> = t.get_item(13)?.extract()?;
        let change_bytes: Vec<u8> = t.get_item(14)?.extract()?;
        let serial: Option<i64> = t.get_item(15)?.extract()?;
        let source_ts_ms = opt_int(&t.get_item(16)?)?;
        let ts_ms = opt_int(&t.get_item(17)?)?;
        let snapshot: String = t.get_item(18)?.extract()?;
        let tx: Option<TxTuple> = t.get_item(19)?.extract()?;
        let source: (Option<String>, Option<String>, Option<String>) = t.get_item(20)?.extract()?;
        let column_order: Option<Vec<String>> = t.get_item(21)?.extract()?;
        let partner: Option<Vec<u8>> = t.get_item(22)?.extract()?;
        let seq: String = t.get_item(23)?.extract()?;
        let changed: Option<Vec<String>> = if t.len() > 24 {
            t.get_item(24)?.extract()?
        } else {
            None
        };
        let unordered: bool = if t.len() > 25 {
            t.get_item(25)?.extract()?
        } else {
            false
        };
        let op = match op.as_str() {
            "c" => b'c',
            "u" => b'u',
            "d" => b'd',
            "r" => b'r',
            "t" => b't',
            other => return Err(PyValueError::new_err(format!("unknown op {other:?}"))),
        };
        let lsn_of = |b: &[u8]| -> PyResult<crate::lsn::Lsn> {
            if b.is_empty() {
                Ok(None)
            } else {
                <[u8; 10]>::try_from(b)
                    .map(Some)
                    .map_err(|_| PyValueError::new_err("LSN of 10 bytes"))
            }
        };
        let commit = lsn_of(&commit_bytes)?;
        let change = lsn_of(&change_bytes)?;
        let topic_id = self.core.topic(&topic);
        let tp = self.core.tp(topic_id, partition);
        let mut buf = key;
        let key_span = (0u32, buf.len() as u32);
        let mut members = Vec::new();
        let mut image = |raw: Option<Vec<u8>>, buf: &mut Vec<u8>| -> PyResult<Option<Image>> {
            let Some(raw) = raw else { return Ok(None) };
            let text = std::str::from_utf8(&raw)
                .map_err(|_| PyValueError::new_err("image is not UTF-8"))?;
            let start = buf.len();
            let first = members.len() as u32;
            members.extend(
                value::canonical_members(text, buf)
                    .map_err(|_| PyValueError::new_err("image is not a JSON object"))?,
            );
            Ok(Some(Image {
                span: (start as u32, buf.len() as u32),
                members: (first, members.len() as u32),
            }))
        };
        let before = image(before, &mut buf)?;
        let after = image(after, &mut buf)?;
        let mut position_text = None;
        let derived = |lsn: &crate::lsn::Lsn| -> Option<String> {
            lsn.map(|b| {
                let mut v = Vec::new();
                crate::lsn::format(&b, &mut v);
                String::from_utf8_lossy(&v).into_owned()
            })
        };
        if commit_text != derived(&commit) || change_text != derived(&change) {
            position_text = Some(Box::new((commit_text, change_text)));
        }
        let interner = &mut self.core.interner;
        let table = interner.table(Some(&db), &schema, &name);
        let source = interner.source(
            source.0.as_deref(),
            source.1.as_deref(),
            source.2.as_deref(),
        );
        let snapshot = interner.snapshot(&snapshot);
        Ok(self.core.spare.boxed(Event {
            origin: Origin {
                topic: topic_id,
                partition,
                offset,
                tp,
            },
            table,
            op,
            buf,
            key: key_span,
            before,
            after,
            members,
            unavailable: unavailable
                .into_iter()
                .map(|s| s.into_boxed_str())
                .collect(),
            commit,
            change,
            serial,
            position_text,
            source_ts_ms,
            ts_ms,
            snapshot,
            tx: tx.map(|(id, total_order, data_collection_order, begin_lsn)| {
                Box::new(Tx {
                    id,
                    total_order,
                    data_collection_order,
                    begin_lsn,
                })
            }),
            source,
            column_order: column_order.map(|c| c.into()),
            partner_key: partner.map(|p| p.into_boxed_slice()),
            seq: if seq.is_empty() {
                None
            } else {
                Some(seq.into_boxed_str())
            },
            changed: changed.map(|c| c.into()),
            names: None,
            unordered,
        }))
    }
}

impl NativeCore {
    /// One dump line natively; `Ok(false)` when declined (nothing was counted).
    fn native_line(
        &mut self,
        py: Python<'_>,
        line: &[u8],
        format: crate::dumps::Format,
        mismatch_line: &Bound<'_, PyAny>,
        line_no: i64,
    ) -> PyResult<bool> {
        let Ok(rec) = crate::dumps::parse_line(line, format) else {
            return Ok(false);
        };
        let topic_id = self.core.topic(&rec.topic);
        let tp = self.core.tp(topic_id, rec.partition);
        let Some(value) = rec.value.as_deref() else {
            self.core.counters.records_in += 1;
            self.core.counters.tombstones += 1;
            self.native_records += 1;
            return Ok(true);
        };
        let input = Input {
            topic: &rec.topic,
            topic_id,
            partition: rec.partition,
            offset: rec.offset,
            tp,
            key: rec.key.as_deref(),
            value,
            has_headers: rec.has_headers,
            newkey: rec.newkey.as_ref().map(|v| v.as_deref()),
            oldkey: rec.oldkey.as_ref().map(|v| v.as_deref()),
        };
        let Some(event) = self.decode_input(py, &input) else {
            return Ok(false);
        };
        self.core.counters.records_in += 1;
        self.native_records += 1;
        if let Some(message) = self.core.accept(event) {
            let letter = mismatch_line.call1((PyBytes::new(py, line), line_no, message))?;
            self.push_dead(letter.unbind());
        }
        Ok(true)
    }
}

#[pymethods]
impl NativeCore {
    #[new]
    #[pyo3(signature = (*, pair_key_changes, max_pending, dedupe_capacity, placeholder, binary_mode, fallback, mismatch))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        pair_key_changes: bool,
        max_pending: i64,
        dedupe_capacity: usize,
        placeholder: &str,
        binary_mode: &str,
        fallback: Py<PyAny>,
        mismatch: Py<PyAny>,
    ) -> PyResult<Self> {
        let opts = Options::new(placeholder, self::binary_mode(binary_mode)?);
        Ok(NativeCore {
            core: Core::new(Config {
                pair_key_changes,
                max_pending,
                dedupe_capacity,
            }),
            decoder: Decoder::new(opts),
            fallback,
            mismatch,
            dead: Vec::new(),
            native_records: 0,
            declined_records: 0,
            avro_schema: None,
        })
    }

    /// Names (topics, `db.schema.table`) whose schema-less values the Python decoder reads with
    /// a table schema; and whether newly compiled schemas are reported.
    fn configure(&mut self, schema_file_names: Vec<String>, report_schemas: bool) {
        self.decoder.schema_file_names = schema_file_names.into_iter().collect();
        self.decoder.report_schemas = report_schemas;
    }

    /// Translate records (any iterable of Kafka-record-like objects), in order.
    fn process(&mut self, py: Python<'_>, records: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Ok(list) = records.cast::<PyList>() {
            for record in list.iter() {
                if !self.native_one(py, &record)? {
                    self.declined_records += 1;
                    self.fallback_one(py, &record)?;
                }
            }
            return Ok(());
        }
        for record in records.try_iter()? {
            let record = record?;
            if !self.native_one(py, &record)? {
                self.declined_records += 1;
                self.fallback_one(py, &record)?;
            }
        }
        Ok(())
    }

    /// Results of the Python decoder for input that never was a record here (a runner's own
    /// decoding, e.g. the CES assembler's flush).
    fn take_results(&mut self, py: Python<'_>, results: &Bound<'_, PyAny>) -> PyResult<()> {
        for item in results.try_iter()? {
            self.take_result(py, &item?)?;
        }
        Ok(())
    }

    /// Translate the complete lines of a chunk of a dump file (`lossless` or `kcat`); returns
    /// how many bytes were consumed (an incomplete last line is left unless `last`) and the
    /// next line number. Declined lines go to `line_fallback(line, line_no)` (the Python
    /// reader and decoder), whose results enter the same state.
    #[pyo3(signature = (chunk, format, first_line_no, last, line_fallback, mismatch_line))]
    #[allow(clippy::too_many_arguments)]
    fn process_dump(
        &mut self,
        py: Python<'_>,
        chunk: PyBuffer<u8>,
        format: &str,
        first_line_no: i64,
        last: bool,
        line_fallback: &Bound<'_, PyAny>,
        mismatch_line: &Bound<'_, PyAny>,
    ) -> PyResult<(usize, i64)> {
        let chunk = buffer_bytes(&chunk)?;
        let format = match format {
            "lossless" => crate::dumps::Format::Lossless,
            "kcat" => crate::dumps::Format::Kcat,
            other => {
                return Err(PyValueError::new_err(format!(
                    "no native reader for {other:?}"
                )))
            }
        };
        let mut pos = 0usize;
        let mut line_no = first_line_no;
        while pos < chunk.len() {
            let end = match memchr::memchr(b'\n', &chunk[pos..]) {
                Some(i) => pos + i,
                None if last => chunk.len(),
                None => break,
            };
            let mut line = &chunk[pos..end];
            pos = (end + 1).min(chunk.len());
            let this = line_no;
            line_no += 1;
            while let [rest @ .., b'\r'] = line {
                line = rest; // as the reader's `rstrip(b"\r\n")`
            }
            if crate::dumps::is_blank(line) {
                continue;
            }
            if !self.native_line(py, line, format, mismatch_line, this)? {
                self.declined_records += 1;
                let results = line_fallback.call1((PyBytes::new(py, line), this))?;
                for item in results.try_iter()? {
                    self.take_result(py, &item?)?;
                }
            }
        }
        Ok((pos, line_no))
    }

    /// The data partitions of the complete lines of a chunk (see `process_dump`); lines not
    /// read here are returned for the Python reader.
    #[pyo3(signature = (chunk, format, last))]
    fn scan_dump<'py>(
        &mut self,
        py: Python<'py>,
        chunk: PyBuffer<u8>,
        format: &str,
        last: bool,
    ) -> PyResult<ScanResult<'py>> {
        let chunk = buffer_bytes(&chunk)?;
        let format = match format {
            "lossless" => crate::dumps::Format::Lossless,
            "kcat" => crate::dumps::Format::Kcat,
            other => {
                return Err(PyValueError::new_err(format!(
                    "no native reader for {other:?}"
                )))
            }
        };
        let mut seen: hashbrown::HashSet<(String, i32, bool)> = hashbrown::HashSet::new();
        let mut previous: Option<(String, i32, bool)> = None;
        let mut declined = Vec::new();
        let mut pos = 0usize;
        while pos < chunk.len() {
            let end = match memchr::memchr(b'\n', &chunk[pos..]) {
                Some(i) => pos + i,
                None if last => chunk.len(),
                None => break,
            };
            let line = &chunk[pos..end];
            pos = (end + 1).min(chunk.len());
            if crate::dumps::is_blank(line) {
                continue;
            }
            match crate::dumps::scan_line(line, format, CES_HEAD) {
                Ok((topic, partition, head)) => {
                    let ces = is_ces(&head);
                    if previous
                        .as_ref()
                        .is_none_or(|(t, p, c)| (t.as_str(), *p, *c) != (&*topic, partition, ces))
                    {
                        let key = (topic.into_owned(), partition, ces);
                        seen.insert(key.clone());
                        previous = Some(key);
                    }
                }
                Err(_) => declined.push(PyBytes::new(py, line)),
            }
        }
        Ok((pos, seen.into_iter().collect(), declined))
    }

    fn reject(&mut self, letter: Py<PyAny>) {
        self.core.counters.records_in += 1;
        self.core.counters.dead_letters += 1;
        self.push_dead(letter);
    }

    fn expect(&mut self, partitions: Vec<(String, i32)>) {
        for (topic, partition) in partitions {
            let t = self.core.topic(&topic);
            let tp = self.core.tp(t, partition);
            self.core.expect(tp);
        }
    }

    fn mark_idle(&mut self, topic: &str, partition: i32) {
        let t = self.core.topic(topic);
        let tp = self.core.tp(t, partition);
        self.core.mark_idle(tp);
    }

    /// Count a partition marked idle in the watermark again (`Translator.mark_active`).
    fn mark_active(&mut self, topic: &str, partition: i32) {
        let t = self.core.topic(topic);
        let tp = self.core.tp(t, partition);
        self.core.mark_active(tp);
    }

    /// An event decoded from input that is not a Kafka record (flattened `ChangeEvent`, its
    /// record for a replay-mismatch dead letter): `records` input records made it.
    fn process_event(
        &mut self,
        py: Python<'_>,
        event: &Bound<'_, PyTuple>,
        record: &Bound<'_, PyAny>,
        records: i64,
    ) -> PyResult<()> {
        let event = self.event_from_tuple(event)?;
        self.core.count_records(records, false);
        if let Some(message) = self.core.accept(event) {
            self.mismatch_letter(py, record, message)?;
        }
        Ok(())
    }

    /// `process_event` for each `(event, record, records)` in order, in one call.
    fn process_events(
        &mut self,
        py: Python<'_>,
        events: Vec<(Bound<'_, PyTuple>, Bound<'_, PyAny>, i64)>,
    ) -> PyResult<()> {
        for (event, record, records) in &events {
            self.process_event(py, event, record, *records)?;
        }
        Ok(())
    }

    /// Input records that repeat one already taken.
    fn drop_duplicate(&mut self, records: i64) {
        self.core.count_records(records, true);
    }

    /// A transaction END for the transaction committed at `commit` (`parse_lsn` bytes) with
    /// `event_count` events; `False` when none of its events has arrived yet.
    fn end_transaction(&mut self, commit: &[u8], event_count: i64) -> bool {
        self.core.end_transaction(commit, event_count)
    }

    /// Keep the released dedupe marks per partition (for `resume_marks`).
    fn track_resume_points(&mut self) {
        self.core.track_resume_points();
    }

    /// The lowest input offset still waiting, per `(topic, partition)`.
    fn pending_offsets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (tp, offset) in self.core.pending_offsets() {
            d.set_item(self.tp_key(tp), offset)?;
        }
        Ok(d)
    }

    /// Per `(topic, partition)`: `((commit, change, serial), ((op, key id), ...))`, the
    /// replay-dedupe mark of what was released (pairs sorted).
    fn resume_marks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let Some(marks) = self.core.resume_marks() else {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "call track_resume_points() before processing",
            ));
        };
        let d = PyDict::new(py);
        for (tp, key, seen) in marks {
            let position = (
                PyBytes::new(py, &crate::core::lsn_bytes(key.0)),
                PyBytes::new(py, &crate::core::lsn_bytes(key.1)),
                key.2,
            );
            let mut pairs = Vec::with_capacity(seen.len());
            for (op, id) in seen {
                let op = char::from(op).to_string();
                pairs.push(PyTuple::new(
                    py,
                    [
                        PyString::new(py, &op).into_any(),
                        PyBytes::new(py, &id).into_any(),
                    ],
                )?);
            }
            d.set_item(self.tp_key(tp), (position, PyTuple::new(py, pairs)?))?;
        }
        Ok(d)
    }

    /// Start partitions from saved marks: `(topic, partition, commit, change, serial,
    /// [(op, key id), ...])` each (also starts tracking resume points).
    fn restore_marks(&mut self, marks: Vec<SavedMark>) -> PyResult<()> {
        self.core.track_resume_points();
        for (topic, partition, commit, change, serial, seen) in marks {
            let lsn = |b: &[u8]| {
                crate::core::lsn_key_of(b)
                    .ok_or_else(|| PyValueError::new_err("a mark's LSN is empty or 10 bytes long"))
            };
            let key = (lsn(&commit)?, lsn(&change)?, serial);
            let mut pairs = Vec::with_capacity(seen.len());
            for (op, id) in seen {
                let &[op] = op.as_bytes() else {
                    return Err(PyValueError::new_err(format!("unknown op {op:?}")));
                };
                pairs.push((op, id.into_boxed_slice()));
            }
            let t = self.core.topic(&topic);
            let tp = self.core.tp(t, partition);
            self.core.restore_mark(tp, key, pairs);
        }
        Ok(())
    }

    fn flush(&mut self) {
        self.core.flush();
    }

    /// Emit position groups a runner released itself (events as flattened tuples).
    fn emit(&mut self, events: Vec<Bound<'_, PyTuple>>, each: bool) -> PyResult<()> {
        let mut out = Vec::with_capacity(events.len());
        for t in &events {
            out.push(self.event_from_tuple(t)?);
        }
        if each {
            self.core.emit_each(out);
        } else {
            self.core.emit(out);
        }
        Ok(())
    }

    /// The canonical JSON lines written so far (one `bytes`) and how many records they hold.
    fn drain_lines<'py>(&mut self, py: Python<'py>) -> (Bound<'py, PyBytes>, usize) {
        let lines = PyBytes::new(py, &self.core.out);
        (lines, self.core.clear_output())
    }

    /// The canonical records written so far as an Arrow batch (see `arrow.rs`), and how many.
    fn drain_arrow(&mut self) -> crate::arrow::ArrowBatch {
        let batch = crate::arrow::batch(&self.core);
        self.core.clear_output();
        crate::arrow::ArrowBatch::new(batch)
    }

    fn drain_dead(&mut self) -> Vec<Py<PyAny>> {
        std::mem::take(&mut self.dead)
    }

    #[getter]
    fn has_output(&self) -> bool {
        self.core.out_records > 0 || !self.dead.is_empty()
    }

    /// Records handled without the Python decoder.
    #[getter]
    fn native_records(&self) -> i64 {
        self.native_records
    }

    /// Records (and dump lines) the native decoder declined: the Python decoder read them.
    #[getter]
    fn declined_records(&self) -> i64 {
        self.declined_records
    }

    /// The source of Confluent Avro writer schemas: `avro_schema(schema_id, is_key)` returns
    /// the schema JSON, or `None` when the Python decoder keeps that id's records.
    fn configure_avro(&mut self, avro_schema: Py<PyAny>) {
        self.avro_schema = Some(avro_schema);
    }

    /// Schemas compiled since the last call (`v`/`k` + the schema JSON), for schema listeners.
    fn take_new_schemas(&mut self) -> Vec<String> {
        std::mem::take(&mut self.decoder.new_schemas)
    }

    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = &self.core.counters;
        let d = PyDict::new(py);
        for (k, v) in [
            ("records_in", c.records_in),
            ("changes_out", c.changes_out),
            ("merged", c.merged),
            ("duplicates", c.duplicates),
            ("side_records", c.side_records),
            ("tombstones", c.tombstones),
            ("dead_letters", c.dead_letters),
            ("skipped", c.skipped),
            ("pending", c.pending),
            ("late", c.late),
            ("key_changes_paired", c.key_changes_paired),
            ("released_by_pressure", c.released_by_pressure),
            ("replay_mismatches", c.replay_mismatches),
        ] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    fn state_size<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.core.state_size() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
}

/// The bytes of a dump chunk: `bytes`, or a `bytearray` (or a view of one) the caller reuses
/// from chunk to chunk.
fn buffer_bytes(buffer: &PyBuffer<u8>) -> PyResult<&[u8]> {
    if !buffer.is_c_contiguous() {
        return Err(PyValueError::new_err(
            "a dump chunk must be a contiguous buffer",
        ));
    }
    if buffer.len_bytes() == 0 {
        return Ok(&[]);
    }
    // SAFETY: the buffer is held (its exporter cannot be resized or freed) for as long as the
    // slice borrows it, and it is contiguous bytes (`u8`, checked by `PyBuffer::get`). Nothing
    // writes to it meanwhile: the dump readers own their chunk buffer and the callbacks made
    // during a call (the Python line reader, dead letters) receive copies of lines.
    Ok(unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) })
}

/// How many leading bytes of a value [`is_ces`] reads.
const CES_HEAD: usize = 600;

/// `formats.ces.envelope.is_ces`: a CES event (JSON or Avro)?
fn is_ces(value: &[u8]) -> bool {
    match value.first() {
        Some(0x06) => value.get(..4) == Some(b"\x061.0"),
        Some(b'{' | b' ' | b'\t' | b'\r' | b'\n') => memchr::memmem::find(
            &value[..value.len().min(CES_HEAD)],
            b"com.microsoft.SQL.CES.",
        )
        .is_some(),
        _ => false,
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeCore>()?;
    m.add_class::<crate::arrow::ArrowBatch>()?;
    spark::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
