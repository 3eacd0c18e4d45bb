//! Debezium JsonConverter values and keys (with and without schema) → [`Event`].
//!
//! The rules are those of `formats/debezium/decode.py` and `envelope.py`; whatever this module
//! does not decode exactly like them is a [`Decline`], and the record goes to the Python
//! decoder (CloudEvents, CES, Avro-JSON wrappers, side records, `op=m`, string serials, bad
//! input of every kind: the reference writes those dead letters).

use crate::event::{Event, Image, Origin, SpareBuffers, Tx};
use crate::lsn;
use crate::parse::RowMode;
use crate::schema::{Options, Table};
use crate::value::{Decline, Result};
use serde::Deserialize;
use sonic_rs::{JsonValueTrait, LazyValue};
use std::sync::Arc;

const TS_MIN: i64 = -62_135_596_800_000;
const TS_END: i64 = 253_402_300_800_000;

/// Where `part` sits in `text`, if it is a slice of it: sonic-rs hands a JSON string with
/// escapes over as its own unescaped copy, not as a slice of the input.
fn offset_in(text: &str, part: &str) -> Option<usize> {
    let start = (part.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    (start.checked_add(part.len())? <= text.len()).then_some(start)
}

#[derive(Deserialize)]
struct WithSchema<'a> {
    #[serde(borrow, default)]
    schema: Option<LazyValue<'a>>,
    #[serde(borrow, default)]
    payload: Option<LazyValue<'a>>,
}

/// How one row image is decoded: a compiled table version, or schema-less.
#[derive(Clone)]
pub enum Rows {
    Schemaless,
    Table(Arc<Table>),
}

/// Interning of tables, sources and snapshot markers (shared with the translator).
#[derive(Default)]
pub struct Interner {
    pub tables: Vec<TableInfo>,
    table_index: hashbrown::HashMap<(Option<String>, String, String), u32>,
    pub sources: Vec<Vec<u8>>,
    source_index: hashbrown::HashMap<SourceKey, u32>,
    pub snapshots: Vec<String>,
    /// Each snapshot marker as a JSON string.
    pub snapshot_json: Vec<Vec<u8>>,
    snapshot_index: hashbrown::HashMap<String, u32>,
    last_table: Option<(u32, Option<String>)>,
    last_source: Option<(u32, SourceKey)>,
    last_snapshot: Option<u32>,
}

type SourceKey = (Option<String>, Option<String>, Option<String>);

pub struct TableInfo {
    pub table_id: Arc<str>,
    /// `table_id` as a JSON string.
    pub id_json: Vec<u8>,
    /// `{"db":…,"schema":…,"name":…}`
    pub json: Vec<u8>,
    pub schema: String,
    pub name: String,
}

impl TableInfo {
    pub fn new(table_id: Arc<str>, json: Vec<u8>, schema: String, name: String) -> TableInfo {
        TableInfo {
            id_json: crate::jsonw::json_string(&table_id),
            table_id,
            json,
            schema,
            name,
        }
    }
}

impl Interner {
    pub fn table(&mut self, db: Option<&str>, schema: &str, name: &str) -> u32 {
        if let Some((last, last_db)) = &self.last_table {
            let info = &self.tables[*last as usize];
            let same = crate::jsonw::same_bytes;
            if same(info.name.as_bytes(), name.as_bytes())
                && same(info.schema.as_bytes(), schema.as_bytes())
                && match (last_db, db) {
                    (Some(a), Some(b)) => same(a.as_bytes(), b.as_bytes()),
                    (a, b) => a.is_none() && b.is_none(),
                }
            {
                return *last;
            }
        }
        let i = self.table_slow(db, schema, name);
        self.last_table = Some((i, db.map(str::to_string)));
        i
    }

    fn table_slow(&mut self, db: Option<&str>, schema: &str, name: &str) -> u32 {
        if let Some(&i) =
            self.table_index
                .get(&(db.map(str::to_string), schema.to_string(), name.to_string()))
        {
            return i;
        }
        let dbs = db.unwrap_or("");
        let mut json = Vec::new();
        json.extend_from_slice(b"{\"db\":");
        crate::jsonw::write_str(&mut json, dbs);
        json.extend_from_slice(b",\"schema\":");
        crate::jsonw::write_str(&mut json, schema);
        json.extend_from_slice(b",\"name\":");
        crate::jsonw::write_str(&mut json, name);
        json.push(b'}');
        let i = self.tables.len() as u32;
        self.tables.push(TableInfo::new(
            format!("{dbs}.{schema}.{name}").into(),
            json,
            schema.to_string(),
            name.to_string(),
        ));
        self.table_index.insert(
            (db.map(str::to_string), schema.to_string(), name.to_string()),
            i,
        );
        i
    }

