//! Confluent Avro values and keys (magic byte 0, 4-byte big-endian schema id, Avro binary).
//!
//! Writer schemas come from the Python side (`AvroDecoder.prepare`: the registry client or the
//! offline schema file), once per schema id, after the Python decoder compiled them itself; a
//! schema the reference refuses never reaches this module. Each is compiled here into a reader
//! for the Debezium envelope (`before`/`after` rows, `source`, `op`, `ts_ms`, `transaction`;
//! other fields are read past and checked) whose row columns go through the same
//! [`schema::convert`] as the JSON path, with columns built as
//! `formats/debezium/avro.py::column_from_avro` builds them (`connect.name`,
//! `connect.parameters`, `connect.type`; Avro logical types ignored, values stay Connect-level).
//!
//! The reference is the generated Python reader (`avro_reader.py`) with fastavro behind it.
//! Whatever this reader is not sure to read the same way is declined: varints beyond 64 bits or
//! longer than 10 bytes, union indexes written in more than one byte or out of range, booleans
//! other than 0/1, negative lengths, data ending early, trailing bytes, strings that are not
//! UTF-8, non-finite floats; and at compile time nested column types (struct, array, map,
//! unions of several types), named types it cannot resolve unambiguously, duplicate field
//! names, envelope fields of unexpected types.

use crate::jsonw;
use crate::schema::{self, Options, Scalar, Table};
use crate::value::{Decline, Member, Result};
use sonic_rs::{JsonContainerTrait, JsonValueTrait, Value};
use std::borrow::Cow;
use std::sync::Arc;

const MAX_DEPTH: usize = 32;

/// One Avro type, named references resolved.
#[derive(Debug, Clone)]
pub enum Node {
    Null,
    Bool,
    Long,
    Float,
    Double,
    Bytes,
    Str,
    Fixed(usize),
    Enum(Arc<[String]>),
    Array(Box<Node>),
    Map(Box<Node>),
    Record(usize),
    Union(Vec<Node>),
}

#[derive(Debug)]
pub struct Field {
    pub name: String,
    pub node: Node,
    /// The field's `type` JSON (for the Connect view of a row column).
    pub json: Value,
}

#[derive(Debug, Default)]
pub struct Record {
    pub fields: Vec<Field>,
    /// The namespace type names in its fields are resolved in.
    pub namespace: Option<String>,
}

/// A parsed writer schema: its records, and the top-level type.
#[derive(Debug)]
pub struct Parsed {
    pub records: Vec<Record>,
    pub top: Node,
    /// Named types by full name (index into `named_json`).
    full: hashbrown::HashMap<String, usize>,
    named_json: Vec<Value>,
}

struct Parser {
    records: Vec<Option<Record>>,
    named_nodes: Vec<Node>,
    named_json: Vec<Value>,
    full: hashbrown::HashMap<String, usize>,
}

fn full_name(name: &str, ns: Option<&str>) -> String {
    match ns {
        Some(ns) if !name.contains('.') && !ns.is_empty() => format!("{ns}.{name}"),
        _ => name.to_string(),
    }
}

fn namespace_of(full: &str) -> Option<&str> {
    full.rfind('.').map(|i| &full[..i])
}

impl Parser {
    fn primitive(name: &str) -> Option<Node> {
        Some(match name {
            "null" => Node::Null,
            "boolean" => Node::Bool,
            "int" | "long" => Node::Long,
            "float" => Node::Float,
            "double" => Node::Double,
            "bytes" => Node::Bytes,
            "string" => Node::Str,
            _ => return None,
        })
    }

    fn lookup(&self, name: &str, ns: Option<&str>) -> Result<Node> {
        let found = if name.contains('.') {
            self.full.get(name)
        } else {
            ns.and_then(|ns| self.full.get(&full_name(name, Some(ns))))
                .or_else(|| self.full.get(name))
        };
        let i = *found.ok_or(Decline)?;
        Ok(self.named_nodes[i].clone())
    }

    fn define(&mut self, full: &str, node: Node, json: &Value) -> Result<()> {
        if self.full.contains_key(full) {
            return Err(Decline);
        }
        let i = self.named_nodes.len();
        self.named_nodes.push(node);
        self.named_json.push(json.clone());
        self.full.insert(full.to_string(), i);
        Ok(())
    }

