//! A decoded [`Event`] as bytes, to carry it between the Spark job's stages (the decode step
//! writes it, the release step reads it back), and the state bucket of an event.
//!
//! The layout is private to this crate and versioned by its first byte: little-endian
//! integers, byte strings as a `u32` length and the bytes, optional values behind a `0`/`1`
//! tag. The interned parts of an event (table, source, snapshot marker, topic) travel as their
//! texts and are interned again on the reading side ([`Reader`]); in a packed value ([`pack`])
//! an event names the parts it shares with the event before it instead ([`Repeats`]). Reading
//! checks every length and span: bad bytes are an error, never a panic.

use crate::decode::{Interner, TableInfo};
use crate::event::{Event, Image, Origin, SpareBuffers, Tx};
use crate::value::Member;
use std::sync::Arc;

const VERSION: u8 = 2;

/// Bits of an event's second byte: the part is the one of the event before it in its packed
/// value, and its text is left out.
const SAME_TOPIC: u8 = 1;
const SAME_TABLE: u8 = 2;
const SAME_SNAPSHOT: u8 = 4;
const SAME_SOURCE: u8 = 8;
/// Not a repeat: the event's `unordered` flag.
const UNORDERED: u8 = 16;

/// The interned parts (topic, table, snapshot marker, source) of the event before, in one
/// packed value: the writer's ids of the events it wrote, the reader's of those it read. Most
/// events of a bucket share all four, which are ~40 % of a narrow event's bytes. A fresh
/// (default) value starts every packed value and every event written or read on its own.
#[derive(Debug, Default, Clone, Copy)]
pub struct Repeats {
    topic: Option<u32>,
    table: Option<u32>,
    snapshot: Option<u32>,
    source: Option<u32>,
}

/// `bit` when `slot` holds `id`; otherwise `slot` takes it and the text is written.
fn same(slot: &mut Option<u32>, id: u32, bit: u8) -> u8 {
    if *slot == Some(id) {
        bit
    } else {
        *slot = Some(id);
        0
    }
}

/// Bytes that are not an event written by [`write`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadWire;

type R<T> = std::result::Result<T, BadWire>;

pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u128(out: &mut Vec<u8>, v: u128) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len() as u32);
    out.extend_from_slice(b);
}

pub(crate) fn put_opt_i64(out: &mut Vec<u8>, v: Option<i64>) {
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            put_i64(out, v);
        }
    }
}

fn put_opt_bytes(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            put_bytes(out, b);
        }
    }
}

fn put_lsn(out: &mut Vec<u8>, lsn: &crate::lsn::Lsn) {
    match lsn {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            out.extend_from_slice(b);
        }
    }
}

fn put_image(out: &mut Vec<u8>, image: &Option<Image>) {
    match image {
        None => out.push(0),
        Some(i) => {
            out.push(1);
            for v in [i.span.0, i.span.1, i.members.0, i.members.1] {
                put_u32(out, v);
            }
        }
    }
}

fn put_strs<S: AsRef<str>>(out: &mut Vec<u8>, items: &[S]) {
    put_u32(out, items.len() as u32);
    for s in items {
        put_bytes(out, s.as_ref().as_bytes());
    }
}

