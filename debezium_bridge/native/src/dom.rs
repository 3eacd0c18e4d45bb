//! Debezium JSON through sonic-rs's document parser (its fastest path: one SIMD pass that
//! validates the text and builds an arena DOM), then one walk that writes the canonical row
//! images — what msgspec writes for what msgspec read. The usual envelope is read by
//! [`crate::scan`] in one pass without a document; this walk reads what that reader declines.
//!
//! What the DOM cannot tell apart is declined (the reference decides): integral floats of
//! 2^63 and more (integers beyond 64 bits come as floats), float zeros (sonic-rs reads `-0`,
//! `-0.0` and `0.0` as the same float, the reference as `0`, `-0.0`, `0.0`), duplicate keys.

use crate::jsonw;
use crate::parse::{ImageAt, RowMode};
use crate::schema::{self, Options, Scalar};
use crate::value::{Decline, Member, Result};
use sonic_rs::{JsonContainerTrait, JsonNumberTrait, JsonType, JsonValueTrait, Value, ValueRef};
use std::borrow::Cow;

#[inline]
pub(crate) fn float_ok(v: f64) -> Result<f64> {
    if !v.is_finite() || v == 0.0 || (v.fract() == 0.0 && v.abs() >= 9.223_372_036_854_776e18) {
        return Err(Decline);
    }
    Ok(v)
}

/// A value as a [`Scalar`]; arrays and objects are written canonically to `out`.
pub fn scalar<'v>(v: &'v Value, out: &mut Vec<u8>) -> Result<Scalar<'v>> {
    // one dispatch on the node's type (`get_type` and then `as_…` dispatch twice)
    Ok(match v.as_ref() {
        ValueRef::Null => Scalar::Null,
        ValueRef::Bool(b) => Scalar::Bool(b),
        ValueRef::String(s) => Scalar::Str(Cow::Borrowed(s)),
        ValueRef::Number(n) => {
            if let Some(i) = n.as_i64() {
                Scalar::Int(i)
            } else if let Some(u) = n.as_u64() {
                Scalar::UInt(u)
            } else {
                Scalar::Float(float_ok(n.as_f64().ok_or(Decline)?)?)
            }
        }
        ValueRef::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out)?;
            }
            out.push(b']');
            Scalar::Nested(b'[')
        }
        ValueRef::Object(_) => {
            let mut names = Names::new();
            object(v, out, &mut names, None, |_, value, out| write(value, out))?;
            Scalar::Nested(b'{')
        }
    })
}

/// Any value, canonically.
pub fn write(v: &Value, out: &mut Vec<u8>) -> Result<()> {
    let s = scalar(v, out)?;
    s.write(out);
    Ok(())
}

#[inline]
fn write_string(out: &mut Vec<u8>, s: &str) {
    jsonw::write_str(out, s);
}

/// The spans of the names written so far (duplicates are declined). Up to [`SMALL_NAMES`]
/// names: on the stack, with a 64-bit filter of their lengths and last bytes so that a name is
/// compared byte for byte only with earlier names that share its filter bit (a plain scan
/// compared every pair: ~3.6k instructions per 20-column image). Past that the filter is
/// full, so every name goes into a hash table of them all: a 100,000-column image took 18 s
/// with the filter alone (every name compared with every earlier one), ~10 ms with the table.
pub struct Names {
    small: [(u32, u32); SMALL_NAMES],
    len: usize,
    filter: u64,
    /// All names once there are more than [`SMALL_NAMES`], by the hash of their bytes.
    table: hashbrown::HashTable<(u32, u32)>,
    hasher: Option<ahash::RandomState>,
}

const SMALL_NAMES: usize = 32;

impl Names {
    pub fn new() -> Self {
        Names {
            small: [(0, 0); SMALL_NAMES],
            len: 0,
            filter: 0,
            table: hashbrown::HashTable::new(),
            hasher: None,
        }
    }

    fn clear(&mut self) {
        self.len = 0;
        self.filter = 0;
        self.table.clear();
    }

    /// Records `out[start..end]`; `false` if the same bytes were recorded already.
    #[inline]
    pub(crate) fn insert(&mut self, out: &[u8], start: usize, end: usize) -> bool {
        let new = &out[start..end];
        if self.len >= SMALL_NAMES {
            return self.insert_many(out, start, end);
        }
        let last = new.len().checked_sub(2).map_or(0, |i| new[i]); // (before the closing quote)
        let bit = 1u64
            << ((new.len() as u64)
                .wrapping_mul(7)
                .wrapping_add(u64::from(last))
                & 63);
        if self.filter & bit != 0 {
            for &(s, e) in &self.small[..self.len] {
                if (e - s) as usize == new.len() && out[s as usize..e as usize] == *new {
                    return false;
                }
            }
        }
        self.filter |= bit;
        self.small[self.len] = (start as u32, end as u32);
        self.len += 1;
        true
    }