    fn parse(&mut self, v: &Value, ns: Option<&str>, depth: usize) -> Result<Node> {
        if depth > MAX_DEPTH {
            return Err(Decline);
        }
        if let Some(name) = v.as_str() {
            return match Self::primitive(name) {
                Some(node) => Ok(node),
                None => self.lookup(name, ns),
            };
        }
        if let Some(branches) = v.as_array() {
            let mut nodes = Vec::with_capacity(branches.len());
            for b in branches.iter() {
                let node = self.parse(b, ns, depth + 1)?;
                if matches!(node, Node::Union(_)) {
                    return Err(Decline);
                }
                nodes.push(node);
            }
            if nodes.is_empty() || nodes.len() > 63 {
                return Err(Decline);
            }
            return Ok(Node::Union(nodes));
        }
        if !v.is_object() {
            return Err(Decline);
        }
        let ty = v.get("type").ok_or(Decline)?;
        let Some(kind) = ty.as_str() else {
            return self.parse(ty, ns, depth + 1); // {"type": <another schema>}
        };
        if let Some(node) = Self::primitive(kind) {
            return Ok(node);
        }
        let named = |v: &Value| -> Result<String> {
            let name = v.get("name").and_then(|n| n.as_str()).ok_or(Decline)?;
            let own_ns = match v.get("namespace") {
                None => ns,
                Some(n) if n.is_null() => None, // fastavro: no namespace, not the parent's
                Some(n) => Some(n.as_str().ok_or(Decline)?),
            };
            Ok(full_name(name, own_ns))
        };
        match kind {
            "record" | "error" => {
                let full = named(v)?;
                let index = self.records.len();
                self.records.push(None);
                self.define(&full, Node::Record(index), v)?;
                let inner_ns = namespace_of(&full).map(str::to_string);
                let fields = v.get("fields").and_then(|f| f.as_array()).ok_or(Decline)?;
                let mut out: Vec<Field> = Vec::with_capacity(fields.len());
                for f in fields.iter() {
                    let name = f.get("name").and_then(|n| n.as_str()).ok_or(Decline)?;
                    if out.iter().any(|o| o.name == name) {
                        return Err(Decline);
                    }
                    let json = f.get("type").ok_or(Decline)?;
                    let node = self.parse(json, inner_ns.as_deref(), depth + 1)?;
                    out.push(Field {
                        name: name.to_string(),
                        node,
                        json: json.clone(),
                    });
                }
                self.records[index] = Some(Record {
                    fields: out,
                    namespace: inner_ns,
                });
                Ok(Node::Record(index))
            }
            "enum" => {
                let full = named(v)?;
                let symbols = v.get("symbols").and_then(|s| s.as_array()).ok_or(Decline)?;
                let mut names = Vec::with_capacity(symbols.len());
                for s in symbols.iter() {
                    names.push(s.as_str().ok_or(Decline)?.to_string());
                }
                let node = Node::Enum(names.into());
                self.define(&full, node.clone(), v)?;
                Ok(node)
            }
            "fixed" => {
                let full = named(v)?;
                let size = v.get("size").and_then(|s| s.as_u64()).ok_or(Decline)?;
                let node = Node::Fixed(usize::try_from(size).map_err(|_| Decline)?);
                self.define(&full, node.clone(), v)?;
                Ok(node)
            }
            "array" => Ok(Node::Array(Box::new(self.parse(
                v.get("items").ok_or(Decline)?,
                ns,
                depth + 1,
            )?))),
            "map" => Ok(Node::Map(Box::new(self.parse(
                v.get("values").ok_or(Decline)?,
                ns,
                depth + 1,
            )?))),
            other => self.lookup(other, ns),
        }
    }
}

/// Parse a writer schema (JSON text).
pub fn parse(text: &str) -> Result<Parsed> {
    let v: Value = sonic_rs::from_str(text).map_err(|_| Decline)?;
    let mut p = Parser {
        records: Vec::new(),
        named_nodes: Vec::new(),
        named_json: Vec::new(),
        full: Default::default(),
    };
    let top = p.parse(&v, None, 0)?;
    let records = p
        .records
        .into_iter()
        .map(|r| r.ok_or(Decline))
        .collect::<Result<Vec<_>>>()?;
    Ok(Parsed {
        records,
        top,
        full: p.full,
        named_json: p.named_json,
    })
}

// ------------------------------------------------------------------ reading