/// Append `e` (read with `interner` and the topic name) and its Kafka timestamp to `out`;
/// `repeats`: what the event before it in its packed value shares with it (a default value
/// for an event on its own).
pub fn write(
    out: &mut Vec<u8>,
    e: &Event,
    topic: &str,
    timestamp: Option<i64>,
    interner: &Interner,
    repeats: &mut Repeats,
) {
    let mask = same(&mut repeats.topic, e.origin.topic, SAME_TOPIC)
        | same(&mut repeats.table, e.table, SAME_TABLE)
        | same(&mut repeats.snapshot, e.snapshot, SAME_SNAPSHOT)
        | same(&mut repeats.source, e.source, SAME_SOURCE)
        | if e.unordered { UNORDERED } else { 0 };
    out.push(VERSION);
    out.push(mask);
    if mask & SAME_TOPIC == 0 {
        put_bytes(out, topic.as_bytes());
    }
    put_u32(out, e.origin.partition as u32);
    put_opt_i64(out, e.origin.offset);
    put_opt_i64(out, timestamp);
    if mask & SAME_TABLE == 0 {
        let table = &interner.tables[e.table as usize];
        put_bytes(out, table.table_id.as_bytes());
        put_bytes(out, &table.json);
        put_bytes(out, table.schema.as_bytes());
        put_bytes(out, table.name.as_bytes());
    }
    out.push(e.op);
    put_bytes(out, &e.buf);
    put_u32(out, e.key.0);
    put_u32(out, e.key.1);
    put_image(out, &e.before);
    put_image(out, &e.after);
    put_u32(out, e.members.len() as u32);
    // member spans as u16 when the buffer is small enough (most events)
    let narrow = e.buf.len() <= u16::MAX as usize;
    out.push(u8::from(narrow));
    for m in &e.members {
        for v in [m.name.0, m.name.1, m.value.0, m.value.1] {
            if narrow {
                out.extend_from_slice(&(v as u16).to_le_bytes());
            } else {
                put_u32(out, v);
            }
        }
    }
    put_strs(out, &e.unavailable);
    put_lsn(out, &e.commit);
    put_lsn(out, &e.change);
    put_opt_i64(out, e.serial);
    match &e.position_text {
        None => out.push(0),
        Some(texts) => {
            out.push(1);
            put_opt_bytes(out, texts.0.as_deref().map(str::as_bytes));
            put_opt_bytes(out, texts.1.as_deref().map(str::as_bytes));
        }
    }
    put_opt_i64(out, e.source_ts_ms);
    put_opt_i64(out, e.ts_ms);
    if mask & SAME_SNAPSHOT == 0 {
        put_bytes(out, interner.snapshots[e.snapshot as usize].as_bytes());
    }
    match &e.tx {
        None => out.push(0),
        Some(tx) => {
            out.push(1);
            put_bytes(out, tx.id.as_bytes());
            put_opt_i64(out, tx.total_order);
            put_opt_i64(out, tx.data_collection_order);
            put_opt_bytes(out, tx.begin_lsn.as_deref().map(str::as_bytes));
        }
    }
    if mask & SAME_SOURCE == 0 {
        put_bytes(out, &interner.sources[e.source as usize]);
    }
    match &e.column_order {
        None => out.push(0),
        Some(order) => {
            out.push(1);
            put_strs(out, order);
        }
    }
    put_opt_bytes(out, e.partner_key.as_deref());
    put_opt_bytes(out, e.seq.as_deref().map(str::as_bytes));
    match &e.changed {
        None => out.push(0),
        Some(changed) => {
            out.push(1);
            put_strs(out, changed);
        }
    }
}

/// What [`Reader::read`] gives besides the event.
pub struct Read {
    pub event: Box<Event>,
    /// The Kafka topic's id in the reader's [`Reader::topics`].
    pub topic: u32,
    pub timestamp: Option<i64>,
}

/// A table's id and JSON.
type TableKey = (Box<[u8]>, Box<[u8]>);

/// Reads events written by [`write`], interning their texts in `interner` (the release step's
/// core) and keeping the topics apart.
#[derive(Default)]
pub struct Reader {
    pub topics: Vec<Arc<str>>,
    topic_index: hashbrown::HashMap<Box<[u8]>, u32>,
    tables: hashbrown::HashMap<TableKey, u32>,
    last_table: Option<(Box<[u8]>, u32)>,
    last_snapshot: Option<(Box<[u8]>, u32)>,
    sources: hashbrown::HashMap<Box<[u8]>, u32>,
    orders: hashbrown::HashMap<Vec<String>, Arc<[String]>>,
    repeats: Repeats,
}

pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Cursor { data, pos: 0 }
    }
    /// Whether every byte was read.
    pub(crate) fn at_end(&self) -> bool {
        self.pos == self.data.len()
    }
    pub(crate) fn take(&mut self, n: usize) -> R<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(BadWire)?;
        let out = self.data.get(self.pos..end).ok_or(BadWire)?;
        self.pos = end;
        Ok(out)
    }
    pub(crate) fn u8(&mut self) -> R<u8> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn flag(&mut self) -> R<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(BadWire),
        }
    }
    pub(crate) fn u32(&mut self) -> R<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn u128(&mut self) -> R<u128> {
        let mut a = [0u8; 16];
        a.copy_from_slice(self.take(16)?);
        Ok(u128::from_le_bytes(a))
    }
    pub(crate) fn i64(&mut self) -> R<i64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_le_bytes(a))
    }
    pub(crate) fn bytes(&mut self) -> R<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub(crate) fn str(&mut self) -> R<&'a str> {
        std::str::from_utf8(self.bytes()?).map_err(|_| BadWire)
    }
    pub(crate) fn opt_i64(&mut self) -> R<Option<i64>> {
        Ok(if self.flag()? {
            Some(self.i64()?)
        } else {
            None
        })
    }
    fn opt_str(&mut self) -> R<Option<&'a str>> {
        Ok(if self.flag()? {
            Some(self.str()?)
        } else {
            None
        })
    }
    fn opt_bytes(&mut self) -> R<Option<&'a [u8]>> {
        Ok(if self.flag()? {
            Some(self.bytes()?)
        } else {
            None
        })
    }
    fn lsn(&mut self) -> R<crate::lsn::Lsn> {
        if !self.flag()? {
            return Ok(None);
        }
        let mut a = [0u8; 10];
        a.copy_from_slice(self.take(10)?);
        Ok(Some(a))
    }
    fn span(&mut self, limit: usize) -> R<(u32, u32)> {
        let (a, b) = (self.u32()?, self.u32()?);
        if a > b || b as usize > limit {
            return Err(BadWire);
        }
        Ok((a, b))
    }
    fn span16(&mut self, limit: usize) -> R<(u32, u32)> {
        let b = self.take(4)?;
        let (a, z) = (
            u16::from_le_bytes([b[0], b[1]]) as u32,
            u16::from_le_bytes([b[2], b[3]]) as u32,
        );
        if a > z || z as usize > limit {
            return Err(BadWire);
        }
        Ok((a, z))
    }

    fn image(&mut self, buf: usize, members: usize) -> R<Option<Image>> {
        if !self.flag()? {
            return Ok(None);
        }
        Ok(Some(Image {
            span: self.span(buf)?,
            members: self.span(members)?,
        }))
    }
    fn strs(&mut self) -> R<Vec<String>> {
        let n = self.u32()? as usize;
        let mut out = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            out.push(self.str()?.to_string());
        }
        Ok(out)
    }
}

impl Reader {
    fn topic(&mut self, name: &[u8]) -> R<u32> {
        if let Some(&i) = self.topic_index.get(name) {
            return Ok(i);
        }
        let text = std::str::from_utf8(name).map_err(|_| BadWire)?;
        let i = self.topics.len() as u32;
        self.topics.push(text.into());
        self.topic_index.insert(name.into(), i);
        Ok(i)
    }

    fn table(
        &mut self,
        table_id: &[u8],
        json: &[u8],
        schema: &[u8],
        name: &[u8],
        interner: &mut Interner,
    ) -> R<u32> {
        if let Some(&t) = self.tables.get(&(table_id.into(), json.into())) {
            return Ok(t);
        }
        let text = |b: &[u8]| {
            std::str::from_utf8(b)
                .map(str::to_string)
                .map_err(|_| BadWire)
        };
        let t = interner.tables.len() as u32;
        interner.tables.push(TableInfo::new(
            text(table_id)?.into(),
            json.to_vec(),
            text(schema)?,
            text(name)?,
        ));
        self.tables.insert((table_id.into(), json.into()), t);
        Ok(t)
    }

    /// Start a packed value, or an event on its own: what the next event shares with the
    /// event before it is forgotten ([`Repeats`]).
    pub fn begin(&mut self) {
        self.repeats = Repeats::default();
    }