    /// [`Names::insert`] past [`SMALL_NAMES`] names: through the hash table (filled with the
    /// small names on the first call).
    fn insert_many(&mut self, out: &[u8], start: usize, end: usize) -> bool {
        let hasher = self
            .hasher
            .get_or_insert_with(ahash::RandomState::new)
            .clone();
        let hash = |&(s, e): &(u32, u32)| hasher.hash_one(&out[s as usize..e as usize]);
        if self.len == SMALL_NAMES {
            for span in self.small {
                self.table.insert_unique(hash(&span), span, hash);
            }
        }
        let span = (start as u32, end as u32);
        let new = &out[start..end];
        let found = self
            .table
            .find(hash(&span), |&(s, e)| out[s as usize..e as usize] == *new);
        if found.is_some() {
            return false;
        }
        self.table.insert_unique(hash(&span), span, hash);
        self.len += 1;
        true
    }
}

impl Default for Names {
    fn default() -> Self {
        Self::new()
    }
}

fn object<F>(
    v: &Value,
    out: &mut Vec<u8>,
    names: &mut Names,
    mut members: Option<&mut Vec<Member>>,
    mut value: F,
) -> Result<()>
where
    F: FnMut(&str, &Value, &mut Vec<u8>) -> Result<()>,
{
    names.clear();
    out.push(b'{');
    for (i, (key, item)) in v.as_object().ok_or(Decline)?.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let name_start = out.len();
        write_string(out, key);
        let name_end = out.len();
        if !names.insert(out, name_start, name_end) {
            return Err(Decline);
        }
        out.push(b':');
        let value_start = out.len();
        value(key, item, out)?;
        if let Some(members) = members.as_deref_mut() {
            members.push(Member {
                name: (name_start as u32 + 1, name_end as u32 - 1),
                value: (value_start as u32, out.len() as u32),
            });
        }
    }
    out.push(b'}');
    Ok(())
}

/// The unavailable columns of one schema-ful image, listed as the reference lists them: text
/// then binary columns, each in schema order (shared by the JSON readers and the Avro reader).
#[derive(Default)]
pub struct GoneColumns {
    text: Vec<usize>,
    binary: Vec<usize>,
}

impl GoneColumns {
    /// Column `i` of the table held a placeholder.
    pub fn note(&mut self, i: usize, marker: schema::Marker) {
        if marker == schema::Marker::Text {
            self.text.push(i);
        } else {
            self.binary.push(i);
        }
    }

    /// Adds the noted columns' names to `gone` (repeats across images: [`first_occurrences`]).
    pub fn finish(mut self, table: &schema::Table, gone: &mut Vec<Box<str>>) {
        self.text.sort_unstable();
        self.binary.sort_unstable();
        for i in self.text.into_iter().chain(self.binary) {
            gone.push(table.columns[i].name.as_str().into());
        }
    }
}

/// `names` with each name once, where it first occurs. The image writers list each
/// unavailable column of an image once; a column unavailable in both images is listed twice
/// until this runs on the event's list (testing each name against the list as it was written
/// was quadratic: 40,000 unavailable columns took 1.6 s).
pub fn first_occurrences(names: &mut Vec<Box<str>>) {
    if names.len() <= crate::core::SCAN_LIMIT {
        let mut i = 1;
        while i < names.len() {
            if names[..i].contains(&names[i]) {
                names.remove(i);
            } else {
                i += 1;
            }
        }
    } else {
        let mut seen = hashbrown::HashSet::with_capacity(names.len());
        names.retain(|name| seen.insert(name.clone()));
    }
}

/// How the members of one row image are written (by the document walk here and by the
/// one-pass reader, `scan`): placeholders of unavailable columns become `null` and are listed in
/// `gone`; with a schema, values go through their column's converter.
pub struct ImageRows<'t> {
    rows: RowMode<'t>,
    hint: usize,
    table_gone: GoneColumns,
}

impl<'t> ImageRows<'t> {
    pub fn new(rows: RowMode<'t>) -> Self {
        ImageRows {
            rows,
            hint: 0,
            table_gone: GoneColumns::default(),
        }
    }

