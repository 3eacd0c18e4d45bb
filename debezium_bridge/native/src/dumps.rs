//! Topic-dump lines (`formats/dumps.py`): our lossless JSON lines and `kcat -J` lines, parsed
//! natively so that `debezium-bridge convert` reads a dump without a Python object per record.
//! A line this module does not read exactly like the reference (kcat's map-form headers or
//! deserializer errors, non-UTF-8 lines, anything malformed) is declined: the Python reader
//! reads it and writes the dead letter of a bad line.
//!
//! Lossless lines as our writer lays them out (`write_lossless`: fixed member order, no
//! whitespace, headers as `[name, base64]` pairs) are read by [`Layout`] without a JSON parser:
//! the base64 members are most of a line's bytes and a JSON parser scans them byte by byte for
//! escapes, ~2 instructions per byte, while a base64 member can hold no quote, so `memchr`
//! finds its end at a fraction of that (callgrind, narrow schema-ful dump of ~3.9 KB lines:
//! the partition scan fell from ~19.7k to ~6.7k instructions per line, the conversion's read
//! of a line from ~17.6k to ~7.3k).
//! The layout reader accepts a subset of what [`parse_line`]'s JSON reader accepts, with the
//! same result (a proptest checks it on mutated lines); anything else, or any base64 member it
//! cannot decode (an escaped `\/` is valid JSON), goes to the JSON reader.

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

// Unknown members are declined (the Python reader ignores them, unless they hold what msgspec
// refuses: a lone surrogate escape, nesting deeper than it reads).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
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
    // the other members kcat writes (`json.c`), read and not used
    #[serde(borrow, default, rename = "tstype")]
    _tstype: Option<Cow<'a, str>>,
    #[serde(default, rename = "broker")]
    _broker: Option<StrictInt>,
    #[serde(default, rename = "key_schema_id")]
    _key_schema_id: Option<StrictInt>,
    #[serde(default, rename = "value_schema_id")]
    _value_schema_id: Option<StrictInt>,
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

/// A header of a lossless line: its name and base64 value (or `null`).
type Header<'a> = (&'a str, Option<&'a [u8]>);

/// A lossless line in the writer's own layout: the members as they stand in the line (the
/// base64 members still encoded).
struct Layout<'a> {
    topic: &'a str,
    partition: i32,
    offset: Option<i64>,
    timestamp: Option<i64>,
    headers: Vec<Header<'a>>,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
}

/// A cursor over a line in the writer's layout; every method returns `None` where the line
/// leaves that layout.
struct Cursor<'a> {
    line: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn eat(&mut self, token: &[u8]) -> Option<()> {
        let rest = self.line.get(self.at..)?;
        rest.starts_with(token).then(|| self.at += token.len())
    }

    /// A string member's raw text up to its closing quote (no escapes, no control characters).
    fn plain_string(&mut self) -> Option<&'a [u8]> {
        self.eat(b"\"")?;
        let rest = &self.line[self.at..];
        let end = memchr::memchr(b'"', rest)?;
        let text = &rest[..end];
        if text.iter().any(|&b| b < 0x20 || b == b'\\') {
            return None;
        }
        self.at += end + 1;
        Some(text)
    }

    /// A base64 member's text, `Some(None)` for `null` (`None` where the layout is left). Its
    /// bytes are checked by the base64 decoder; a quote cannot occur in them.
    fn base64_or_null(&mut self) -> Option<Option<&'a [u8]>> {
        if self.eat(b"null").is_some() {
            return Some(None);
        }
        self.eat(b"\"")?;
        let rest = &self.line[self.at..];
        let end = memchr::memchr(b'"', rest)?;
        self.at += end + 1;
        Some(Some(&rest[..end]))
    }

    /// A JSON integer in `i64` (no leading zeros, no fraction or exponent).
    fn int(&mut self) -> Option<i64> {
        let rest = &self.line[self.at..];
        let negative = rest.first() == Some(&b'-');
        let digits = &rest[negative as usize..];
        let n = digits.iter().take_while(|b| b.is_ascii_digit()).count();
        // no leading zeros; `-0` is left to the JSON reader (which declines it)
        if n == 0 || (digits[0] == b'0' && (n > 1 || negative)) {
            return None;
        }
        let mut value: i64 = 0;
        for &d in &digits[..n] {
            let d = i64::from(d - b'0');
            value = value.checked_mul(10)?;
            value = if negative {
                value.checked_sub(d)?
            } else {
                value.checked_add(d)?
            };
        }
        self.at += negative as usize + n;
        Some(value)
    }

    fn int_or_null(&mut self) -> Option<Option<i64>> {
        if self.eat(b"null").is_some() {
            return Some(None);
        }
        self.int().map(Some)
    }

    /// `[["name","base64"|null],...]` (names plain strings).
    fn headers(&mut self) -> Option<Vec<Header<'a>>> {
        self.eat(b"[")?;
        let mut pairs = Vec::new();
        if self.eat(b"]").is_some() {
            return Some(pairs);
        }
        loop {
            self.eat(b"[")?;
            let name = std::str::from_utf8(self.plain_string()?).ok()?;
            self.eat(b",")?;
            pairs.push((name, self.base64_or_null()?));
            self.eat(b"]")?;
            if self.eat(b",").is_none() {
                self.eat(b"]")?;
                return Some(pairs);
            }
        }
    }
}