/// One scalar datum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Prim<'a> {
    Null,
    Bool(bool),
    Long(i64),
    Float(f64),
    Double(f64),
    Str(&'a str),
    Bytes(&'a [u8]),
}

pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    /// Array and map items the datum may still hold: one per byte of the data, so that items
    /// taking no bytes (`null`s) cannot loop for billions of rounds; more is declined (the
    /// Python reader decides: it takes a few thousand more, then calls the record bad).
    items_left: u64,
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8], pos: usize) -> Self {
        Cursor {
            data,
            pos,
            items_left: data.len() as u64,
        }
    }

    #[inline]
    fn byte(&mut self) -> Result<u8> {
        let b = *self.data.get(self.pos).ok_or(Decline)?;
        self.pos += 1;
        Ok(b)
    }

    /// A zigzag varint of at most 10 bytes whose value fits 64 bits (the reference's limits).
    #[inline]
    pub fn long(&mut self) -> Result<i64> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        let zigzag = |n: u64| ((n >> 1) as i64) ^ -((n & 1) as i64);
        // one byte (lengths, small numbers)
        if let Some(&b) = rest.first().filter(|&&b| b < 0x80) {
            self.pos += 1;
            return Ok(zigzag(u64::from(b)));
        }
        // up to 8 bytes from one word: the first byte below 0x80 ends the varint, and the 7-bit
        // groups before it are packed by halving steps (pairs, quads, the whole)
        if let Some(word) = rest.first_chunk::<8>().map(|w| u64::from_le_bytes(*w)) {
            let ends = !word & 0x8080_8080_8080_8080;
            if ends != 0 {
                let len = ends.trailing_zeros() as usize / 8 + 1;
                let x = word & (ends ^ (ends - 1)) & 0x7f7f_7f7f_7f7f_7f7f;
                let x = ((x & 0x7f00_7f00_7f00_7f00) >> 1) | (x & 0x007f_007f_007f_007f);
                let x = ((x & 0x3fff_0000_3fff_0000) >> 2) | (x & 0x0000_3fff_0000_3fff);
                let n = ((x & 0x0fff_ffff_0000_0000) >> 4) | (x & 0x0000_0000_0fff_ffff);
                self.pos += len;
                return Ok(zigzag(n));
            }
        }
        let mut n = 0u64;
        for (i, &b) in rest.iter().take(10).enumerate() {
            if i == 9 && b > 1 {
                return Err(Decline);
            }
            n |= ((b & 0x7f) as u64) << (7 * i);
            if b < 0x80 {
                self.pos += i + 1;
                return Ok(zigzag(n));
            }
        }
        Err(Decline)
    }

    #[inline]
    fn span(&mut self, len: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(len).ok_or(Decline)?;
        let s = self.data.get(self.pos..end).ok_or(Decline)?;
        self.pos = end;
        Ok(s)
    }

    #[inline]
    fn sized(&mut self) -> Result<&'a [u8]> {
        let len = self.long()?;
        if len < 0 {
            return Err(Decline);
        }
        self.span(usize::try_from(len).map_err(|_| Decline)?)
    }

    #[inline]
    fn string(&mut self) -> Result<&'a str> {
        utf8(self.sized()?)
    }

    /// A union branch index written as the reference's generated reader reads it (one byte).
    #[inline]
    fn branch(&mut self, count: usize) -> Result<usize> {
        let b = self.byte()?;
        if b >= 0x80 || b & 1 != 0 || (b >> 1) as usize >= count {
            return Err(Decline);
        }
        Ok((b >> 1) as usize)
    }

    /// A scalar datum (records, arrays and maps are declined).
    #[inline]
    pub fn prim(&mut self, node: &Node) -> Result<Prim<'a>> {
        Ok(match node {
            Node::Null => Prim::Null,
            Node::Bool => match self.byte()? {
                0 => Prim::Bool(false),
                1 => Prim::Bool(true),
                _ => return Err(Decline),
            },
            Node::Long => Prim::Long(self.long()?),
            Node::Float => {
                let b = self.span(4)?;
                let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64;
                if !v.is_finite() {
                    return Err(Decline);
                }
                Prim::Float(v)
            }
            Node::Double => {
                let b = self.span(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                let v = f64::from_le_bytes(a);
                if !v.is_finite() {
                    return Err(Decline);
                }
                Prim::Double(v)
            }
            Node::Bytes => Prim::Bytes(self.sized()?),
            Node::Str => Prim::Str(self.string()?),
            Node::Fixed(n) => Prim::Bytes(self.span(*n)?),
            Node::Enum(symbols) => {
                let i = self.long()?;
                let i = usize::try_from(i).map_err(|_| Decline)?;
                let _ = symbols.get(i).ok_or(Decline)?;
                // the symbol lives in the schema, not the data: borrowed through the caller
                return Err(Decline);
            }
            Node::Union(branches) => {
                let i = self.branch(branches.len())?;
                let b = &branches[i];
                if matches!(b, Node::Union(_)) {
                    return Err(Decline);
                }
                self.prim(b)?
            }
            Node::Array(_) | Node::Map(_) | Node::Record(_) => return Err(Decline),
        })
    }

    /// Past one datum, checking it as the reference's reader checks what it skips.
    pub fn skip(&mut self, node: &Node, records: &[Record], depth: usize) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(Decline);
        }
        match node {
            Node::Null => {}
            Node::Bool => {
                if self.byte()? > 1 {
                    return Err(Decline);
                }
            }
            Node::Long => {
                self.long()?;
            }
            Node::Float => {
                self.span(4)?;
            }
            Node::Double => {
                self.span(8)?;
            }
            Node::Bytes => {
                self.sized()?;
            }
            Node::Str => {
                self.string()?;
            }
            Node::Fixed(n) => {
                self.span(*n)?;
            }
            Node::Enum(symbols) => {
                let i = self.long()?;
                if i < 0 || i as u64 >= symbols.len() as u64 {
                    return Err(Decline);
                }
            }
            Node::Union(branches) => {
                let i = self.branch(branches.len())?;
                self.skip(&branches[i], records, depth + 1)?;
            }
            Node::Record(r) => {
                for f in &records[*r].fields {
                    self.skip(&f.node, records, depth + 1)?;
                }
            }
            Node::Array(item) | Node::Map(item) => loop {
                let mut count = self.long()?;
                if count == 0 {
                    break;
                }
                if count < 0 {
                    count = count.checked_neg().ok_or(Decline)?;
                    self.long()?;
                }
                self.items_left = self.items_left.checked_sub(count as u64).ok_or(Decline)?;
                for _ in 0..count {
                    if matches!(node, Node::Map(_)) {
                        self.string()?;
                    }
                    self.skip(item, records, depth + 1)?;
                }
            },
        }
        Ok(())
    }
}