    pub fn source(
        &mut self,
        connector: Option<&str>,
        name: Option<&str>,
        version: Option<&str>,
    ) -> u32 {
        if let Some((i, key)) = &self.last_source {
            let same = |a: &Option<String>, b: Option<&str>| match (a, b) {
                (Some(a), Some(b)) => crate::jsonw::same_bytes(a.as_bytes(), b.as_bytes()),
                (a, b) => a.is_none() && b.is_none(),
            };
            if same(&key.0, connector) && same(&key.1, name) && same(&key.2, version) {
                return *i;
            }
        }
        let i = self.source_slow(connector, name, version);
        self.last_source = Some((
            i,
            (
                connector.map(str::to_string),
                name.map(str::to_string),
                version.map(str::to_string),
            ),
        ));
        i
    }

    fn source_slow(
        &mut self,
        connector: Option<&str>,
        name: Option<&str>,
        version: Option<&str>,
    ) -> u32 {
        let key = (
            connector.map(str::to_string),
            name.map(str::to_string),
            version.map(str::to_string),
        );
        if let Some(&i) = self.source_index.get(&key) {
            return i;
        }
        let mut json = Vec::new();
        json.extend_from_slice(b"{\"connector\":");
        crate::jsonw::write_opt_str(&mut json, connector);
        json.extend_from_slice(b",\"name\":");
        crate::jsonw::write_opt_str(&mut json, name);
        json.extend_from_slice(b",\"version\":");
        crate::jsonw::write_opt_str(&mut json, version);
        json.push(b'}');
        let i = self.sources.len() as u32;
        self.sources.push(json);
        self.source_index.insert(key, i);
        i
    }

    pub fn snapshot(&mut self, marker: &str) -> u32 {
        if let Some(i) = self.last_snapshot {
            if crate::jsonw::same_bytes(self.snapshots[i as usize].as_bytes(), marker.as_bytes()) {
                return i;
            }
        }
        let i = self.snapshot_slow(marker);
        self.last_snapshot = Some(i);
        i
    }

    fn snapshot_slow(&mut self, marker: &str) -> u32 {
        if let Some(&i) = self.snapshot_index.get(marker) {
            return i;
        }
        let i = self.snapshots.len() as u32;
        self.snapshots.push(marker.to_string());
        self.snapshot_json.push(crate::jsonw::json_string(marker));
        self.snapshot_index.insert(marker.to_string(), i);
        i
    }
}

/// What an envelope reader writes for one event: its canonical text, the members of its images
/// and its unavailable columns, in buffers taken from the spare ones.
struct Written {
    buf: Vec<u8>,
    members: Vec<crate::value::Member>,
    unavailable: Vec<Box<str>>,
}

impl Written {
    fn new(spare: &mut SpareBuffers, text: usize, members: usize) -> Self {
        Written {
            buf: spare.text(text),
            members: spare.members(members),
            unavailable: Vec::new(),
        }
    }

    /// Empty again, for the next reader to try.
    fn clear(&mut self) {
        self.buf.clear();
        self.members.clear();
        self.unavailable.clear();
    }
}

