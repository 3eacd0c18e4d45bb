//! One-pass parsing of Debezium JSON with sonic-rs's serde deserializer: row images are written
//! as canonical JSON (what msgspec writes for what msgspec read) while they are parsed, through
//! `DeserializeSeed`s, so no tree is built and no byte is read twice.
//!
//! Parser values the reference would read differently are errors (→ [`Decline`]): integers
//! beyond 64 bits (sonic-rs gives them as floats: an integral float of 2^63 or more is
//! ambiguous), float zeros (`-0`, `-0.0` and `0.0` all read as 0.0), duplicate keys.

use crate::jsonw;
use crate::schema::{self, Options, Scalar, Table};
use crate::value::Member;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

fn refuse<E: de::Error>() -> E {
    E::custom("declined")
}

#[inline]
fn float_ok<E: de::Error>(v: f64) -> Result<f64, E> {
    if !v.is_finite() || v == 0.0 || (v.fract() == 0.0 && v.abs() >= 9.223_372_036_854_776e18) {
        return Err(refuse());
    }
    Ok(v)
}

/// An object key: borrowed from the input when it has no escapes (then it needs none either).
pub struct Key<'a>(pub Cow<'a, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

/// A string as msgspec writes it: text borrowed from valid JSON had no escapes, so it holds no
/// quote, backslash or control character and is copied as it is.
#[inline]
#[allow(clippy::ptr_arg)] // whether the text is borrowed is the point
pub fn write_text(out: &mut Vec<u8>, text: &Cow<'_, str>) {
    match text {
        Cow::Borrowed(s) => {
            out.reserve(s.len() + 2);
            out.push(b'"');
            out.extend_from_slice(s.as_bytes());
            out.push(b'"');
        }
        Cow::Owned(s) => jsonw::write_str(out, s),
    }
}

/// Any JSON value, written canonically to `out`.
pub struct Canon<'o> {
    pub out: &'o mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for Canon<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Canon<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        jsonw::write_i64(self.out, v);
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        jsonw::write_u64(self.out, v);
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        jsonw::write_f64(self.out, float_ok(v)?);
        Ok(())
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<(), E> {
        write_text(self.out, &Cow::Borrowed(v));
        Ok(())
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        jsonw::write_str(self.out, v);
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.out.push(b'[');
        let mut first = true;
        loop {
            let mark = self.out.len();
            if !first {
                self.out.push(b',');
            }
            if seq.next_element_seed(Canon { out: self.out })?.is_none() {
                self.out.truncate(mark);
                break;
            }
            first = false;
        }
        self.out.push(b']');
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut names = Vec::new();
        object(&mut map, self.out, &mut names, None, |_, map, out| {
            map.next_value_seed(Canon { out }).map(|_| false)
        })
    }
}

/// The members of an object: names written (duplicates refused), each value by `value`
/// (`Ok(true)` = it was the placeholder: recorded by the caller).
fn object<'de, A, F>(
    map: &mut A,
    out: &mut Vec<u8>,
    names: &mut Vec<(usize, usize)>,
    mut members: Option<&mut Vec<Member>>,
    mut value: F,
) -> Result<(), A::Error>
where
    A: MapAccess<'de>,
    F: FnMut(&str, &mut A, &mut Vec<u8>) -> Result<bool, A::Error>,
{
    names.clear();
    out.push(b'{');
    let mut first = true;
    while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
        if !first {
            out.push(b',');
        }
        first = false;
        let name_start = out.len();
        write_text(out, &key);
        let name_end = out.len();
        let len = name_end - name_start;
        for &(s, e) in names.iter() {
            if e - s == len && out[s..e] == out[name_start..name_end] {
                return Err(refuse()); // duplicate key: msgspec keeps the last value at the first place
            }
        }
        names.push((name_start, name_end));
        out.push(b':');
        let value_start = out.len();
        value(&key, map, out)?;
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

/// One column value as a [`Scalar`] (arrays and objects written canonically).
struct ScalarSeed<'o> {
    out: &'o mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for ScalarSeed<'_> {
    type Value = Scalar<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Scalar<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ScalarSeed<'_> {
    type Value = Scalar<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar<'de>, E> {
        Ok(match i64::try_from(v) {
            Ok(i) => Scalar::Int(i),
            Err(_) => Scalar::UInt(v),
        })
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Float(float_ok(v)?))
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_string())))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Scalar<'de>, A::Error> {
        Canon { out: self.out }.visit_seq(seq)?;
        Ok(Scalar::Nested(b'['))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Scalar<'de>, A::Error> {
        Canon { out: self.out }.visit_map(map)?;
        Ok(Scalar::Nested(b'{'))
    }
}