    /// Writes the value of member `name` (nested values are written already).
    pub fn value(
        &mut self,
        name: &str,
        s: Scalar<'_>,
        opts: &Options,
        out: &mut Vec<u8>,
        gone: &mut Vec<Box<str>>,
    ) -> Result<()> {
        match self.rows {
            RowMode::Schemaless => {
                if let Scalar::Str(text) = &s {
                    if **text == *opts.placeholder || **text == *opts.placeholder_b64 {
                        out.extend_from_slice(b"null");
                        gone.push(name.into());
                        return Ok(());
                    }
                }
                s.write(out);
            }
            RowMode::Table(table) => {
                let Some(i) = table.find(name, self.hint) else {
                    s.write(out);
                    return Ok(());
                };
                self.hint = i + 1;
                self.column_value(table, i, s, opts, out)?;
            }
        }
        Ok(())
    }

    /// Writes a value of column `i` of `table` (the table of these rows).
    #[inline]
    pub fn column_value(
        &mut self,
        table: &schema::Table,
        i: usize,
        s: Scalar<'_>,
        opts: &Options,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let col = &table.columns[i];
        if schema::convert(col, s, opts, out)? {
            self.table_gone.note(i, col.marker);
        }
        Ok(())
    }

    /// Lists the unavailable columns of a schema-ful image.
    pub fn finish(self, gone: &mut Vec<Box<str>>) {
        if let RowMode::Table(table) = self.rows {
            self.table_gone.finish(table, gone);
        }
    }
}

/// A row image: canonical JSON appended to `out`, its members to `members`, unavailable
/// (placeholder) columns to `gone` (schema-less: in image order; with a schema: text then binary
/// columns, each in schema order, as the reference lists them).
pub fn image(
    v: &Value,
    rows: RowMode<'_>,
    opts: &Options,
    out: &mut Vec<u8>,
    members: &mut Vec<Member>,
    gone: &mut Vec<Box<str>>,
) -> Result<Option<ImageAt>> {
    match v.get_type() {
        JsonType::Null => return Ok(None),
        JsonType::Object => {}
        _ => return Err(Decline),
    }
    let start = out.len();
    let first_member = members.len();
    let mut names = Names::new();
    let mut writer = ImageRows::new(rows);
    object(v, out, &mut names, Some(members), |name, value, out| {
        let s = scalar(value, out)?;
        writer.value(name, s, opts, out, gone)
    })?;
    writer.finish(gone);
    Ok(Some(ImageAt {
        span: (start as u32, out.len() as u32),
        members: (first_member as u32, members.len() as u32),
    }))
}

/// A strict integer field (null → `None`; floats, strings and the rest declined).
fn strict_int(v: &Value) -> Result<Option<i64>> {
    match v.as_ref() {
        ValueRef::Null => Ok(None),
        ValueRef::Number(n) => n.as_i64().map(Some).ok_or(Decline),
        _ => Err(Decline),
    }
}

fn opt_str(v: &Value) -> Result<Option<&str>> {
    match v.as_ref() {
        ValueRef::Null => Ok(None),
        ValueRef::String(s) => Ok(Some(s)),
        _ => Err(Decline),
    }
}

/// The `source` block.
#[derive(Default)]
pub struct Source<'a> {
    pub version: Option<&'a str>,
    pub connector: Option<&'a str>,
    pub name: Option<&'a str>,
    pub ts_ms: Option<i64>,
    /// `None`: absent or null; `Some(Err(b))`: a boolean; `Some(Ok(s))`: a string.
    pub snapshot: Option<std::result::Result<&'a str, bool>>,
    pub db: Option<&'a str>,
    pub schema: Option<&'a str>,
    pub table: Option<&'a str>,
    pub change_lsn: Option<&'a str>,
    pub commit_lsn: Option<&'a str>,
    pub event_serial_no: Option<i64>,
}

pub struct Tx<'a> {
    pub id: &'a str,
    pub total_order: Option<i64>,
    pub data_collection_order: Option<i64>,
}

#[derive(Default)]
pub struct Envelope<'a> {
    pub before: Option<ImageAt>,
    pub after: Option<ImageAt>,
    pub source: Option<Source<'a>>,
    pub op: Option<&'a str>,
    pub ts_ms: Option<i64>,
    pub transaction: Option<Tx<'a>>,
    /// The member names of both images, when each was read along them
    /// ([`crate::event::Event::names`]).
    pub names: Option<std::sync::Arc<crate::event::ImageNames>>,
}

/// The bit of an envelope member both readers take (`scan` and this walk); 0: another member.
#[inline]
pub(crate) fn envelope_bit(name: &[u8]) -> u8 {
    match name {
        b"before" => 1,
        b"after" => 2,
        b"source" => 4,
        b"op" => 8,
        b"ts_ms" => 16,
        b"transaction" => 32,
        _ => 0,
    }
}