impl<'a> Layout<'a> {
    fn read(line: &'a [u8]) -> Option<Layout<'a>> {
        let mut c = Cursor { line, at: 0 };
        c.eat(b"{\"topic\":")?;
        let topic = std::str::from_utf8(c.plain_string()?).ok()?;
        c.eat(b",\"partition\":")?;
        let partition = i32::try_from(c.int()?).ok()?;
        c.eat(b",\"offset\":")?;
        let offset = c.int_or_null()?;
        c.eat(b",\"timestamp\":")?;
        let timestamp = c.int_or_null()?;
        c.eat(b",\"headers\":")?;
        let headers = c.headers()?;
        c.eat(b",\"key_b64\":")?;
        let key = c.base64_or_null()?;
        c.eat(b",\"value_b64\":")?;
        let value = c.base64_or_null()?;
        c.eat(b"}")?;
        (c.at == line.len()).then_some(Layout {
            topic,
            partition,
            offset,
            timestamp,
            headers,
            key,
            value,
        })
    }

    /// The record, base64 members decoded (`None` if one does not decode: the JSON reader
    /// then reads the line, where an escape may make it valid).
    fn record(&self) -> Option<DumpRecord<'a>> {
        let decode = |t: Option<&[u8]>| match t {
            Some(t) => base64_simd::STANDARD.decode_to_vec(t).ok().map(Some),
            None => Some(None),
        };
        let mut rec = DumpRecord {
            topic: Cow::Borrowed(self.topic),
            partition: self.partition,
            offset: self.offset,
            timestamp: self.timestamp,
            key: decode(self.key)?,
            value: decode(self.value)?,
            ..Default::default()
        };
        for &(name, value) in &self.headers {
            note_header(&mut rec, name, decode(value)?);
        }
        Some(rec)
    }

    /// Whether the line is a record (its base64 members decode), without decoding them; with
    /// the first `head` bytes of the value, decoded.
    fn check(&self, head: usize) -> Option<Vec<u8>> {
        let valid = |t: Option<&[u8]>| t.is_none_or(|t| base64_simd::STANDARD.check(t).is_ok());
        if !valid(self.key) || !valid(self.value) || !self.headers.iter().all(|h| valid(h.1)) {
            return None;
        }
        let value = self.value.unwrap_or_default();
        let prefix = &value[..value.len().min(head.div_ceil(3) * 4)];
        base64_simd::STANDARD.decode_to_vec(prefix).ok()
    }
}

/// The topic, partition and first `head` decoded value bytes of a line that [`parse_line`]
/// reads as a record (the partition scan), without decoding the rest where the line is in the
/// writer's layout.
pub fn scan_line(line: &[u8], format: Format, head: usize) -> Result<(Cow<'_, str>, i32, Vec<u8>)> {
    if format == Format::Lossless {
        if let Some(layout) = Layout::read(line) {
            if let Some(value) = layout.check(head) {
                return Ok((Cow::Borrowed(layout.topic), layout.partition, value));
            }
        }
    }
    let mut rec = parse_line(line, format)?;
    let mut value = rec.value.take().unwrap_or_default();
    value.truncate(head);
    Ok((rec.topic, rec.partition, value))
}

/// One non-blank line (without its line terminator).
pub fn parse_line(line: &[u8], format: Format) -> Result<DumpRecord<'_>> {
    if format == Format::Lossless {
        if let Some(rec) = Layout::read(line).and_then(|l| l.record()) {
            return Ok(rec);
        }
    }
    parse_json_line(line, format)
}