/// How row images are read.
#[derive(Clone, Copy)]
pub enum RowMode<'t> {
    Schemaless,
    Table(&'t Table),
}

/// A row image (an object, or null): canonical JSON appended to `out`, its members to
/// `members`, unavailable (placeholder) columns to `gone` (schema-less: in image order; with a
/// schema: text then binary columns, each in schema order, as the reference lists them).
pub struct ImageSeed<'c> {
    pub rows: RowMode<'c>,
    pub opts: &'c Options,
    pub out: &'c mut Vec<u8>,
    pub members: &'c mut Vec<Member>,
    pub gone: &'c mut Vec<Box<str>>,
}

/// Where an image sits: `out[span]`, `members[from..to]`.
#[derive(Debug, Clone, Copy)]
pub struct ImageAt {
    pub span: (u32, u32),
    pub members: (u32, u32),
}

impl<'de> DeserializeSeed<'de> for ImageSeed<'_> {
    type Value = Option<ImageAt>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<ImageAt>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ImageSeed<'_> {
    type Value = Option<ImageAt>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object or null")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<ImageAt>, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Option<ImageAt>, E> {
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<ImageAt>, A::Error> {
        let start = self.out.len();
        let first_member = self.members.len();
        let opts = self.opts;
        let mut names = Vec::new();
        match self.rows {
            RowMode::Schemaless => {
                let gone = &mut *self.gone;
                object(
                    &mut map,
                    self.out,
                    &mut names,
                    Some(self.members),
                    |name, map, out| {
                        let v = map.next_value_seed(ScalarSeed { out })?;
                        if let Scalar::Str(text) = &v {
                            if **text == *opts.placeholder || **text == *opts.placeholder_b64 {
                                out.extend_from_slice(b"null");
                                let name: Box<str> = name.into();
                                if !gone.contains(&name) {
                                    gone.push(name);
                                }
                                return Ok(true);
                            }
                        }
                        v.write(out);
                        Ok(false)
                    },
                )?;
            }
            RowMode::Table(table) => {
                let mut text_gone: Vec<usize> = Vec::new();
                let mut binary_gone: Vec<usize> = Vec::new();
                let mut hint = 0usize;
                object(
                    &mut map,
                    self.out,
                    &mut names,
                    Some(self.members),
                    |name, map, out| {
                        let Some(i) = table.find(name, hint) else {
                            map.next_value_seed(Canon { out })?;
                            return Ok(false);
                        };
                        hint = i + 1;
                        let col = &table.columns[i];
                        let v = map.next_value_seed(ScalarSeed { out })?;
                        let gone = schema::convert(col, v, opts, out).map_err(|_| refuse())?;
                        if gone {
                            if col.marker == schema::Marker::Text {
                                text_gone.push(i);
                            } else {
                                binary_gone.push(i);
                            }
                        }
                        Ok(gone)
                    },
                )?;
                text_gone.sort_unstable();
                binary_gone.sort_unstable();
                for i in text_gone.into_iter().chain(binary_gone) {
                    let name: Box<str> = table.columns[i].name.as_str().into();
                    if !self.gone.contains(&name) {
                        self.gone.push(name);
                    }
                }
            }
        }
        Ok(Some(ImageAt {
            span: (start as u32, self.out.len() as u32),
            members: (first_member as u32, self.members.len() as u32),
        }))
    }
}

