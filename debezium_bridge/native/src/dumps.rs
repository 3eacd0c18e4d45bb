//! Topic-dump lines (`formats/dumps.py`): our lossless JSON lines and `kcat -J` lines, parsed
//! natively so that `debezium-bridge convert` reads a dump without a Python object per record.
//! A line this module does not read exactly like the reference (kcat's map-form headers or
//! deserializer errors, non-UTF-8 lines, anything malformed) is declined: the Python reader
//! reads it and writes the dead letter of a bad line.

use crate::parse::StrictInt;
use crate::value::{Decline, Result};
use serde::Deserialize;
use std::borrow::Cow;

/// One record of a dump line (key, value and headers decoded).
#[derive(Debug, Default)]
pub struct DumpRecord<'a> {
    pub topic: Cow<'a, str>,
    pub partition: i32,
    pub offset: Option<i64>,
    pub timestamp: Option<i64>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// Whether the record has headers, and the last `__debezium.newkey` / `oldkey` values.
    pub has_headers: bool,
    pub newkey: Option<Option<Vec<u8>>>,
    pub oldkey: Option<Option<Vec<u8>>>,
}

#[derive(Deserialize)]
struct Lossless<'a> {
    #[serde(borrow)]
    topic: Cow<'a, str>,
    partition: StrictInt,
    #[serde(default)]
    offset: Option<StrictInt>,
    #[serde(default)]
    timestamp: Option<StrictInt>,
    #[serde(borrow, default)]
    headers: Vec<(Cow<'a, str>, Option<Cow<'a, str>>)>,
    #[serde(borrow, default)]
    key_b64: Present<'a>,
    #[serde(borrow, default)]
    value_b64: Present<'a>,
}

/// A field that must be present and may be null (`Missing` when absent).
#[derive(Default)]
enum Present<'a> {
    #[default]
    Missing,
    Null,
    Text(Cow<'a, str>),
}

impl<'a> Present<'a> {
    fn required(self) -> Result<Option<Cow<'a, str>>> {
        match self {
            Present::Missing => Err(Decline),
            Present::Null => Ok(None),
            Present::Text(t) => Ok(Some(t)),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Present<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Present<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or null")
            }
            fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<Present<'a>, E> {
                Ok(Present::Null)
            }
            fn visit_none<E: serde::de::Error>(self) -> std::result::Result<Present<'a>, E> {
                Ok(Present::Null)
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> std::result::Result<Present<'a>, E> {
                Ok(Present::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(
                self,
                v: &str,
            ) -> std::result::Result<Present<'a>, E> {
                Ok(Present::Text(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct Kcat<'a> {
    #[serde(borrow)]
    topic: Cow<'a, str>,
    partition: StrictInt,
    offset: StrictInt,
    #[serde(borrow, default)]
    key: Present<'a>,
    #[serde(borrow, default)]
    payload: Present<'a>,
    #[serde(default)]
    ts: Option<StrictInt>,
    #[serde(borrow, default)]
    headers: Option<Vec<Option<Cow<'a, str>>>>,
    #[serde(default)]
    key_error: Option<sonic_rs::Value>,
    #[serde(default)]
    payload_error: Option<sonic_rs::Value>,
}

const NEWKEY: &str = "__debezium.newkey";
const OLDKEY: &str = "__debezium.oldkey";

fn b64(text: &str) -> Result<Vec<u8>> {
    base64_simd::STANDARD
        .decode_to_vec(text.as_bytes())
        .map_err(|_| Decline)
}

fn note_header(rec: &mut DumpRecord<'_>, name: &str, value: Option<Vec<u8>>) {
    rec.has_headers = true;
    if name == NEWKEY {
        rec.newkey = Some(value);
    } else if name == OLDKEY {
        rec.oldkey = Some(value);
    }
}

/// The formats of `DumpFormat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Lossless,
    Kcat,
}

/// One non-blank line (without its line terminator).
pub fn parse_line(line: &[u8], format: Format) -> Result<DumpRecord<'_>> {
    let text = simdutf8::basic::from_utf8(line).map_err(|_| Decline)?;
    match format {
        Format::Lossless => {
            let l: Lossless = sonic_rs::from_str(text).map_err(|_| Decline)?;
            let mut rec = DumpRecord {
                partition: i32::try_from(l.partition.0).map_err(|_| Decline)?,
                offset: l.offset.map(|v| v.0),
                timestamp: l.timestamp.map(|v| v.0),
                key: match l.key_b64.required()? {
                    Some(k) => Some(b64(&k)?),
                    None => None,
                },
                value: match l.value_b64.required()? {
                    Some(v) => Some(b64(&v)?),
                    None => None,
                },
                topic: l.topic,
                ..Default::default()
            };
            for (name, value) in l.headers {
                let value = match value {
                    Some(v) => Some(b64(&v)?),
                    None => None,
                };
                note_header(&mut rec, &name, value);
            }
            Ok(rec)
        }
        Format::Kcat => {
            let k: Kcat = sonic_rs::from_str(text).map_err(|_| Decline)?;
            if k.key_error
                .as_ref()
                .is_some_and(|e| !sonic_rs::JsonValueTrait::is_null(e))
                || k.payload_error
                    .as_ref()
                    .is_some_and(|e| !sonic_rs::JsonValueTrait::is_null(e))
            {
                return Err(Decline);
            }
            let mut rec = DumpRecord {
                partition: i32::try_from(k.partition.0).map_err(|_| Decline)?,
                offset: Some(k.offset.0),
                timestamp: k.ts.map(|v| v.0),
                key: k.key.required()?.map(|s| s.as_bytes().to_vec()),
                value: k.payload.required()?.map(|s| s.as_bytes().to_vec()),
                topic: k.topic,
                ..Default::default()
            };
            let headers = k.headers.unwrap_or_default();
            if !headers.len().is_multiple_of(2) {
                return Err(Decline);
            }
            for pair in headers.chunks(2) {
                let name = pair[0].as_deref().ok_or(Decline)?;
                let value = pair[1].as_deref().map(|v| v.as_bytes().to_vec());
                note_header(&mut rec, name, value);
            }
            Ok(rec)
        }
    }
}