/// Decoding state: compiled schemas per prefix, settings.
pub struct Decoder {
    pub opts: Options,
    value_prefixes: hashbrown::HashMap<u32, (Vec<u8>, Option<Rows>)>,
    key_prefixes: hashbrown::HashMap<u32, (Vec<u8>, Option<Rows>)>,
    compiled: hashbrown::HashMap<Vec<u8>, Option<Rows>>,
    /// Schemas first seen (raw JSON), for the Python side's schema listeners.
    pub new_schemas: Vec<String>,
    pub report_schemas: bool,
    /// Topics / `db.schema.table` names whose schema-less values have a table schema in Python
    /// (those records are declined: the Python decoder applies the schema).
    pub schema_file_names: hashbrown::HashSet<String>,
    /// Confluent Avro writer schemas handed over by the Python side, per schema id (`None`:
    /// declined, the Python decoder reads those records).
    avro_values: hashbrown::HashMap<u32, Option<Arc<crate::avro::AvroValue>>>,
    avro_keys: hashbrown::HashMap<u32, Option<Arc<crate::avro::AvroKey>>>,
    /// The key schema id a decode stopped at because it was not handed over yet.
    pub missing_avro_key: Option<u32>,
    /// Room for the canonical text of the next Avro value (from the last one's).
    avro_text_len: usize,
    /// Per topic id: the layout of its envelopes and keys.
    layouts: Vec<TopicLayouts>,
}

/// The layouts of one topic's JSON envelopes and keys ([`crate::scan::Layout`]).
#[derive(Default)]
struct TopicLayouts {
    value: Option<crate::scan::Layout>,
    key: crate::scan::Columns,
    /// Envelopes read along `value` since it was learnt.
    hits: u32,
    /// Layouts in a row that missed on the envelope after the one they were learnt from.
    strikes: u32,
    /// Envelopes to read without learning a layout (after strikes: a topic whose envelopes
    /// do not share one layout).
    wait: u32,
}

impl TopicLayouts {
    /// After `scan::envelope` read `text`: its layout, unless this topic waits.
    fn learn(&mut self, text: &str, opts: &Options) {
        if self.wait > 0 {
            self.wait -= 1;
            return;
        }
        if self.value.is_some() {
            if self.hits == 0 {
                self.strikes = (self.strikes + 1).min(12);
                self.wait = 1 << self.strikes;
                self.value = None;
                return;
            }
            self.strikes = 0;
        }
        self.value = crate::scan::Layout::learn(text, opts);
        self.hits = 0;
    }
}

/// The layouts of topic `topic_id`.
fn layouts_of(layouts: &mut Vec<TopicLayouts>, topic_id: u32) -> &mut TopicLayouts {
    let i = topic_id as usize;
    if i >= layouts.len() {
        layouts.resize_with(i + 1, TopicLayouts::default);
    }
    &mut layouts[i]
}

/// What the caller knows of the record besides key and value.
pub struct Input<'a> {
    pub topic: &'a str,
    pub topic_id: u32,
    pub partition: i32,
    pub offset: Option<i64>,
    pub tp: u32,
    pub key: Option<&'a [u8]>,
    pub value: &'a [u8],
    pub has_headers: bool,
    /// The last `__debezium.newkey` / `__debezium.oldkey` header: `None` absent,
    /// `Some(None)` a null header.
    pub newkey: Option<Option<&'a [u8]>>,
    pub oldkey: Option<Option<&'a [u8]>>,
}

const WITH_SCHEMA: &[u8] = b"{\"schema\":";

/// A searcher for a `"payload"` member name, built once (`str::contains` sets up a searcher
/// per call: ~200 instructions per key).
static PAYLOAD_NAME: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"payload\""));

/// Nesting deeper than this is left to the reference (the parsers here recurse).
const MAX_DEPTH: usize = 64;

/// Whether the JSON text nests no deeper than [`MAX_DEPTH`]: a count of the brackets decides
/// almost always; only text with many of them is scanned.
fn shallow(text: &[u8]) -> bool {
    nests_within(text, MAX_DEPTH)
}