/// The text of a string datum. Connector strings are nearly always ASCII: checked a word at a
/// time first (`from_utf8` took ~110 instructions per short string, callgrind 2026-11-25).
#[inline]
fn utf8(bytes: &[u8]) -> Result<&str> {
    if bytes.is_ascii() {
        // SAFETY: ASCII bytes are valid UTF-8.
        Ok(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes).map_err(|_| Decline)
    }
}

/// An enum datum: its symbol.
fn enum_symbol<'s>(cur: &mut Cursor<'_>, symbols: &'s [String]) -> Result<&'s str> {
    let i = usize::try_from(cur.long()?).map_err(|_| Decline)?;
    symbols.get(i).map(String::as_str).ok_or(Decline)
}

/// A scalar of a field, an enum symbol included (as a string).
#[inline]
fn scalar_of<'a: 'r, 's: 'r, 'r>(cur: &mut Cursor<'a>, node: &'s Node) -> Result<Prim<'r>> {
    match node {
        Node::Enum(symbols) => Ok(Prim::Str(enum_symbol(cur, symbols)?)),
        Node::Union(branches) => {
            let i = cur.branch(branches.len())?;
            match &branches[i] {
                Node::Enum(symbols) => Ok(Prim::Str(enum_symbol(cur, symbols)?)),
                Node::Union(_) => Err(Decline),
                b => cur.prim(b),
            }
        }
        _ => cur.prim(node),
    }
}

/// How one field's datum is read, its union shape resolved when the schema is compiled (the
/// per-datum walk of [`scalar_of`] and [`Cursor::skip`] through nested `Node`s cost ~100
/// instructions a field, callgrind 2026-11-25).
#[derive(Debug)]
enum Datum {
    /// A scalar that is not a union (an enum symbol reads as a string).
    Plain(Node),
    /// `[null, X]` or `[X, null]` of such a scalar X; `null_at`: null's branch index.
    Optional { null_at: u8, node: Node },
    /// Anything else: other unions, and records, arrays and maps (only ever skipped).
    Other(Node),
}

impl Datum {
    fn of(node: &Node) -> Datum {
        let plain = |x: &Node| is_scalar(x) && !matches!(x, Node::Null | Node::Union(_));
        match optional(node) {
            Some((Some(null_at), x)) if plain(x) => Datum::Optional {
                null_at,
                node: x.clone(),
            },
            Some((None, x)) if plain(x) => Datum::Plain(x.clone()),
            _ => Datum::Other(node.clone()),
        }
    }

    /// The branch index of an optional datum (as [`Cursor::branch`] checks it): `false` for
    /// null.
    #[inline]
    fn present(cur: &mut Cursor<'_>, null_at: u8) -> Result<bool> {
        match cur.byte()? {
            b if b == 2 * null_at => Ok(false),
            b if b == 2 * (null_at ^ 1) => Ok(true),
            _ => Err(Decline),
        }
    }

    /// A scalar datum, as [`scalar_of`] reads it.
    #[inline]
    fn scalar<'a: 'r, 's: 'r, 'r>(&'s self, cur: &mut Cursor<'a>) -> Result<Prim<'r>> {
        match self {
            Datum::Plain(node) => plain_of(cur, node),
            Datum::Optional { null_at, node } => {
                if Datum::present(cur, *null_at)? {
                    plain_of(cur, node)
                } else {
                    Ok(Prim::Null)
                }
            }
            Datum::Other(node) => scalar_of(cur, node),
        }
    }

    /// Past the datum, as [`Cursor::skip`] checks it.
    #[inline]
    fn skip(&self, cur: &mut Cursor<'_>, records: &[Record]) -> Result<()> {
        match self {
            Datum::Plain(node) | Datum::Other(node) => cur.skip(node, records, 0),
            Datum::Optional { null_at, node } => {
                if Datum::present(cur, *null_at)? {
                    cur.skip(node, records, 1)?;
                }
                Ok(())
            }
        }
    }
}

/// The union branch of an optional record: `false` for null (`null_at`: `None` for a record
/// that is not in a union).
#[inline]
fn present(cur: &mut Cursor<'_>, null_at: Option<u8>) -> Result<bool> {
    match null_at {
        Some(null_at) => Datum::present(cur, null_at),
        None => Ok(true),
    }
}

/// A scalar that is not a union.
#[inline]
fn plain_of<'a: 'r, 's: 'r, 'r>(cur: &mut Cursor<'a>, node: &'s Node) -> Result<Prim<'r>> {
    match node {
        Node::Enum(symbols) => Ok(Prim::Str(enum_symbol(cur, symbols)?)),
        _ => cur.prim(node),
    }
}

// ------------------------------------------------------------------ compiled schemas

#[derive(Debug, Clone, Copy)]
enum SourceRole {
    Version,
    Connector,
    Name,
    TsMs,
    Snapshot,
    Db,
    Schema,
    Table,
    ChangeLsn,
    CommitLsn,
    Serial,
    Skip,
}

#[derive(Debug, Clone, Copy)]
enum TxRole {
    Id,
    Total,
    Dco,
    Skip,
}