/// Whether a line is blank (the readers skip those).
pub fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|b| b.is_ascii_whitespace() || *b == 0x0b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lossless_and_kcat_lines() {
        let line = br#"{"topic":"t","partition":2,"offset":7,"timestamp":null,"headers":[["__debezium.newkey","eyJpZCI6MX0="],["h",null]],"key_b64":"eyJpZCI6MX0=","value_b64":null}"#;
        let rec = parse_line(line, Format::Lossless).unwrap();
        assert_eq!((rec.partition, rec.offset), (2, Some(7)));
        assert_eq!(rec.key.as_deref(), Some(&br#"{"id":1}"#[..]));
        assert_eq!(rec.value, None);
        assert_eq!(rec.newkey, Some(Some(br#"{"id":1}"#.to_vec())));
        assert!(parse_line(
            br#"{"topic":"t","partition":2,"value_b64":null}"#,
            Format::Lossless
        )
        .is_err());
        let kcat = br#"{"topic":"t","partition":0,"offset":1,"tstype":"create","ts":5,"broker":1,"headers":["a","b"],"key":"{\"id\":1}","payload":null}"#;
        let rec = parse_line(kcat, Format::Kcat).unwrap();
        assert_eq!(rec.key.as_deref(), Some(&br#"{"id":1}"#[..]));
        assert!(rec.has_headers);
        // base64 as RFC 4648 writes it (padded, standard alphabet); anything else is declined
        // and read by the reference
        for (b64, want) in [
            ("eyJpZCI6MX0=", Some(&br#"{"id":1}"#[..])),
            ("", Some(&b""[..])),
            ("eyJpZCI6MX0", None),
            ("eyJpZC I6MX0=", None),
            ("eyJpZCI6MX0-", None),
        ] {
            let line = format!(
                r#"{{"topic":"t","partition":0,"offset":1,"timestamp":null,"headers":[],"key_b64":null,"value_b64":"{b64}"}}"#
            );
            let got = parse_line(line.as_bytes(), Format::Lossless).ok();
            assert_eq!(
                got.map(|r| r.value),
                want.map(|w| Some(w.to_vec())),
                "{b64}"
            );
        }
    }
}