    /// One event written by [`write`] (after [`Reader::begin`], or after the event before it
    /// in its packed value).
    pub fn read(
        &mut self,
        data: &[u8],
        interner: &mut Interner,
        spare: &mut SpareBuffers,
    ) -> R<Read> {
        let mut c = Cursor { data, pos: 0 };
        let mask = match c.u8()? {
            VERSION => c.u8()?,
            // version 1 (before packed values) had no mask: streaming states keep such events
            1 => 0,
            _ => return Err(BadWire),
        };
        if mask & !(SAME_TOPIC | SAME_TABLE | SAME_SNAPSHOT | SAME_SOURCE | UNORDERED) != 0 {
            return Err(BadWire);
        }
        let topic = if mask & SAME_TOPIC != 0 {
            self.repeats.topic.ok_or(BadWire)?
        } else {
            self.topic(c.bytes()?)?
        };
        self.repeats.topic = Some(topic);
        let partition = c.u32()? as i32;
        let offset = c.opt_i64()?;
        let timestamp = c.opt_i64()?;
        let table = if mask & SAME_TABLE != 0 {
            self.repeats.table.ok_or(BadWire)?
        } else {
            let table_at = c.pos;
            let table_id = c.bytes()?;
            let json = c.bytes()?;
            let schema_bytes = c.bytes()?;
            let name_bytes = c.bytes()?;
            let table_all = &data[table_at..c.pos];
            match &self.last_table {
                Some((last, t)) if **last == *table_all => *t,
                _ => {
                    let t = self.table(table_id, json, schema_bytes, name_bytes, interner)?;
                    self.last_table = Some((table_all.into(), t));
                    t
                }
            }
        };
        self.repeats.table = Some(table);
        let op = c.u8()?;
        if !matches!(op, b'c' | b'u' | b'd' | b'r' | b't') {
            return Err(BadWire);
        }
        let buf = c.bytes()?.to_vec();
        let key = c.span(buf.len())?;
        let before_at = c.pos;
        c.take(1 + 16 * usize::from(data.get(before_at) == Some(&1)))?;
        let after_at = c.pos;
        c.take(1 + 16 * usize::from(data.get(after_at) == Some(&1)))?;
        let n = c.u32()? as usize;
        let narrow = c.flag()?;
        let mut members = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let (name, value) = if narrow {
                (c.span16(buf.len())?, c.span16(buf.len())?)
            } else {
                (c.span(buf.len())?, c.span(buf.len())?)
            };
            members.push(Member { name, value });
        }
        let (before, after) = {
            let mut images = Cursor {
                data,
                pos: before_at,
            };
            let before = images.image(buf.len(), members.len())?;
            images.pos = after_at;
            (before, images.image(buf.len(), members.len())?)
        };
        let unavailable = c.strs()?.into_iter().map(String::into_boxed_str).collect();
        let commit = c.lsn()?;
        let change = c.lsn()?;
        let serial = c.opt_i64()?;
        let position_text = if c.flag()? {
            let a = c.opt_str()?.map(str::to_string);
            let b = c.opt_str()?.map(str::to_string);
            Some(Box::new((a, b)))
        } else {
            None
        };
        let source_ts_ms = c.opt_i64()?;
        let ts_ms = c.opt_i64()?;
        let snapshot = if mask & SAME_SNAPSHOT != 0 {
            self.repeats.snapshot.ok_or(BadWire)?
        } else {
            let marker = c.bytes()?;
            match &self.last_snapshot {
                Some((last, id)) if **last == *marker => *id,
                _ => {
                    let text = std::str::from_utf8(marker).map_err(|_| BadWire)?;
                    let id = interner.snapshot(text);
                    self.last_snapshot = Some((marker.into(), id));
                    id
                }
            }
        };
        self.repeats.snapshot = Some(snapshot);
        let tx = if c.flag()? {
            Some(Box::new(Tx {
                id: c.str()?.to_string(),
                total_order: c.opt_i64()?,
                data_collection_order: c.opt_i64()?,
                begin_lsn: c.opt_str()?.map(str::to_string),
            }))
        } else {
            None
        };
        let source = if mask & SAME_SOURCE != 0 {
            self.repeats.source.ok_or(BadWire)?
        } else {
            let source_json = c.bytes()?;
            match self.sources.get(source_json) {
                Some(&s) => s,
                None => {
                    let s = interner.sources.len() as u32;
                    interner.sources.push(source_json.to_vec());
                    self.sources.insert(source_json.into(), s);
                    s
                }
            }
        };
        self.repeats.source = Some(source);
        let column_order = if c.flag()? {
            let names = c.strs()?;
            Some(match self.orders.get(&names) {
                Some(o) => o.clone(),
                None => {
                    let o: Arc<[String]> = names.clone().into();
                    self.orders.insert(names, o.clone());
                    o
                }
            })
        } else {
            None
        };
        let partner_key = c.opt_bytes()?.map(|b| b.to_vec().into_boxed_slice());
        let seq = c.opt_str()?.map(|s| s.to_string().into_boxed_str());
        let changed: Option<Arc<[String]>> = if c.flag()? {
            Some(c.strs()?.into())
        } else {
            None
        };
        if c.pos != data.len() {
            return Err(BadWire);
        }
        Ok(Read {
            event: spare.boxed(Event {
                unordered: mask & UNORDERED != 0,
                origin: Origin {
                    topic,
                    partition,
                    offset,
                    tp: 0,
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
                position_text,
                source_ts_ms,
                ts_ms,
                snapshot,
                tx,
                source,
                column_order,
                partner_key,
                seq,
                changed,
                names: None,
            }),
            topic,
            timestamp,
        })
    }
}