#[derive(Debug)]
enum Role {
    /// `before` or `after` (`after`: true), an optional record; `null_at`: null's branch index
    /// (`None`: not a union).
    Image {
        after: bool,
        null_at: Option<u8>,
    },
    Source(Option<u8>, Vec<(SourceRole, Datum)>),
    Op(Datum),
    TsMs(Datum),
    Tx(Option<u8>, Vec<(TxRole, Datum)>),
    Skip(Datum),
}

/// A compiled Debezium envelope schema.
pub struct AvroValue {
    parsed: Parsed,
    roles: Vec<Role>,
    /// How each row column is read.
    readers: Vec<Datum>,
    /// Each row column's name as JSON text (quoted, escaped), written once here.
    names: Vec<Vec<u8>>,
    /// The same names, as the events' images list them ([`crate::event::Event::names`]).
    image_names: Arc<crate::event::ImageNames>,
    pub table: Arc<Table>,
}

/// A compiled key schema (a record of scalar fields): each field's name as JSON text, its
/// reader and its Connect column (keys are converted as row images are).
pub struct AvroKey {
    fields: Vec<(Vec<u8>, Datum, schema::Column)>,
}

/// `[null, X]`, `[X, null]` or `X` → (null's branch index, `None` for a bare `X`; `X`).
fn optional(node: &Node) -> Option<(Option<u8>, &Node)> {
    match node {
        Node::Union(b) if b.len() == 2 => match (&b[0], &b[1]) {
            (Node::Null, x) if !matches!(x, Node::Null) => Some((Some(0), x)),
            (x, Node::Null) if !matches!(x, Node::Null) => Some((Some(1), x)),
            _ => None,
        },
        Node::Union(_) => None,
        x => Some((None, x)),
    }
}

/// Whether every datum of `node` is a scalar [`scalar_of`] reads.
fn is_scalar(node: &Node) -> bool {
    match node {
        Node::Array(_) | Node::Map(_) | Node::Record(_) => false,
        Node::Union(b) => b.iter().all(is_scalar),
        _ => true,
    }
}

/// An optional record: (null's branch index, the record).
fn optional_record(node: &Node) -> Option<(Option<u8>, usize)> {
    match optional(node)? {
        (null_at, Node::Record(r)) => Some((null_at, *r)),
        _ => None,
    }
}

impl Parsed {
    /// The definition a type name in a field of a record in namespace `ns` stands for, as
    /// `AvroNames.resolve` (and fastavro) resolve it: a bare name in `ns` only.
    fn named_json(&self, name: &str, ns: Option<&str>) -> Result<&Value> {
        let i = *self.full.get(&full_name(name, ns)).ok_or(Decline)?;
        Ok(&self.named_json[i])
    }
}

/// The Connect column of one row field (`column_from_avro`).
fn column_of(
    parsed: &Parsed,
    record: &Record,
    field: &Field,
    opts: &Options,
) -> Result<schema::Column> {
    let (_, inner) = optional(&field.node).ok_or(Decline)?;
    if matches!(
        inner,
        Node::Record(_) | Node::Array(_) | Node::Map(_) | Node::Union(_) | Node::Null
    ) {
        return Err(Decline); // nested values: the reference decides
    }
    // the JSON of the non-null branch
    let mut json = &field.json;
    if let Some(branches) = json.as_array() {
        let non_null: Vec<&Value> = branches
            .iter()
            .filter(|b| b.as_str() != Some("null"))
            .collect();
        if non_null.len() != 1 {
            return Err(Decline);
        }
        json = non_null[0];
    }
    if let Some(name) = json.as_str() {
        if Parser::primitive(name).is_none() {
            json = parsed.named_json(name, record.namespace.as_deref())?;
        }
    }
    let (connect_type, semantic, params): (&str, Option<&str>, Vec<(String, String)>) = if json
        .is_object()
    {
        let ty = json.get("type").and_then(|t| t.as_str()).ok_or(Decline)?;
        let annotation = json.get("connect.type");
        let connect_type = match annotation {
            Some(a) if ty == "int" => match a.as_str() {
                Some("int8") => "int8",
                Some("int16") => "int16",
                _ => return Err(Decline),
            },
            _ => avro_to_connect(ty)?,
        };
        let (semantic, mut params) =
            schema::semantic_and_params(json.get("connect.name"), json.get("connect.parameters"))?;
        if semantic == Some("org.apache.kafka.connect.data.Decimal")
            && !params.iter().any(|(k, _)| k == "scale")
        {
            let scale = match json.get("scale") {
                None => "0".to_string(),
                Some(s) => schema::param_text(s)?,
            };
            params.push(("scale".to_string(), scale));
        }
        (connect_type, semantic, params)
    } else {
        let ty = json.as_str().ok_or(Decline)?;
        (avro_to_connect(ty)?, None, Vec::new())
    };
    if matches!(connect_type, "struct" | "array" | "map") {
        return Err(Decline);
    }
    schema::column(&field.name, connect_type, semantic, &params, opts)
}

fn avro_to_connect(ty: &str) -> Result<&'static str> {
    Ok(match ty {
        "int" => "int32",
        "long" => "int64",
        "float" => "float32",
        "double" => "float64",
        "boolean" => "boolean",
        "string" | "enum" => "string",
        "bytes" | "fixed" => "bytes",
        _ => return Err(Decline),
    })
}