/// An integer as msgspec's typed `int` reads it (floats refused).
#[derive(Debug, Clone, Copy)]
pub struct StrictInt(pub i64);

impl<'de> de::Deserialize<'de> for StrictInt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = StrictInt;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<StrictInt, E> {
                Ok(StrictInt(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<StrictInt, E> {
                i64::try_from(v).map(StrictInt).map_err(|_| refuse())
            }
        }
        d.deserialize_any(V)
    }
}

/// `source.snapshot`: a string or a boolean (the markers Debezium writes are not copied).
#[derive(Debug, Clone)]
pub enum Snapshot {
    Flag(bool),
    Known(&'static str),
    Other(String),
}

const MARKERS: [&str; 7] = [
    "false",
    "true",
    "first",
    "first_in_data_collection",
    "last_in_data_collection",
    "last",
    "incremental",
];

impl<'de> de::Deserialize<'de> for Snapshot {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Snapshot;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or a boolean")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Snapshot, E> {
                Ok(Snapshot::Flag(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Snapshot, E> {
                Ok(match MARKERS.iter().find(|m| **m == v) {
                    Some(m) => Snapshot::Known(m),
                    None => Snapshot::Other(v.to_string()),
                })
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(serde::Deserialize)]
pub struct SourceJson<'a> {
    #[serde(borrow, default)]
    pub version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub connector: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    #[serde(default)]
    pub ts_ms: Option<StrictInt>,
    #[serde(default)]
    pub snapshot: Option<Snapshot>,
    #[serde(borrow, default)]
    pub db: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub schema: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub table: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub change_lsn: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub commit_lsn: Option<Cow<'a, str>>,
    #[serde(default)]
    pub event_serial_no: Option<StrictInt>,
}

#[derive(serde::Deserialize)]
pub struct TxJson<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(default)]
    pub total_order: Option<StrictInt>,
    #[serde(default)]
    pub data_collection_order: Option<StrictInt>,
}

/// The envelope, with its images written while it is parsed.
pub struct Envelope<'a> {
    pub before: Option<ImageAt>,
    pub after: Option<ImageAt>,
    pub source: Option<SourceJson<'a>>,
    pub op: Option<Cow<'a, str>>,
    pub ts_ms: Option<StrictInt>,
    pub transaction: Option<TxJson<'a>>,
}

pub struct EnvelopeSeed<'c> {
    pub rows: RowMode<'c>,
    pub opts: &'c Options,
    pub out: &'c mut Vec<u8>,
    pub members: &'c mut Vec<Member>,
    pub gone: &'c mut Vec<Box<str>>,
}

impl<'de> DeserializeSeed<'de> for EnvelopeSeed<'_> {
    type Value = Envelope<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Envelope<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EnvelopeSeed<'_> {
    type Value = Envelope<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Debezium envelope")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope<'de>, A::Error> {
        let mut env = Envelope {
            before: None,
            after: None,
            source: None,
            op: None,
            ts_ms: None,
            transaction: None,
        };
        let mut seen = 0u8;
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let bit = match &*key {
                "before" => 1,
                "after" => 2,
                "source" => 4,
                "op" => 8,
                "ts_ms" => 16,
                "transaction" => 32,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if seen & bit != 0 {
                return Err(refuse());
            }
            seen |= bit;
            match bit {
                1 | 2 => {
                    let image = map.next_value_seed(ImageSeed {
                        rows: self.rows,
                        opts: self.opts,
                        out: self.out,
                        members: self.members,
                        gone: self.gone,
                    })?;
                    if bit == 1 {
                        env.before = image;
                    } else {
                        env.after = image;
                    }
                }
                4 => env.source = map.next_value()?,
                8 => env.op = map.next_value()?,
                16 => env.ts_ms = map.next_value()?,
                _ => env.transaction = map.next_value()?,
            }
        }
        Ok(env)
    }
}