/// Appends one event's bytes ([`write`]) to a *packed* value: the decode step stages the
/// events of one state bucket as one value per Arrow batch, so the shuffle moves a few large
/// values instead of one row per event. Each event is a `u32` length, its commit time (`i64`
/// epoch ms) and its bytes, little-endian.
pub fn pack(out: &mut Vec<u8>, event: &[u8], commit_ms: i64) {
    put_u32(out, event.len() as u32);
    put_i64(out, commit_ms);
    out.extend_from_slice(event);
}

/// Each event of a value [`pack`] wrote, with its commit time, in the order they were packed.
pub fn unpack(mut packed: &[u8], mut take: impl FnMut(&[u8], i64) -> R<()>) -> R<()> {
    while !packed.is_empty() {
        let (head, rest) = packed.split_at_checked(12).ok_or(BadWire)?;
        let (len, ms) = head.split_at(4);
        let len = u32::from_le_bytes(len.try_into().map_err(|_| BadWire)?) as usize;
        let ms = i64::from_le_bytes(ms.try_into().map_err(|_| BadWire)?);
        let (event, rest) = rest.split_at_checked(len).ok_or(BadWire)?;
        take(event, ms)?;
        packed = rest;
    }
    Ok(())
}

/// CRC-32 (IEEE, zlib's `crc32`).
pub fn crc32(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, slot) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *slot = c;
        }
        t
    });
    let mut crc = !0u32;
    for &b in data {
        crc = table[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

fn msgpack_str_header(out: &mut Vec<u8>, n: usize) {
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n < 256 {
        out.extend_from_slice(&[0xd9, n as u8]);
    } else if n < 65_536 {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn msgpack_bin_header(out: &mut Vec<u8>, n: usize) {
    if n < 256 {
        out.extend_from_slice(&[0xc4, n as u8]);
    } else if n < 65_536 {
        out.push(0xc5);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xc6);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// The state bucket of the Spark job (`spark.translate.bucket_of`): CRC-32 of the commit LSN's
/// bytes; initial snapshot rows by the msgpack of their group key `(table_id, commit, b"r" +
/// key)`.
pub fn bucket(e: &Event, table_id: &str, snapshot: bool, buckets: u32) -> u32 {
    let commit: &[u8] = match &e.commit {
        Some(b) => b,
        None => b"",
    };
    let crc = if snapshot {
        let key = e.key_bytes();
        let mut m = Vec::with_capacity(32 + table_id.len() + key.len());
        m.push(0x93);
        msgpack_str_header(&mut m, table_id.len());
        m.extend_from_slice(table_id.as_bytes());
        msgpack_bin_header(&mut m, commit.len());
        m.extend_from_slice(commit);
        msgpack_bin_header(&mut m, key.len() + 1);
        m.push(b'r');
        m.extend_from_slice(key);
        crc32(&m)
    } else {
        crc32(commit)
    };
    crc % buckets.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_events_come_back_in_order_and_bad_lengths_are_errors() {
        let mut packed = Vec::new();
        pack(&mut packed, b"first", 7);
        pack(&mut packed, b"", -1);
        pack(&mut packed, &[0xff; 300], i64::MAX);
        let mut seen: Vec<(Vec<u8>, i64)> = Vec::new();
        unpack(&packed, |e, ms| {
            seen.push((e.to_vec(), ms));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![
                (b"first".to_vec(), 7),
                (Vec::new(), -1),
                (vec![0xff; 300], i64::MAX)
            ]
        );
        // the layout spelled out: length 5, commit time 7, the bytes
        assert_eq!(&packed[..17], b"\x05\0\0\0\x07\0\0\0\0\0\0\0first");
        for cut in 1..packed.len() {
            let whole = [17, 29];
            let r = unpack(&packed[..cut], |_, _| Ok(()));
            assert_eq!(r.is_ok(), whole.contains(&cut), "cut at {cut}");
        }
        assert!(unpack(&[], |_, _| Err(BadWire)).is_ok());
    }

    #[test]
    fn crc32_is_zlibs() {
        // zlib.crc32(b"123456789") == 0xCBF43926 (the standard check value)
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn bad_bytes_are_errors() {
        let mut interner = Interner::default();
        let mut reader = Reader::default();
        for data in [&b""[..], b"\x01", b"\x02abc", b"\x01\xff\xff\xff\xff"] {
            assert!(reader
                .read(data, &mut interner, &mut SpareBuffers::default())
                .is_err());
        }
    }
}