fn source_roles(rec: &Record) -> Result<Vec<(SourceRole, Datum)>> {
    let mut roles = Vec::with_capacity(rec.fields.len());
    for f in &rec.fields {
        let role = match f.name.as_str() {
            "version" => SourceRole::Version,
            "connector" => SourceRole::Connector,
            "name" => SourceRole::Name,
            "ts_ms" => SourceRole::TsMs,
            "snapshot" => SourceRole::Snapshot,
            "db" => SourceRole::Db,
            "schema" => SourceRole::Schema,
            "table" => SourceRole::Table,
            "change_lsn" => SourceRole::ChangeLsn,
            "commit_lsn" => SourceRole::CommitLsn,
            "event_serial_no" => SourceRole::Serial,
            _ => SourceRole::Skip,
        };
        if !matches!(role, SourceRole::Skip) && !is_scalar(&f.node) {
            return Err(Decline);
        }
        roles.push((role, Datum::of(&f.node)));
    }
    Ok(roles)
}

fn tx_roles(rec: &Record) -> Result<Vec<(TxRole, Datum)>> {
    let mut roles = Vec::with_capacity(rec.fields.len());
    let mut id = false;
    for f in &rec.fields {
        let role = match f.name.as_str() {
            "id" => {
                id = true;
                TxRole::Id
            }
            "total_order" => TxRole::Total,
            "data_collection_order" => TxRole::Dco,
            _ => TxRole::Skip,
        };
        if !matches!(role, TxRole::Skip) && !is_scalar(&f.node) {
            return Err(Decline);
        }
        roles.push((role, Datum::of(&f.node)));
    }
    if !id {
        return Err(Decline);
    }
    Ok(roles)
}

impl AvroValue {
    /// Compile an envelope writer schema (JSON); `Err` for anything but a Debezium envelope
    /// whose rows this module reads.
    pub fn compile(text: &str, opts: &Options) -> Result<AvroValue> {
        let parsed = parse(text)?;
        let Node::Record(top) = parsed.top else {
            return Err(Decline);
        };
        let mut roles = Vec::new();
        let mut row: Option<usize> = None;
        let mut has_op = false;
        for f in &parsed.records[top].fields {
            let role = match f.name.as_str() {
                "before" | "after" => {
                    let (null_at, r) = optional_record(&f.node).ok_or(Decline)?;
                    if row.is_some_and(|q| q != r) {
                        return Err(Decline);
                    }
                    row = Some(r);
                    Role::Image {
                        after: f.name == "after",
                        null_at,
                    }
                }
                "source" => {
                    let (null_at, r) = optional_record(&f.node).ok_or(Decline)?;
                    Role::Source(null_at, source_roles(&parsed.records[r])?)
                }
                "op" => {
                    has_op = true;
                    if !is_scalar(&f.node) {
                        return Err(Decline);
                    }
                    Role::Op(Datum::of(&f.node))
                }
                "ts_ms" => {
                    if !is_scalar(&f.node) {
                        return Err(Decline);
                    }
                    Role::TsMs(Datum::of(&f.node))
                }
                "transaction" => {
                    let (null_at, r) = optional_record(&f.node).ok_or(Decline)?;
                    Role::Tx(null_at, tx_roles(&parsed.records[r])?)
                }
                _ => Role::Skip(Datum::of(&f.node)),
            };
            roles.push(role);
        }
        if !has_op {
            return Err(Decline); // side records: the reference's
        }
        let row = row.ok_or(Decline)?;
        let record = &parsed.records[row];
        let mut columns = Vec::new();
        for f in &record.fields {
            columns.push(column_of(&parsed, record, f, opts)?);
        }
        let fields = &parsed.records[row].fields;
        let readers = fields.iter().map(|f| Datum::of(&f.node)).collect();
        let names: Vec<Vec<u8>> = fields.iter().map(|f| jsonw::json_string(&f.name)).collect();
        let table = Arc::new(Table::new(columns));
        // (every image lists every field, in the schema's order: the table's)
        let image_names = Arc::new(crate::event::ImageNames::new(
            names.iter(),
            Some(table.order.clone()),
        ));
        Ok(AvroValue {
            parsed,
            roles,
            readers,
            names,
            image_names,
            table,
        })
    }
}

impl AvroKey {
    pub fn compile(text: &str, opts: &Options) -> Result<AvroKey> {
        let parsed = parse(text)?;
        let Node::Record(record) = parsed.top else {
            return Err(Decline);
        };
        let record = &parsed.records[record];
        let fields = record
            .fields
            .iter()
            .map(|f| {
                let column = column_of(&parsed, record, f, opts)?;
                Ok((jsonw::json_string(&f.name), Datum::of(&f.node), column))
            })
            .collect::<Result<_>>()?;
        Ok(AvroKey { fields })
    }

    /// The key datum (after the 5-byte header) as the reference writes a key: its fields
    /// converted as the columns of a row image are.
    pub fn write(&self, data: &[u8], opts: &Options, out: &mut Vec<u8>) -> Result<()> {
        let mut cur = Cursor::new(data, 5);
        out.push(b'{');
        for (i, (name, datum, column)) in self.fields.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(name);
            out.push(b':');
            write_column(column, datum.scalar(&mut cur)?, opts, out)?;
        }
        out.push(b'}');
        if cur.pos != data.len() {
            return Err(Decline);
        }
        Ok(())
    }
}