/// [`parse_line`] through the JSON reader.
fn parse_json_line(line: &[u8], format: Format) -> Result<DumpRecord<'_>> {
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

    #[test]
    fn the_layout_reader_leaves_every_other_line_to_the_json_reader() {
        let line = |partition: &str, rest: &str| {
            format!(
                r#"{{"topic":"t.a.b","partition":{partition},"offset":3,"timestamp":null,"headers":[{rest}],"key_b64":null,"value_b64":"eyJpZCI6MX0="}}"#
            )
        };
        let read = |l: &str| {
            Layout::read(l.as_bytes())
                .and_then(|l| l.record())
                .map(fields)
        };
        let json = |l: &str| {
            parse_json_line(l.as_bytes(), Format::Lossless)
                .ok()
                .map(fields)
        };
        let plain = line("2", "");
        assert_eq!(read(&plain), json(&plain));
        assert!(read(&plain).is_some());
        let with_header = line("2", r#"["__debezium.oldkey","eyJpZCI6MX0="],["h",null]"#);
        assert_eq!(read(&with_header), json(&with_header));
        assert_eq!(
            read(&with_header).unwrap().8,
            Some(Some(br#"{"id":1}"#.to_vec()))
        );
        for odd in [
            line("02", ""),
            line("-0", ""),
            line("2147483648", ""),
            line("2.0", ""),
            line("2e0", ""),
            line(" 2", ""),
            line("2", r#"["h\u0041",null]"#),
            line("2", r#"["h","eyJp\/CI6MX0="]"#),
            plain.replace(r#""t.a.b""#, r#""t.\u0061.b""#),
            plain.replace(r#""offset":3,"#, ""),
            plain.replace(
                r#""offset":3,"timestamp":null"#,
                r#""timestamp":null,"offset":3"#,
            ),
            plain.replace("eyJpZCI6MX0=", "eyJpZCI6MX0"),
            plain.replace("eyJpZCI6MX0=", r"ey\/pZCI6MX0="),
            plain.replace('}', "} "),
        ] {
            assert_eq!(read(&odd), None, "{odd}");
            let scanned = Layout::read(odd.as_bytes()).and_then(|l| l.check(600));
            assert_eq!(scanned, None, "{odd}");
        }
    }

    /// The fields of a record, comparable.
    type Fields = (
        String,
        i32,
        Option<i64>,
        Option<i64>,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        bool,
        Option<Option<Vec<u8>>>,
        Option<Option<Vec<u8>>>,
    );

    fn fields(r: DumpRecord<'_>) -> Fields {
        (
            r.topic.into_owned(),
            r.partition,
            r.offset,
            r.timestamp,
            r.key,
            r.value,
            r.has_headers,
            r.newkey,
            r.oldkey,
        )
    }

    /// A lossless line as `write_lossless` writes it (msgspec: members in order, no spaces).
    fn writer_line(
        topic: &str,
        partition: i64,
        offset: Option<i64>,
        headers: &[(String, Option<Vec<u8>>)],
        key: &Option<Vec<u8>>,
        value: &Option<Vec<u8>>,
    ) -> String {
        let b64 = |v: &Option<Vec<u8>>| match v {
            Some(v) => format!("\"{}\"", base64_simd::STANDARD.encode_to_string(v)),
            None => "null".to_string(),
        };
        let headers: Vec<String> = headers
            .iter()
            .map(|(n, v)| format!("[{},{}]", sonic_rs::to_string(n).unwrap(), b64(v)))
            .collect();
        format!(
            r#"{{"topic":{},"partition":{partition},"offset":{},"timestamp":null,"headers":[{}],"key_b64":{},"value_b64":{}}}"#,
            sonic_rs::to_string(topic).unwrap(),
            offset.map_or("null".to_string(), |o| o.to_string()),
            headers.join(","),
            b64(key),
            b64(value),
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 3000, ..Default::default() })]

        /// The layout reader reads a line as the JSON reader does, or leaves it to it: on
        /// writer lines and on lines with bytes replaced, inserted or removed (mostly in the
        /// short members before the base64 ones).
        #[test]
        fn the_layout_reader_agrees_with_the_json_reader(
            topic in "[a-z.\"\\\\\u{1}é_-]{0,12}",
            partition in proptest::prelude::prop_oneof![-3i64..5, proptest::prelude::Just(1i64 << 31), proptest::prelude::Just(i64::MIN)],
            offset in proptest::option::of(proptest::prelude::any::<i64>()),
            headers in proptest::collection::vec(
                (proptest::prelude::prop_oneof!["__debezium.newkey", "__debezium.oldkey", "[a-z\"]{0,4}"],
                 proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..6))),
                0..3),
            key in proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20)),
            value in proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..900)),
            edits in proptest::collection::vec((proptest::prelude::prop_oneof![0usize..120, proptest::prelude::any::<usize>()], 0usize..3,
                proptest::sample::select(b"\"\\,0-1 =A/}]}[n\x01\xc3+".to_vec())), 0..3),
        ) {
            let line = writer_line(&topic, partition, offset, &headers, &key, &value);
            let mut bytes = line.into_bytes();
            for (at, how, byte) in edits {
                let at = at % (bytes.len() + 1);
                match how {
                    0 if at < bytes.len() => bytes[at] = byte,
                    1 => bytes.insert(at, byte),
                    _ if at < bytes.len() => { bytes.remove(at); }
                    _ => {}
                }
            }
            let json = parse_json_line(&bytes, Format::Lossless).ok().map(fields);
            if let Some(layout) = Layout::read(&bytes) {
                if let Some(rec) = layout.record() {
                    proptest::prop_assert_eq!(Some(fields(rec)), json.clone());
                }
                if let Some(head) = layout.check(600) {
                    let json = json.clone().expect("the JSON reader reads it too");
                    let mut want = json.5.unwrap_or_default();
                    want.truncate(600);
                    proptest::prop_assert_eq!((layout.topic.to_string(), layout.partition, head),
                                              (json.0, json.1, want));
                }
            }
            let parsed = parse_line(&bytes, Format::Lossless).ok().map(fields);
            proptest::prop_assert_eq!(parsed, json.clone());
            let scanned = scan_line(&bytes, Format::Lossless, 600).ok()
                .map(|(t, p, h)| (t.into_owned(), p, h));
            let want = json.map(|j| {
                let mut v = j.5.unwrap_or_default();
                v.truncate(600);
                (j.0, j.1, v)
            });
            proptest::prop_assert_eq!(scanned, want);
        }
    }
}