/// The bit of a `source` member both readers take; 0: another member.
#[inline]
pub(crate) fn source_bit(name: &[u8]) -> u16 {
    match name {
        b"version" => 1,
        b"connector" => 2,
        b"name" => 4,
        b"ts_ms" => 8,
        b"snapshot" => 16,
        b"db" => 32,
        b"schema" => 64,
        b"table" => 128,
        b"change_lsn" => 256,
        b"commit_lsn" => 512,
        b"event_serial_no" => 1024,
        _ => 0,
    }
}

fn source(v: &Value) -> Result<Option<Source<'_>>> {
    match v.get_type() {
        JsonType::Null => return Ok(None),
        JsonType::Object => {}
        _ => return Err(Decline),
    }
    let mut s = Source::default();
    let mut seen = 0u16;
    for (key, item) in v.as_object().ok_or(Decline)?.iter() {
        let bit = source_bit(key.as_bytes());
        if bit == 0 {
            continue;
        }
        if seen & bit != 0 {
            return Err(Decline);
        }
        seen |= bit;
        match bit {
            1 => s.version = opt_str(item)?,
            2 => s.connector = opt_str(item)?,
            4 => s.name = opt_str(item)?,
            8 => s.ts_ms = strict_int(item)?,
            16 => {
                s.snapshot = match item.get_type() {
                    JsonType::Null => None,
                    JsonType::Boolean => Some(Err(item.as_bool().ok_or(Decline)?)),
                    JsonType::String => Some(Ok(item.as_str().ok_or(Decline)?)),
                    _ => return Err(Decline),
                }
            }
            32 => s.db = opt_str(item)?,
            64 => s.schema = opt_str(item)?,
            128 => s.table = opt_str(item)?,
            256 => s.change_lsn = opt_str(item)?,
            512 => s.commit_lsn = opt_str(item)?,
            _ => s.event_serial_no = strict_int(item)?,
        }
    }
    Ok(Some(s))
}

fn transaction(v: &Value) -> Result<Option<Tx<'_>>> {
    match v.get_type() {
        JsonType::Null => return Ok(None),
        JsonType::Object => {}
        _ => return Err(Decline),
    }
    let (mut id, mut total, mut dco) = (None, None, None);
    for (key, item) in v.as_object().ok_or(Decline)?.iter() {
        match key {
            "id" if id.is_none() => id = Some(item.as_str().ok_or(Decline)?),
            "total_order" if total.is_none() => total = Some(strict_int(item)?),
            "data_collection_order" if dco.is_none() => dco = Some(strict_int(item)?),
            "id" | "total_order" | "data_collection_order" => return Err(Decline),
            _ => {}
        }
    }
    Ok(Some(Tx {
        id: id.ok_or(Decline)?,
        total_order: total.flatten(),
        data_collection_order: dco.flatten(),
    }))
}

/// The envelope of a parsed value, its images written to `out`.
pub fn envelope<'a>(
    doc: &'a Value,
    rows: RowMode<'_>,
    opts: &Options,
    out: &mut Vec<u8>,
    members: &mut Vec<Member>,
    gone: &mut Vec<Box<str>>,
) -> Result<Envelope<'a>> {
    let mut env = Envelope::default();
    let mut seen = 0u8;
    for (key, item) in doc.as_object().ok_or(Decline)?.iter() {
        let bit = envelope_bit(key.as_bytes());
        if bit == 0 {
            continue;
        }
        if seen & bit != 0 {
            return Err(Decline);
        }
        seen |= bit;
        match bit {
            1 => env.before = image(item, rows, opts, out, members, gone)?,
            2 => env.after = image(item, rows, opts, out, members, gone)?,
            4 => env.source = source(item)?,
            8 => env.op = opt_str(item)?,
            16 => env.ts_ms = strict_int(item)?,
            _ => env.transaction = transaction(item)?,
        }
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::Names;

    #[test]
    fn names_find_every_repeat() {
        // 40 names (past the on-stack 32), many sharing a filter bit, each repeated once
        let names: Vec<String> = (0..40).map(|i| format!("\"c{i}\"")).collect();
        let mut out = Vec::new();
        let mut spans = Vec::new();
        for name in names.iter().chain(names.iter()) {
            let start = out.len();
            out.extend_from_slice(name.as_bytes());
            spans.push((start, out.len()));
        }
        let mut seen = Names::new();
        for (i, &(start, end)) in spans.iter().enumerate() {
            assert_eq!(seen.insert(&out, start, end), i < names.len(), "name {i}");
        }
    }
}