/// One column value of a row image or a key, converted; whether it was the placeholder of an
/// unavailable value (written as `null`).
fn write_column(
    col: &schema::Column,
    p: Prim<'_>,
    opts: &Options,
    out: &mut Vec<u8>,
) -> Result<bool> {
    let s = match p {
        Prim::Bytes(b) => return write_bytes(col, b, opts, out),
        Prim::Null => Scalar::Null,
        Prim::Bool(b) => Scalar::Bool(b),
        Prim::Long(v) => Scalar::Int(v),
        Prim::Float(v) | Prim::Double(v) => Scalar::Float(v),
        Prim::Str(t) => Scalar::Str(Cow::Borrowed(t)),
    };
    schema::convert(col, s, opts, out)
}

/// A `bytes`/`fixed` column value: the placeholder (`true`), base64 or a decimal.
fn write_bytes(col: &schema::Column, b: &[u8], opts: &Options, out: &mut Vec<u8>) -> Result<bool> {
    if col.marker != schema::Marker::Binary {
        return Err(Decline);
    }
    if b == opts.placeholder.as_bytes() {
        out.extend_from_slice(b"null");
        return Ok(true);
    }
    match col.conv {
        schema::Conv::Base64Bytes => jsonw::write_base64(out, b),
        schema::Conv::Decimal { scale, precision } => {
            schema::write_decimal(b, scale, precision, out)?
        }
        _ => return Err(Decline),
    }
    Ok(false)
}

fn opt_str<'a>(p: Prim<'a>) -> Result<Option<&'a str>> {
    match p {
        Prim::Null => Ok(None),
        Prim::Str(s) => Ok(Some(s)),
        _ => Err(Decline),
    }
}

fn opt_int(p: Prim<'_>) -> Result<Option<i64>> {
    match p {
        Prim::Null => Ok(None),
        Prim::Long(v) => Ok(Some(v)),
        _ => Err(Decline),
    }
}

impl AvroValue {
    /// One envelope datum (the value after its 5-byte header): images written to `out`.
    pub fn read<'a>(
        &'a self,
        data: &'a [u8],
        opts: &Options,
        out: &mut Vec<u8>,
        members: &mut Vec<Member>,
        gone: &mut Vec<Box<str>>,
    ) -> Result<crate::dom::Envelope<'a>> {
        let mut cur = Cursor::new(data, 5);
        let records = &self.parsed.records;
        let mut env = crate::dom::Envelope::default();
        for role in &self.roles {
            match role {
                Role::Image { after, null_at } => {
                    let image = if present(&mut cur, *null_at)? {
                        Some(self.row(&mut cur, opts, out, members, gone)?)
                    } else {
                        None
                    };
                    if *after {
                        env.after = image;
                    } else {
                        env.before = image;
                    }
                }
                Role::Source(null_at, roles) => {
                    if !present(&mut cur, *null_at)? {
                        continue;
                    }
                    let mut s = crate::dom::Source::default();
                    for (role, datum) in roles {
                        if matches!(role, SourceRole::Skip) {
                            datum.skip(&mut cur, records)?;
                            continue;
                        }
                        let p = datum.scalar(&mut cur)?;
                        match role {
                            SourceRole::Version => s.version = opt_str(p)?,
                            SourceRole::Connector => s.connector = opt_str(p)?,
                            SourceRole::Name => s.name = opt_str(p)?,
                            SourceRole::TsMs => s.ts_ms = opt_int(p)?,
                            SourceRole::Snapshot => {
                                s.snapshot = match p {
                                    Prim::Null => None,
                                    Prim::Bool(b) => Some(Err(b)),
                                    Prim::Str(t) => Some(Ok(t)),
                                    _ => return Err(Decline),
                                }
                            }
                            SourceRole::Db => s.db = opt_str(p)?,
                            SourceRole::Schema => s.schema = opt_str(p)?,
                            SourceRole::Table => s.table = opt_str(p)?,
                            SourceRole::ChangeLsn => s.change_lsn = opt_str(p)?,
                            SourceRole::CommitLsn => s.commit_lsn = opt_str(p)?,
                            SourceRole::Serial => s.event_serial_no = opt_int(p)?,
                            SourceRole::Skip => {}
                        }
                    }
                    env.source = Some(s);
                }
                Role::Op(datum) => env.op = opt_str(datum.scalar(&mut cur)?)?,
                Role::TsMs(datum) => env.ts_ms = opt_int(datum.scalar(&mut cur)?)?,
                Role::Tx(null_at, roles) => {
                    if !present(&mut cur, *null_at)? {
                        continue;
                    }
                    let (mut id, mut total, mut dco) = (None, None, None);
                    for (role, datum) in roles {
                        if matches!(role, TxRole::Skip) {
                            datum.skip(&mut cur, records)?;
                            continue;
                        }
                        let p = datum.scalar(&mut cur)?;
                        match role {
                            TxRole::Id => id = Some(opt_str(p)?.ok_or(Decline)?),
                            TxRole::Total => total = opt_int(p)?,
                            TxRole::Dco => dco = opt_int(p)?,
                            TxRole::Skip => {}
                        }
                    }
                    env.transaction = Some(crate::dom::Tx {
                        id: id.ok_or(Decline)?,
                        total_order: total,
                        data_collection_order: dco,
                    });
                }
                Role::Skip(datum) => datum.skip(&mut cur, records)?,
            }
        }
        if cur.pos != data.len() {
            return Err(Decline);
        }
        env.names = Some(self.image_names.clone());
        Ok(env)
    }

    /// One row image, canonical, as `dom::image` writes a schema-ful one.
    fn row(
        &self,
        cur: &mut Cursor<'_>,
        opts: &Options,
        out: &mut Vec<u8>,
        members: &mut Vec<Member>,
        gone: &mut Vec<Box<str>>,
    ) -> Result<crate::parse::ImageAt> {
        let start = out.len();
        let first_member = members.len();
        let mut table_gone = crate::dom::GoneColumns::default();
        out.push(b'{');
        let columns = self
            .readers
            .iter()
            .zip(&self.table.columns)
            .zip(&self.names);
        for (i, ((datum, col), name)) in columns.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let name_start = out.len();
            out.extend_from_slice(name);
            let name_end = out.len();
            out.push(b':');
            let value_start = out.len();
            if write_column(col, datum.scalar(cur)?, opts, out)? {
                table_gone.note(i, col.marker);
            }
            members.push(Member {
                name: (name_start as u32 + 1, name_end as u32 - 1),
                value: (value_start as u32, out.len() as u32),
            });
        }
        out.push(b'}');
        table_gone.finish(&self.table, gone);
        Ok(crate::parse::ImageAt {
            span: (start as u32, out.len() as u32),
            members: (first_member as u32, members.len() as u32),
        })
    }
}