/// Whether the JSON text nests no deeper than `max`.
fn nests_within(text: &[u8], max: usize) -> bool {
    if memchr::memchr2_iter(b'{', b'[', text).take(max + 1).count() <= max {
        return true;
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in text {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return false;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

/// A JSON text as sonic-rs's document (for what [`crate::scan`] declines; that reader never
/// descends more than two levels, the document parser and its walk recurse): text nesting
/// deeper than `max` is the reference's.
fn document(text: &str, max: usize) -> Result<sonic_rs::Value> {
    if !nests_within(text.as_bytes(), max) {
        return Err(Decline);
    }
    sonic_rs::from_str(text).map_err(|_| Decline)
}

impl Decoder {
    pub fn new(opts: Options) -> Self {
        Decoder {
            opts,
            value_prefixes: Default::default(),
            key_prefixes: Default::default(),
            compiled: Default::default(),
            new_schemas: Vec::new(),
            report_schemas: false,
            schema_file_names: Default::default(),
            avro_values: Default::default(),
            avro_keys: Default::default(),
            missing_avro_key: None,
            avro_text_len: 0,
            layouts: Vec::new(),
        }
    }

    /// Whether the writer schema of this id (value or key) was handed over already.
    pub fn knows_avro(&self, id: u32, key: bool) -> bool {
        if key {
            self.avro_keys.contains_key(&id)
        } else {
            self.avro_values.contains_key(&id)
        }
    }

    /// A writer schema (JSON text) for a schema id; `None`: the Python decoder reads its records.
    pub fn add_avro(&mut self, id: u32, key: bool, schema: Option<&str>) {
        if key {
            let compiled = schema
                .and_then(|s| crate::avro::AvroKey::compile(s, &self.opts).ok())
                .map(Arc::new);
            self.avro_keys.insert(id, compiled);
        } else {
            let compiled = schema
                .and_then(|s| crate::avro::AvroValue::compile(s, &self.opts).ok())
                .map(Arc::new);
            self.avro_values.insert(id, compiled);
        }
    }

    /// An Avro key (or, through the JSON path, any other key) as canonical JSON in `buf`.
    fn avro_key_into(
        &mut self,
        topic_id: u32,
        raw: Option<&[u8]>,
        value_rows: &Rows,
        buf: &mut Vec<u8>,
    ) -> Result<(u32, u32)> {
        let Some(raw) = raw else {
            return self.decode_key_into(topic_id, None, value_rows, buf);
        };
        if raw.first() != Some(&0) {
            return self.decode_key_into(topic_id, Some(raw), value_rows, buf);
        }
        let id = crate::avro::schema_id(raw).ok_or(Decline)?;
        let Some(compiled) = self.avro_keys.get(&id) else {
            self.missing_avro_key = Some(id);
            return Err(Decline);
        };
        let compiled = compiled.clone().ok_or(Decline)?;
        let start = buf.len();
        compiled.write(raw, &self.opts, buf)?;
        Ok((start as u32, buf.len() as u32))
    }

    /// One Confluent Avro value (a data event), or a decline.
    pub fn decode_avro(
        &mut self,
        input: &Input<'_>,
        interner: &mut Interner,
        spare: &mut SpareBuffers,
    ) -> Result<Box<Event>> {
        let id = crate::avro::schema_id(input.value).ok_or(Decline)?;
        let compiled = self
            .avro_values
            .get(&id)
            .ok_or(Decline)?
            .clone()
            .ok_or(Decline)?;
        // canonical text is longer than Avro binary by a factor that depends on the table:
        // the last event's length, so that the buffer is not grown while the images are written
        let capacity = (input.value.len() * 2 + 64).max(self.avro_text_len);
        let mut written = Written::new(spare, capacity, 2 * compiled.table.columns.len());
        let env = compiled.read(
            input.value,
            &self.opts,
            &mut written.buf,
            &mut written.members,
            &mut written.unavailable,
        )?;
        self.avro_text_len = written.buf.len() + written.buf.len() / 8 + 64;
        let rows = Rows::Table(compiled.table.clone());
        self.finish(input, env, rows, written, interner, spare, true)
    }

    fn compile(&mut self, schema_raw: &str, key: bool) -> Option<Rows> {
        let cache_key = {
            let mut k = Vec::with_capacity(schema_raw.len() + 1);
            k.push(key as u8);
            k.extend_from_slice(schema_raw.as_bytes());
            k
        };
        if let Some(found) = self.compiled.get(&cache_key) {
            return found.clone();
        }
        let rows = if key {
            match sonic_rs::from_str::<sonic_rs::Value>(schema_raw) {
                Ok(v) if v.is_null() => Some(Rows::Schemaless),
                Ok(v) => Table::from_connect(&v, &self.opts)
                    .ok()
                    .map(|t| Rows::Table(Arc::new(t))),
                Err(_) => None,
            }
        } else {
            match Table::from_envelope_schema(schema_raw, &self.opts) {
                Ok(Some(t)) => Some(Rows::Table(Arc::new(t))),
                Ok(None) => Some(Rows::Schemaless),
                Err(_) => None,
            }
        };
        if self.report_schemas && rows.is_some() && schema_raw != "null" {
            self.new_schemas
                .push(format!("{}{}", if key { "k" } else { "v" }, schema_raw));
        }
        if self.compiled.len() > 4096 {
            self.compiled.clear();
        }
        self.compiled.insert(cache_key, rows.clone());
        rows
    }

    /// `{"schema":S,"payload":P}`: the rows of `S` and the raw payload, the schema part
    /// recognised by the topic's last prefix (parsed once per table version).
    fn split<'v>(&mut self, topic_id: u32, value: &'v [u8], key: bool) -> Result<(Rows, &'v str)> {
        let cache = if key {
            &self.key_prefixes
        } else {
            &self.value_prefixes
        };
        if let Some((prefix, rows)) = cache.get(&topic_id) {
            if value.len() > prefix.len()
                && value.starts_with(prefix)
                && value.last() == Some(&b'}')
            {
                let rows = rows.clone().ok_or(Decline)?;
                // (the nesting of the payload is checked before the document is built:
                // see `document`)
                let body = &value[prefix.len()..value.len() - 1];
                let payload = simdutf8::basic::from_utf8(body).map_err(|_| Decline)?;
                return Ok((
                    rows,
                    payload.trim_matches(|c: char| c == ' ' || c == '\t' || c == '\n' || c == '\r'),
                ));
            }
        }
        if !shallow(value) {
            return Err(Decline);
        }
        let text = simdutf8::basic::from_utf8(value).map_err(|_| Decline)?;
        let parts: WithSchema = sonic_rs::from_str(text).map_err(|_| Decline)?;
        let schema_raw = parts
            .schema
            .as_ref()
            .map(|s| s.as_raw_str())
            .unwrap_or("null");
        let (payload_raw, payload_start): (&'v str, Option<usize>) = match parts.payload.as_ref() {
            Some(p) => {
                let raw = p.as_raw_str();
                let start = offset_in(text, raw).ok_or(Decline)?;
                (&text[start..start + raw.len()], Some(start))
            }
            None => ("null", None),
        };
        let rows = self.compile(schema_raw, key);
        // the prefix: everything before the payload when the payload closes the value
        if let Some(payload_start) = payload_start.filter(|&start| {
            value.last() == Some(&b'}') && start + payload_raw.len() == value.len() - 1
        }) {
            let prefix = value[..payload_start].to_vec();
            let cache = if key {
                &mut self.key_prefixes
            } else {
                &mut self.value_prefixes
            };
            cache.insert(topic_id, (prefix, rows.clone()));
        }
        Ok((rows.ok_or(Decline)?, payload_raw))
    }

    /// How deep a payload may nest: a schema-ful one sits one level inside its value.
    fn depth_left(rows: &Rows) -> usize {
        match rows {
            Rows::Schemaless => MAX_DEPTH,
            Rows::Table(_) => MAX_DEPTH - 1,
        }
    }

    fn mode(rows: &Rows) -> RowMode<'_> {
        match rows {
            Rows::Schemaless => RowMode::Schemaless,
            Rows::Table(t) => RowMode::Table(t),
        }
    }

    /// A JSON Kafka key (or key header) as canonical JSON appended to `buf`; `Ok(false)` for
    /// a null key. One without a schema of its own is converted by `value_rows`, its value's
    /// (as the reference's `Decoder.decode_key` converts it).
    fn key(
        &mut self,
        topic_id: u32,
        raw: &[u8],
        value_rows: &Rows,
        buf: &mut Vec<u8>,
    ) -> Result<bool> {
        if raw.first() == Some(&0) {
            return Err(Decline); // Confluent Avro keys: see the Avro decoder
        }
        let bare = !raw.starts_with(WITH_SCHEMA);
        let (rows, payload) = if !bare {
            self.split(topic_id, raw, true)?
        } else {
            let text = simdutf8::basic::from_utf8(raw).map_err(|_| Decline)?;
            let text = text.trim_matches(|c: char| c == ' ' || c == '\t' || c == '\n' || c == '\r');
            if text == "null" {
                return Ok(false);
            }
            // `{schema, payload}` in another order is the reference's (and so are Avro-JSON
            // wrapped values, nested objects: see below)
            if !text.starts_with('{') || PAYLOAD_NAME.find(text.as_bytes()).is_some() {
                return Err(Decline);
            }
            (value_rows.clone(), text)
        };
        if payload == "null" {
            return Ok(false);
        }
        let start = buf.len();
        let mut ignored = Vec::new();
        let columns = &mut layouts_of(&mut self.layouts, topic_id).key;
        match crate::scan::image_along(
            columns,
            payload,
            Self::mode(&rows),
            &self.opts,
            buf,
            &mut ignored,
        ) {
            Ok(image) => return Ok(image.is_some()),
            Err(Decline) => {
                buf.truncate(start);
                ignored.clear();
            }
        }
        if bare && payload.contains(":{") {
            return Err(Decline);
        }
        let mut members = Vec::new();
        let doc = document(payload, Self::depth_left(&rows))?;
        let image = crate::dom::image(
            &doc,
            Self::mode(&rows),
            &self.opts,
            buf,
            &mut members,
            &mut ignored,
        )?;
        Ok(image.is_some())
    }

    pub fn decode_key_into(
        &mut self,
        topic_id: u32,
        raw: Option<&[u8]>,
        value_rows: &Rows,
        buf: &mut Vec<u8>,
    ) -> Result<(u32, u32)> {
        let start = buf.len();
        let present = match raw {
            Some(raw) => self.key(topic_id, raw, value_rows, buf)?,
            None => false,
        };
        if present && buf.len() - start == 2 && &buf[start..] == b"{}" {
            // an empty key struct: the reference writes `{}` either way
        } else if !present {
            buf.truncate(start);
            buf.extend_from_slice(b"{}");
        }
        Ok((start as u32, buf.len() as u32))
    }

    /// One record's event (a Debezium JSON or Confluent Avro value), or a decline; its buffers
    /// are taken from `spare` where it has some.
    pub fn decode(
        &mut self,
        input: &Input<'_>,
        interner: &mut Interner,
        spare: &mut SpareBuffers,
    ) -> Result<Box<Event>> {
        let value = input.value;
        match value.first() {
            Some(b'{') => {}
            Some(0) => return self.decode_avro(input, interner, spare),
            _ => return Err(Decline),
        }
        // (CES events have no `op`: they are declined below and go through the assembler)
        let (rows, payload) = if value.starts_with(WITH_SCHEMA) {
            self.split(input.topic_id, value, false)?
        } else {
            (
                Rows::Schemaless,
                simdutf8::basic::from_utf8(value).map_err(|_| Decline)?,
            )
        };
        let mut written = Written::new(spare, payload.len() + 64, 16);
        let mode = Self::mode(&rows);
        let layouts = layouts_of(&mut self.layouts, input.topic_id);
        if let Some(layout) = layouts.value.as_mut() {
            let fixed = layout.fixed.clone();
            match layout.envelope(
                payload,
                &fixed,
                mode,
                &self.opts,
                &mut written.buf,
                &mut written.members,
                &mut written.unavailable,
            ) {
                Ok(env) => {
                    layouts.hits += 1;
                    return self.finish(input, env, rows, written, interner, spare, false);
                }
                Err(Decline) => written.clear(),
            }
        }
        match crate::scan::envelope(
            payload,
            mode,
            &self.opts,
            &mut written.buf,
            &mut written.members,
            &mut written.unavailable,
        ) {
            Ok(env) => {
                layouts.learn(payload, &self.opts);
                return self.finish(input, env, rows, written, interner, spare, false);
            }
            Err(Decline) => written.clear(),
        }
        let doc = document(payload, Self::depth_left(&rows))?;
        let env = crate::dom::envelope(
            &doc,
            mode,
            &self.opts,
            &mut written.buf,
            &mut written.members,
            &mut written.unavailable,
        )?;
        self.finish(input, env, rows, written, interner, spare, false)
    }

    /// The event of a decoded envelope (the checks of `envelope.build_event`); `avro`: the key
    /// may be Confluent Avro and the key headers are not read (the reference's Avro path).
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &mut self,
        input: &Input<'_>,
        env: crate::dom::Envelope<'_>,
        rows: Rows,
        written: Written,
        interner: &mut Interner,
        spare: &mut SpareBuffers,
        avro: bool,
    ) -> Result<Box<Event>> {
        let Written {
            mut buf,
            members,
            mut unavailable,
        } = written;
        crate::dom::first_occurrences(&mut unavailable);
        let op = match env.op {
            Some("c") => b'c',
            Some("u") => b'u',
            Some("d") => b'd',
            Some("r") => b'r',
            Some("t") => b't',
            _ => return Err(Decline), // no op (side records, CloudEvents), "m", unknown
        };
        let source = env.source.as_ref().ok_or(Decline)?;
        let (Some(schema_name), Some(table_name)) = (source.schema, source.table) else {
            return Err(Decline);
        };
        if matches!(op, b'c' | b'r' | b'u') && env.after.is_none() {
            return Err(Decline);
        }
        if matches!(rows, Rows::Schemaless) && !self.schema_file_names.is_empty() {
            let table_id = format!(
                "{}.{}.{}",
                source.db.unwrap_or("None"),
                schema_name,
                table_name
            );
            if self.schema_file_names.contains(input.topic)
                || self.schema_file_names.contains(&table_id)
            {
                return Err(Decline);
            }
        }
        let key = if avro {
            self.avro_key_into(input.topic_id, input.key, &rows, &mut buf)?
        } else {
            self.decode_key_into(input.topic_id, input.key, &rows, &mut buf)?
        };
        let key_empty = &buf[key.0 as usize..key.1 as usize] == b"{}";
        if op == b'd' && env.before.is_none() && key_empty {
            return Err(Decline);
        }
        let mut partner_key: Option<Box<[u8]>> = None;
        if input.has_headers {
            let header = if op == b'd' {
                input.newkey
            } else {
                input.oldkey
            };
            if let Some(Some(raw)) = header {
                let mut tmp = Vec::new();
                let span = self.avro_key_into(input.topic_id, Some(raw), &rows, &mut tmp)?;
                partner_key = Some(tmp[span.0 as usize..span.1 as usize].into());
            }
        }
        let commit = match source.commit_lsn {
            Some(text) => lsn::parse(text).map_err(|_| Decline)?,
            None => None,
        };
        let change = match source.change_lsn {
            Some(text) => lsn::parse(text).map_err(|_| Decline)?,
            None => None,
        };
        if commit.is_none() && op != b't' {
            return Err(Decline);
        }
        let serial = source.event_serial_no;
        if serial.is_some_and(|s| s < 0) {
            return Err(Decline);
        }
        let source_ts = source.ts_ms;
        if source_ts.is_some_and(|ts| !(TS_MIN..TS_END).contains(&ts)) {
            return Err(Decline);
        }
        let ts_ms = env.ts_ms;
        if ts_ms.is_some_and(|ts| !(TS_MIN..TS_END).contains(&ts)) {
            return Err(Decline);
        }
        let snapshot = match source.snapshot {
            None | Some(Err(false)) => interner.snapshot("false"),
            Some(Err(true)) => interner.snapshot("true"),
            Some(Ok(text)) => interner.snapshot(text),
        };
        let tx = env.transaction.as_ref().map(|t| {
            Box::new(Tx {
                id: t.id.to_string(),
                total_order: t.total_order,
                data_collection_order: t.data_collection_order,
                begin_lsn: None,
            })
        });
        let image = |at: Option<crate::parse::ImageAt>| {
            at.map(|a| Image {
                span: a.span,
                members: a.members,
            })
        };
        let before = image(env.before);
        let after = image(env.after);
        let table = interner.table(source.db, schema_name, table_name);
        let source_id = interner.source(source.connector, source.name, source.version);
        let column_order = match &rows {
            Rows::Table(t) => Some(t.order.clone()),
            Rows::Schemaless => None,
        };
        Ok(spare.boxed(Event {
            unordered: false,
            origin: Origin {
                topic: input.topic_id,
                partition: input.partition,
                offset: input.offset,
                tp: input.tp,
            },
            table,
            op,
            buf,
            key,
            before,
            after,
            members,
            unavailable,
            commit,
            change,
            serial,
            position_text: None,
            source_ts_ms: source_ts,
            ts_ms,
            snapshot,
            tx,
            source: source_id,
            column_order,
            partner_key,
            seq: None,
            changed: None,
            names: env.names,
        }))
    }
}