/// The schema id of a Confluent wire-format datum.
pub fn schema_id(raw: &[u8]) -> Option<u32> {
    if raw.len() < 5 || raw[0] != 0 {
        return None;
    }
    Some(u32::from_be_bytes([raw[1], raw[2], raw[3], raw[4]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The Avro specification's varint, byte by byte, with the reference's limits (at most
    /// 10 bytes, the value within 64 bits).
    fn spec_long(data: &[u8]) -> Option<(i64, usize)> {
        let mut n = 0u128;
        for (i, &b) in data.iter().enumerate().take(10) {
            n |= ((b & 0x7f) as u128) << (7 * i);
            if b < 0x80 {
                let n = u64::try_from(n).ok()?;
                return Some((((n >> 1) as i64) ^ -((n & 1) as i64), i + 1));
            }
        }
        None
    }

    proptest! {
        #[test]
        fn longs_read_as_the_specification_says(data in proptest::collection::vec(any::<u8>(), 0..12)) {
            let mut cur = Cursor::new(&data, 0);
            let read = cur.long().ok().map(|v| (v, cur.pos));
            prop_assert_eq!(read, spec_long(&data));
        }

        #[test]
        fn longs_of_every_length_read_back(
            bits in 0u32..64,
            v in any::<i64>(),
            tail in proptest::collection::vec(any::<u8>(), 0..10),
        ) {
            // values of every magnitude (1 to 10 bytes), zigzag-encoded as the specification
            // says, followed by any bytes (the one-word path needs 8 readable bytes)
            let v = v >> bits;
            let mut n = ((v << 1) ^ (v >> 63)) as u64;
            let mut data = Vec::new();
            while n >= 0x80 {
                data.push((n as u8) | 0x80);
                n >>= 7;
            }
            data.push(n as u8);
            let len = data.len();
            data.extend(&tail);
            let mut cur = Cursor::new(&data, 0);
            prop_assert_eq!(cur.long().ok().map(|v| (v, cur.pos)), Some((v, len)));
            prop_assert_eq!(spec_long(&data), Some((v, len)));
        }

        #[test]
        fn strings_are_utf8_or_declined(data in proptest::collection::vec(any::<u8>(), 0..40)) {
            prop_assert_eq!(utf8(&data).ok(), std::str::from_utf8(&data).ok());
        }

        #[test]
        fn ascii_strings_read_whole(data in proptest::collection::vec(0u8..0x80, 0..40), at in any::<proptest::sample::Index>(), byte in 0x80u8..) {
            // ASCII (the fast path), and the same with one byte at or above 0x80 (never ASCII)
            prop_assert_eq!(utf8(&data).ok(), std::str::from_utf8(&data).ok());
            prop_assert!(utf8(&data).is_ok());
            let mut other = data.clone();
            if !other.is_empty() {
                other[at.index(data.len())] = byte;
                prop_assert_eq!(utf8(&other).ok(), std::str::from_utf8(&other).ok());
            }
        }
    }

    #[test]
    fn zigzag_examples_of_the_specification() {
        // https://avro.apache.org/docs/1.11.1/specification/#binary-encoding
        for (bytes, v) in [
            (&[0x00][..], 0),
            (&[0x01], -1),
            (&[0x02], 1),
            (&[0x03], -2),
            (&[0x7f], -64),
            (&[0x80, 0x01], 64),
        ] {
            assert_eq!(Cursor::new(bytes, 0).long(), Ok(v));
        }
    }
}
