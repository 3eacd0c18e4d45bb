//! Kafka Connect row schemas (JsonConverter `schema` objects, and the Connect view of Avro
//! writer schemas) compiled once per table version into per-column checks and converters that
//! give exactly the canonical values of `debezium_bridge.formats.debezium.logical`.
//!
//! Only what is decoded the same way as the reference is accepted; a value that fails a check
//! or needs a conversion not written here ([`Conv::Decline`]: VariableScaleDecimal, decimals
//! sent as JSON numbers) declines the record, and the Python reference decodes it (and writes
//! the dead letter when it is bad input).

use crate::jsonw;
use crate::value::{Decline, Num, Result};
use base64::Engine;
use sonic_rs::{JsonContainerTrait, JsonValueTrait};
use std::sync::Arc;

const MAX_PRECISION: i64 = 38;

/// Room on the stack for a decoded base64 value: decimals and short binary values (a heap
/// buffer per value, zeroed by the base64 crate, cost ~250 instructions; callgrind
/// 2026-11-28).
const BASE64_ROOM: usize = 96;

/// Standard base64 `text` decoded (padding and trailing bits checked as the base64 crate's
/// `STANDARD` checks them), into `room` when it fits. base64-simd: the base64 crate spent ~290
/// instructions on a decimal's dozen characters (callgrind 2026-11-28); the two accept and
/// decode the same texts (`tests::base64_simd_reads_as_the_base64_crate`).
fn decode_base64<'r>(
    text: &str,
    room: &'r mut [u8; BASE64_ROOM],
) -> Result<std::borrow::Cow<'r, [u8]>> {
    let engine = &base64_simd::STANDARD;
    if text.len() / 4 * 3 <= BASE64_ROOM {
        let bytes = engine
            .decode(text.as_bytes(), base64_simd::Out::from_slice(room))
            .map_err(|_| Decline)?;
        return Ok(std::borrow::Cow::Borrowed(bytes));
    }
    engine
        .decode_to_vec(text.as_bytes())
        .map(std::borrow::Cow::Owned)
        .map_err(|_| Decline)
}

/// URL-safe base64, padded or not (the reference pads before decoding).
const URL_SAFE_ANY_PADDING: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);
/// 2^128 - 2^103, the least magnitude a float32 rounds to infinity (`_FLOAT32_LIMIT`): FLT_MAX
/// as Jackson writes it (`3.4028235E38`) is above FLT_MAX as a double, below this.
const FLOAT32_LIMIT: f64 = 3.4028235677973366e38;

/// An ISO time or timestamp (`…hh:mm:ss[.f…]`) with its fraction padded to `digits` when it
/// has fewer (`_iso_at_scale`: Java's ISO formats drop trailing zeros); `None`: as it is.
fn iso_at_scale(text: &str, digits: usize) -> Option<String> {
    let b = text.as_bytes();
    let first_digit = b.len() - b.iter().rev().take_while(|c| c.is_ascii_digit()).count();
    let (seconds_end, fraction) = match first_digit.checked_sub(1) {
        Some(dot) if b[dot] == b'.' => (dot, b.len() - first_digit),
        _ => (b.len(), 0),
    };
    let seconds = b.get(seconds_end.checked_sub(8)?..seconds_end)?;
    let shape = seconds.iter().enumerate().all(|(i, c)| match i {
        2 | 5 => *c == b':',
        _ => c.is_ascii_digit(),
    });
    if !shape || fraction >= digits {
        return None;
    }
    let mut padded = String::with_capacity(seconds_end + 1 + digits);
    padded.push_str(&text[..seconds_end]);
    padded.push('.');
    padded.push_str(&text[b.len() - fraction..]);
    padded.extend(std::iter::repeat_n('0', digits - fraction));
    Some(padded)
}

/// The type check of a column (the reference's `_TYPE_CHECKS`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Check {
    None,
    Int(i64, i64),
    Float32,
    Float64,
    Bool,
    Str,
    Array,
    Map,
    Struct,
}

/// The conversion of a column (the reference's `converter_for`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Conv {
    None,
    Decimal {
        scale: u32,
        precision: u32,
    },
    Timestamp {
        unit: i64,
        full: u32,
        digits: u32,
    },
    Time {
        unit: i64,
        full: u32,
        digits: u32,
    },
    Date,
    /// An ISO date, time or timestamp string in UTC; times padded to the propagated scale.
    IsoUtc {
        digits: Option<u32>,
    },
    Base64Bytes,
    Float32,
    BinaryHex,
    BinaryUrlSafe,
    /// A `decimal.handling.mode=string` decimal (source type propagated), E-notation made plain.
    DecimalText,
    DoubleScale(u32),
    /// A conversion the native path leaves to the reference (every non-null value declines).
    Decline,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Marker {
    None,
    Text,
    Binary,
}

#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub check: Check,
    pub conv: Conv,
    pub marker: Marker,
}

/// One compiled table version.
#[derive(Debug)]
pub struct Table {
    pub columns: Vec<Column>,
    pub order: Arc<[String]>,
    index: hashbrown::HashMap<String, usize>,
    /// No name is repeated: a column found at its expected position is the one `index` names.
    unique: bool,
}

/// The decoder settings that change what values mean.
#[derive(Debug, Clone)]
pub struct Options {
    pub placeholder: String,
    pub placeholder_b64: String,
    pub binary_mode: BinaryMode,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BinaryMode {
    Bytes,
    Base64,
    Base64UrlSafe,
    Hex,
}

impl Options {
    pub fn new(placeholder: &str, binary_mode: BinaryMode) -> Self {
        Options {
            placeholder: placeholder.to_string(),
            placeholder_b64: base64::engine::general_purpose::STANDARD.encode(placeholder),
            binary_mode,
        }
    }
}

fn scale_text(text: &str) -> Option<i64> {
    // the reference's `[+-]?[0-9]{1,18}` full match, then int()
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || digits.len() > 18 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<i64>().ok()
}

/// Parameters as the reference stringifies them (`str(v)`): text and integers only here.
pub fn param_text(v: &sonic_rs::Value) -> Result<String> {
    if let Some(s) = v.as_str() {
        return Ok(s.to_string());
    }
    if v.is_number() && !v.is_f64() {
        if let Some(i) = v.as_i64() {
            return Ok(i.to_string());
        }
        if let Some(u) = v.as_u64() {
            return Ok(u.to_string());
        }
    }
    Err(Decline)
}

/// Connect schema parameters as `(name, str(value))` pairs.
pub type Params = Vec<(String, String)>;

/// A Connect schema's semantic name and parameters (JSON schemas: `name`/`parameters`; Avro
/// schemas: `connect.name`/`connect.parameters`); null is absent, anything else odd declines.
pub fn semantic_and_params<'v>(
    name: Option<&'v sonic_rs::Value>,
    parameters: Option<&sonic_rs::Value>,
) -> Result<(Option<&'v str>, Params)> {
    let semantic = match name {
        Some(v) if !v.is_null() => Some(v.as_str().ok_or(Decline)?),
        _ => None,
    };
    let mut params = Vec::new();
    if let Some(p) = parameters.filter(|p| !p.is_null()) {
        for (k, v) in p.as_object().ok_or(Decline)?.iter() {
            params.push((k.to_string(), param_text(v)?));
        }
    }
    Ok((semantic, params))
}

/// One column from its Connect type name, semantic name and parameters.
pub fn column(
    name: &str,
    connect_type: &str,
    semantic: Option<&str>,
    params: &[(String, String)],
    opts: &Options,
) -> Result<Column> {
    let param = |key: &str| {
        params
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let check = match connect_type {
        "int8" => Check::Int(-(1 << 7), (1 << 7) - 1),
        "int16" => Check::Int(-(1 << 15), (1 << 15) - 1),
        "int32" => Check::Int(-(1 << 31), (1 << 31) - 1),
        "int64" => Check::Int(i64::MIN, i64::MAX),
        "float32" => Check::Float32,
        "float64" => Check::Float64,
        "boolean" => Check::Bool,
        "string" => Check::Str,
        "bytes" => Check::None,
        "array" => Check::Array,
        "map" => Check::Map,
        "struct" => Check::Struct,
        _ => return Err(Decline),
    };
    let source_type = param("__debezium.source.column.type")
        .filter(|t| !t.is_empty())
        .map(|t| t.to_uppercase());
    let source_scale = |highest: i64| -> Result<Option<u32>> {
        match param("__debezium.source.column.scale") {
            None | Some("") => Ok(None),
            Some(text) => {
                let scale = scale_text(text).ok_or(Decline)?;
                if !(0..=highest).contains(&scale) {
                    return Err(Decline);
                }
                Ok(Some(scale as u32))
            }
        }
    };
    let timed = |unit: i64, full: u32, digits: u32, time: bool| -> Result<Conv> {
        let digits = source_scale(9)?.unwrap_or(digits);
        Ok(if time {
            Conv::Time { unit, full, digits }
        } else {
            Conv::Timestamp { unit, full, digits }
        })
    };
    let conv = match semantic {
        Some("org.apache.kafka.connect.data.Decimal") => {
            let scale = scale_text(param("scale").ok_or(Decline)?).ok_or(Decline)?;
            let precision = match param("connect.decimal.precision") {
                None => MAX_PRECISION,
                Some(text) => scale_text(text).ok_or(Decline)?,
            };
            if !(1..=MAX_PRECISION).contains(&precision) || !(0..=precision).contains(&scale) {
                return Err(Decline);
            }
            Conv::Decimal {
                scale: scale as u32,
                precision: precision as u32,
            }
        }
        Some("io.debezium.data.VariableScaleDecimal") => Conv::Decline,
        Some("io.debezium.time.Timestamp") | Some("org.apache.kafka.connect.data.Timestamp") => {
            timed(1_000, 3, 3, false)?
        }
        Some("io.debezium.time.MicroTimestamp") => timed(1_000_000, 6, 6, false)?,
        Some("io.debezium.time.NanoTimestamp") => timed(1_000_000_000, 9, 7, false)?,
        Some("io.debezium.time.Time") | Some("org.apache.kafka.connect.data.Time") => {
            timed(1_000, 3, 3, true)?
        }
        Some("io.debezium.time.MicroTime") => timed(1_000_000, 6, 6, true)?,
        Some("io.debezium.time.NanoTime") => timed(1_000_000_000, 9, 7, true)?,
        Some("io.debezium.time.Date") | Some("org.apache.kafka.connect.data.Date") => Conv::Date,
        Some("io.debezium.time.IsoDate") => Conv::IsoUtc { digits: None },
        Some("io.debezium.time.IsoTime") | Some("io.debezium.time.IsoTimestamp") => Conv::IsoUtc {
            digits: source_scale(9)?,
        },
        _ if connect_type == "bytes" => Conv::Base64Bytes,
        _ if connect_type == "float32" => Conv::Float32,
        _ if connect_type == "string"
            && matches!(
                source_type.as_deref(),
                Some("BINARY" | "VARBINARY" | "IMAGE" | "TIMESTAMP" | "ROWVERSION")
            ) =>
        {
            match opts.binary_mode {
                BinaryMode::Hex => Conv::BinaryHex,
                BinaryMode::Base64UrlSafe => Conv::BinaryUrlSafe,
                _ => Conv::None,
            }
        }
        _ if connect_type == "string"
            && matches!(
                source_type.as_deref(),
                Some("DECIMAL" | "NUMERIC" | "MONEY" | "SMALLMONEY")
            ) =>
        {
            Conv::DecimalText
        }
        _ if connect_type == "float64"
            && matches!(
                source_type.as_deref(),
                Some("DECIMAL" | "NUMERIC" | "MONEY" | "SMALLMONEY")
            ) =>
        {
            match source_scale(MAX_PRECISION)? {
                Some(scale) => Conv::DoubleScale(scale),
                None => Conv::None,
            }
        }
        _ => Conv::None,
    };
    let check = if matches!(conv, Conv::Decimal { .. }) {
        Check::None
    } else {
        check
    };
    let marker = match connect_type {
        "string" => Marker::Text,
        "bytes" => Marker::Binary,
        _ => Marker::None,
    };
    Ok(Column {
        name: name.to_string(),
        check,
        conv,
        marker,
    })
}

fn connect_type_from_json(name: &str) -> Option<&'static str> {
    Some(match name {
        "int8" => "int8",
        "int16" => "int16",
        "int32" => "int32",
        "int64" => "int64",
        "float" | "float32" => "float32",
        "double" | "float64" => "float64",
        "boolean" => "boolean",
        "string" => "string",
        "bytes" => "bytes",
        "array" => "array",
        "map" => "map",
        "struct" => "struct",
        _ => return None,
    })
}

impl Table {
    pub fn new(columns: Vec<Column>) -> Self {
        let order: Arc<[String]> = columns.iter().map(|c| c.name.clone()).collect();
        let mut index = hashbrown::HashMap::with_capacity(columns.len());
        for (i, c) in columns.iter().enumerate() {
            index.insert(c.name.clone(), i); // a repeated name: the last column decides
        }
        let unique = index.len() == columns.len();
        Table {
            columns,
            order,
            index,
            unique,
        }
    }

    #[inline]
    pub fn find(&self, name: &str, hint: usize) -> Option<usize> {
        if let Some(c) = self.columns.get(hint) {
            if c.name == name && (self.unique || self.index.get(name) == Some(&hint)) {
                return Some(hint);
            }
        }
        self.index.get(name).copied()
    }

    /// A row struct from a JsonConverter struct schema (`table_from_connect`).
    pub fn from_connect(schema: &sonic_rs::Value, opts: &Options) -> Result<Table> {
        if schema.get("type").and_then(|t| t.as_str()) != Some("struct") {
            return Err(Decline);
        }
        if let Some(name) = schema.get("name") {
            if !name.is_null() && !name.is_str() {
                return Err(Decline);
            }
        }
        let fields = schema
            .get("fields")
            .and_then(|f| f.as_array())
            .ok_or(Decline)?;
        let mut columns = Vec::with_capacity(fields.len());
        let mut names = hashbrown::HashSet::with_capacity(fields.len());
        for field in fields.iter() {
            let name = field.get("field").and_then(|v| v.as_str()).ok_or(Decline)?;
            if !names.insert(name) {
                return Err(Decline); // a field listed twice: the reference's schema error
            }
            let type_name = field.get("type").and_then(|v| v.as_str()).ok_or(Decline)?;
            let connect_type = connect_type_from_json(type_name).ok_or(Decline)?;
            let (semantic, params) =
                semantic_and_params(field.get("name"), field.get("parameters"))?;
            columns.push(column(name, connect_type, semantic, &params, opts)?);
        }
        Ok(Table::new(columns))
    }

    /// The row struct of a JsonConverter envelope schema (`_envelope_row_schema`): `Ok(None)`
    /// for a null schema or an envelope without `before`/`after` fields (schema-less rows).
    pub fn from_envelope_schema(raw: &str, opts: &Options) -> Result<Option<Table>> {
        let schema: sonic_rs::Value = sonic_rs::from_str(raw).map_err(|_| Decline)?;
        if schema.is_null() {
            return Ok(None);
        }
        if schema.get("type").and_then(|t| t.as_str()) != Some("struct") {
            return Err(Decline);
        }
        let fields = schema
            .get("fields")
            .and_then(|f| f.as_array())
            .ok_or(Decline)?;
        for field in fields.iter() {
            if field.is_object() {
                if let Some(name) = field.get("field").and_then(|f| f.as_str()) {
                    if name == "after" || name == "before" {
                        return Table::from_connect(field, opts).map(Some);
                    }
                }
            }
        }
        Ok(None)
    }
}

// ------------------------------------------------------------------ value conversion

/// One parsed column value: scalars as the parser gave them; arrays and objects already
/// written (canonical) to the output, with their opening bracket.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar<'a> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(std::borrow::Cow<'a, str>),
    Nested(u8),
}

impl Scalar<'_> {
    /// The canonical bytes of a scalar (nested values are written already).
    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            Scalar::Null => out.extend_from_slice(b"null"),
            Scalar::Bool(true) => out.extend_from_slice(b"true"),
            Scalar::Bool(false) => out.extend_from_slice(b"false"),
            Scalar::Int(v) => jsonw::write_i64(out, *v),
            Scalar::UInt(v) => jsonw::write_u64(out, *v),
            Scalar::Float(v) => {
                jsonw::write_f64(out, *v);
            }
            Scalar::Str(s) => jsonw::write_str(out, s),
            Scalar::Nested(_) => {}
        }
    }

    fn number(&self) -> Option<Num> {
        match self {
            Scalar::Int(v) => Some(Num::Int(*v)),
            Scalar::UInt(v) => Some(Num::UInt(*v)),
            Scalar::Float(v) => Some(Num::Float(*v)),
            _ => None,
        }
    }
}

/// Whether the value passes the column's type check (else the reference raises).
fn check(c: Check, v: &Scalar<'_>) -> Result<()> {
    let ok = match c {
        Check::None => true,
        Check::Int(lo, hi) => matches!(v, Scalar::Int(i) if lo <= *i && *i <= hi),
        Check::Float32 => match v {
            Scalar::Float(f) => f.abs() < FLOAT32_LIMIT, // (infinities: the reference decides)
            Scalar::Int(i) => (*i as f64).abs() < FLOAT32_LIMIT,
            Scalar::UInt(u) => (*u as f64) < FLOAT32_LIMIT,
            _ => false,
        },
        Check::Float64 => matches!(v, Scalar::Float(_) | Scalar::Int(_) | Scalar::UInt(_)),
        Check::Bool => matches!(v, Scalar::Bool(_)),
        Check::Str => matches!(v, Scalar::Str(_)),
        Check::Array => matches!(v, Scalar::Nested(b'[')),
        Check::Map => matches!(v, Scalar::Nested(_)),
        Check::Struct => matches!(v, Scalar::Nested(b'{')),
    };
    if ok {
        Ok(())
    } else {
        Err(Decline)
    }
}

/// Decide one column value: `Ok(true)` = placeholder (unavailable, written as null).
pub fn convert(col: &Column, v: Scalar<'_>, opts: &Options, out: &mut Vec<u8>) -> Result<bool> {
    if v == Scalar::Null {
        out.extend_from_slice(b"null");
        return Ok(false);
    }
    check(col.check, &v)?;
    if let (Marker::Text | Marker::Binary, Scalar::Str(text)) = (col.marker, &v) {
        let marker = if col.marker == Marker::Text {
            &opts.placeholder
        } else {
            &opts.placeholder_b64
        };
        if **text == **marker {
            out.extend_from_slice(b"null");
            return Ok(true);
        }
    }
    let int_value = |v: &Scalar<'_>| match v {
        Scalar::Int(i) => Ok(*i),
        _ => Err(Decline),
    };
    fn text_of<'s>(v: &'s Scalar<'_>) -> Result<&'s str> {
        match v {
            Scalar::Str(s) => Ok(s),
            _ => Err(Decline),
        }
    }
    let text = text_of;
    match col.conv {
        Conv::None => v.write(out),
        Conv::Decline => return Err(Decline),
        Conv::Decimal { scale, precision } => {
            // numbers (decimal.format=NUMERIC) are rounded by the reference: declined
            let text = text(&v)?;
            let mut room = [0u8; BASE64_ROOM];
            let bytes = decode_base64(text, &mut room)?;
            write_decimal(&bytes, scale, precision, out)?;
        }
        Conv::Timestamp { unit, full, digits } => {
            let (seconds, sub) = div_rem_euclid(int_value(&v)?, unit);
            let days = seconds.div_euclid(86_400);
            let secs = seconds.rem_euclid(86_400);
            let date = date_text(days)?;
            write_moment(Some(date), secs, fraction_text(sub, full, digits), out);
        }
        Conv::Time { unit, full, digits } => {
            let v = int_value(&v)?;
            if !(0..=86_400 * unit).contains(&v) {
                return Err(Decline);
            }
            let (secs, sub) = div_rem_euclid(v, unit);
            write_moment(None, secs, fraction_text(sub, full, digits), out);
        }
        Conv::Date => {
            let date = date_text(int_value(&v)?)?;
            let mut text = [b'"'; 12];
            text[1..11].copy_from_slice(&date);
            out.extend_from_slice(&text);
        }
        Conv::IsoUtc { digits } => {
            let text = text(&v)?;
            let trimmed = text
                .strip_suffix('Z')
                .or_else(|| text.strip_suffix("+00:00"))
                .unwrap_or(text);
            match digits.and_then(|d| iso_at_scale(trimmed, d as usize)) {
                Some(padded) => jsonw::write_str(out, &padded),
                None => jsonw::write_str(out, trimmed),
            }
        }
        Conv::Base64Bytes => {
            let text = text(&v)?;
            let mut room = [0u8; BASE64_ROOM];
            decode_base64(text, &mut room)?;
            jsonw::write_str(out, text);
        }
        Conv::Float32 => match v {
            Scalar::Float(f) => {
                write_float32(out, f);
            }
            other => other.write(out),
        },
        Conv::BinaryHex => {
            let text = text(&v)?;
            let b = text.as_bytes();
            if b.len() % 2 != 0 {
                return Err(Decline);
            }
            // hex digits only (`from_str_radix` would take a `+` sign); anything else, such as
            // the whitespace `bytes.fromhex` skips, goes to the reference
            let digit = |d: u8| char::from(d).to_digit(16).ok_or(Decline);
            let mut bytes = Vec::with_capacity(b.len() / 2);
            for pair in b.chunks(2) {
                bytes.push((digit(pair[0])? * 16 + digit(pair[1])?) as u8);
            }
            jsonw::write_base64(out, &bytes);
        }
        Conv::BinaryUrlSafe => {
            let text = text(&v)?;
            let bytes = URL_SAFE_ANY_PADDING
                .decode(text.as_bytes())
                .map_err(|_| Decline)?;
            jsonw::write_base64(out, &bytes);
        }
        Conv::DecimalText => {
            let text = text(&v)?;
            match plain_decimal(text.as_bytes()).ok_or(Decline)? {
                None => jsonw::write_str(out, text),
                Some(plain) => jsonw::write_str(out, &plain),
            }
        }
        Conv::DoubleScale(scale) => {
            let f = match v.number().ok_or(Decline)? {
                Num::Float(f) => f,
                Num::Int(i) => i as f64,
                Num::UInt(u) => u as f64,
            };
            out.push(b'"');
            out.extend_from_slice(format!("{:.*}", scale as usize, f).as_bytes());
            out.push(b'"');
        }
    }
    Ok(false)
}

/// A decimal text as the reference's `_decimal_text` reads it: `Some(None)` for a plain
/// decimal (written as sent), `Some(Some(plain))` for E-notation (`BigDecimal.toString()` of
/// connectors before 1.9: the same digits and scale, plain), `None` for anything else (declined:
/// the reference refuses it).
fn plain_decimal(text: &[u8]) -> Option<Option<String>> {
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    let (negative, body) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let (mantissa, exponent) = match body.iter().position(|&b| b == b'E' || b == b'e') {
        Some(at) => (&body[..at], Some(&body[at + 1..])),
        None => (body, None),
    };
    let (whole, fraction) = match mantissa.iter().position(|&b| b == b'.') {
        Some(at) => (&mantissa[..at], &mantissa[at + 1..]),
        None => (mantissa, &b""[..]),
    };
    if !digits(whole) || !(fraction.is_empty() || digits(fraction)) || mantissa.ends_with(b".") {
        return None;
    }
    let Some(exponent) = exponent else {
        return Some(None);
    };
    let exponent_digits = exponent
        .strip_prefix(b"+")
        .or_else(|| exponent.strip_prefix(b"-"));
    let unsigned = exponent_digits.unwrap_or(exponent);
    if !digits(unsigned) || unsigned.len() > 3 {
        return None;
    }
    let magnitude: i64 = std::str::from_utf8(unsigned).ok()?.parse().ok()?;
    let exponent = if exponent.first() == Some(&b'-') {
        -magnitude
    } else {
        magnitude
    };
    let mut coefficient: Vec<u8> = whole.iter().chain(fraction).copied().collect();
    let leading = coefficient.iter().take_while(|&&d| d == b'0').count();
    coefficient.drain(..leading);
    let scale = fraction.len() as i64 - exponent;
    if coefficient.len() as i64 > MAX_PRECISION || scale.abs() > MAX_PRECISION {
        return None;
    }
    let mut plain = String::new();
    if negative && !coefficient.is_empty() {
        plain.push('-');
    }
    if coefficient.is_empty() {
        coefficient.push(b'0');
    }
    let digits = std::str::from_utf8(&coefficient).ok()?;
    if scale <= 0 {
        plain.push_str(if digits == "0" { "0" } else { digits });
        if digits != "0" {
            plain.extend(std::iter::repeat_n('0', scale.unsigned_abs() as usize));
        }
    } else {
        let scale = scale as usize;
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (int_part, frac_part) = padded.split_at(padded.len() - scale);
        plain.push_str(int_part);
        plain.push('.');
        plain.push_str(frac_part);
    }
    Some(Some(plain))
}

/// A float32 column value as the reference writes it: the float whose shortest text of 6 to 9
/// significant digits reads back as the same float32 (`_float32`), as msgspec writes floats.
pub fn write_float32(out: &mut Vec<u8>, v: f64) {
    let shortest = (v.is_finite() && v != 0.0).then(|| {
        let mut buf = ryu::Buffer::new();
        jsonw::Digits::of_text(buf.format_finite(v.abs()).as_bytes())
    });
    write_float32_digits(out, v, shortest);
}

/// [`write_float32`] of the float a JSON text reads as, when the text is its value's shortest
/// text ([`crate::scan::short_float_len`]): its digits are ryu's, and its value is one
/// multiplication or division of them (at most 15 digits, exponent within ±18).
pub fn write_float32_short(out: &mut Vec<u8>, text: &[u8]) {
    let negative = text.first() == Some(&b'-');
    let shortest = jsonw::Digits::of_text(&text[usize::from(negative)..]);
    let q = shortest
        .ascii()
        .iter()
        .fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0'));
    let magnitude = decimal_value(q, shortest.point() - shortest.ascii().len() as i32);
    let v = if negative { -magnitude } else { magnitude };
    debug_assert_eq!(
        Ok(v),
        std::str::from_utf8(text).unwrap_or("").parse::<f64>()
    );
    write_float32_digits(out, v, Some(shortest));
}

fn write_float32_digits(out: &mut Vec<u8>, v: f64, shortest: Option<jsonw::Digits>) {
    match shortest.and_then(|s| float32_digits(v, s)) {
        Some(digits) => digits.write(out, v < 0.0),
        None => {
            jsonw::write_f64(out, search_f32(v));
        }
    }
}

/// 10^0 ..= 10^22, the powers of ten a double holds exactly.
const EXACT_POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The double nearest `q × 10^exp`, as parsing its text gives. Where `q` and `10^|exp|` are
/// both exact doubles (`q` < 2^53, |exp| ≤ 22), one multiplication or division rounds the exact
/// value once, correctly (Clinger's fast path); otherwise the text is parsed.
fn decimal_value(q: u64, exp: i32) -> f64 {
    if q < 1 << 53 {
        if let Some(&scale) = EXACT_POW10.get(exp.unsigned_abs() as usize) {
            return if exp >= 0 {
                q as f64 * scale
            } else {
                q as f64 / scale
            };
        }
    }
    format!("{q}e{exp}").parse().unwrap_or(f64::NAN)
}

/// The digits of the reference's answer for a float32 value `v` (the digits of `|v|`),
/// computed from `v`'s shortest round-trip digits (ryu) instead of six to nine exact
/// formattings and parses. Rounding `v` to `p` significant digits gives the same digits as
/// rounding its shortest text `s` to `p` digits unless a half-way point of the `p`-digit grid
/// lies between `s` and `v` or on `s`: it cannot lie strictly between (it would be a text of at
/// most `p + 1` digits at least as close to `v` as `s`, so ryu would have chosen it or one
/// shorter); on `s`, `v`'s exact binary value decides — above or below `s` rounds away or
/// toward zero, equal is a tie, rounded to even digits as the formatting does (values such as
/// `-15905.875`, exact in binary, are ties at 7 digits). With `p` at least the length of `s`,
/// the rounding is `s` itself, which reads back as `v`. A rounding that reads back is written
/// with its own digits: a double nearest a decimal of at most 9 digits has that decimal as its
/// only shortest text (two such decimals are further apart than a double's spacing).
/// `shortest`: the digits of `|v|`'s shortest text (finite, not zero). `None`: left to
/// [`search_f32`].
fn float32_digits(v: f64, shortest: jsonw::Digits) -> Option<jsonw::Digits> {
    let target = (v as f32).to_bits();
    let digits = shortest.ascii();
    let n = digits.len();
    for p in 6..=9usize {
        if p >= n {
            return Some(shortest);
        }
        let up = match digits[p] {
            b'6'..=b'9' => true,
            b'5' if p + 1 < n => true,
            b'5' => match cmp_exact(v.abs(), digits, n as i32 - shortest.point())? {
                std::cmp::Ordering::Greater => true,
                std::cmp::Ordering::Less => false,
                std::cmp::Ordering::Equal => (digits[p - 1] - b'0') % 2 == 1,
            },
            _ => false,
        };
        // a carry to 10^p stays right: q × 10^(point - p) is the rounded value either way
        let q = digits[..p]
            .iter()
            .fold(0, |acc, &d| acc * 10 + u64::from(d - b'0'))
            + u64::from(up);
        let exp = shortest.point() - p as i32;
        let magnitude = decimal_value(q, exp);
        let candidate = if v < 0.0 { -magnitude } else { magnitude };
        if (candidate as f32).to_bits() == target {
            return Some(jsonw::Digits::of_scaled(q, exp));
        }
    }
    None
}

/// `v` (positive, finite) against the decimal `0.D × 10^(len(D) - fraction)` = `D / 10^fraction`,
/// exactly; `None` where the integers would not fit (the caller falls back).
fn cmp_exact(v: f64, digits: &[u8], fraction: i32) -> Option<std::cmp::Ordering> {
    if !(0..=27).contains(&fraction) || digits.len() > 19 {
        return None;
    }
    let d: u128 = digits
        .iter()
        .fold(0u128, |acc, &b| acc * 10 + u128::from(b - b'0'));
    // v = m · 2^e
    let bits = v.to_bits();
    let exp_bits = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    let (m, e) = if exp_bits == 0 {
        (frac, -1074)
    } else {
        (frac | (1u64 << 52), exp_bits - 1075)
    };
    // v · 10^f = m · 5^f · 2^(e+f), against D
    let left = u128::from(m).checked_mul(5u128.checked_pow(fraction as u32)?)?;
    let shift = e + fraction;
    Some(if shift >= 0 {
        if shift > 127 || left.leading_zeros() < shift as u32 {
            std::cmp::Ordering::Greater
        } else {
            (left << shift).cmp(&d)
        }
    } else {
        let shift = (-shift) as u32;
        if shift > 127 || d.leading_zeros() < shift {
            std::cmp::Ordering::Less
        } else {
            left.cmp(&(d << shift))
        }
    })
}

/// The reference's search: precision 6 to 9, the first text that reads back as the float32.
fn search_f32(v: f64) -> f64 {
    let target = (v as f32).to_bits();
    for precision in 6..=9usize {
        let text = format!("{:.*e}", precision - 1, v);
        if let Ok(candidate) = text.parse::<f64>() {
            if (candidate as f32).to_bits() == target {
                return candidate;
            }
        }
    }
    v
}

/// 10^0 ..= 10^38 (a decimal's precision is at most [`MAX_PRECISION`]).
const POW10: [u128; 39] = {
    let mut t = [1u128; 39];
    let mut i = 1;
    while i < 39 {
        t[i] = t[i - 1] * 10;
        i += 1;
    }
    t
};

/// Exact decimal text of a big-endian two's-complement unscaled value.
pub fn write_decimal(bytes: &[u8], scale: u32, precision: u32, out: &mut Vec<u8>) -> Result<()> {
    if bytes.is_empty() {
        return Err(Decline);
    }
    let negative = bytes[0] & 0x80 != 0;
    let fill = if negative { 0xff } else { 0x00 };
    let significant = bytes.iter().position(|&b| b != fill).unwrap_or(bytes.len());
    let rest = &bytes[significant..];
    if rest.len() > 16 {
        return Err(Decline);
    }
    let mut buf = [fill; 16];
    buf[16 - rest.len()..].copy_from_slice(rest);
    let unscaled = i128::from_be_bytes(buf);
    // the sign must survive the truncation of the fill bytes
    if (unscaled < 0) != negative {
        return Err(Decline);
    }
    let magnitude = unscaled.unsigned_abs();
    if magnitude >= *POW10.get(precision as usize).ok_or(Decline)? {
        return Err(Decline);
    }
    out.push(b'"');
    if unscaled < 0 {
        out.push(b'-');
    }
    let mut buf = itoa::Buffer::new();
    let digits = match u64::try_from(magnitude) {
        Ok(m) => buf.format(m),
        Err(_) => buf.format(magnitude),
    }
    .as_bytes();
    let len = digits.len();
    let scale = scale as usize;
    if scale == 0 {
        out.extend_from_slice(digits);
    } else if len > scale {
        out.extend_from_slice(&digits[..len - scale]);
        out.push(b'.');
        out.extend_from_slice(&digits[len - scale..]);
    } else {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', scale - len));
        out.extend_from_slice(digits);
    }
    out.push(b'"');
    Ok(())
}

/// `YYYY-MM-DD` of a day number since 1970-01-01, years 1..=9999 (Python's `date` range, the
/// day numbers accepted).
pub fn date_text(days: i64) -> Result<[u8; 10]> {
    if !(-719_162..=2_932_896).contains(&days) {
        return Err(Decline);
    }
    // Neri and Schneider, "Euclidean affine functions and their application to calendar
    // algorithms" (2022), `to_date`: multiplications and shifts in 32 bits (Hinnant's
    // `civil_from_days`, the test's oracle, divides in 64 bits: ~110 instructions a date)
    const SHIFT: u32 = 82; // whole 400-year eras added, so that every day number is positive
    const K: u32 = 719_468 + 146_097 * SHIFT;
    let n = (days as i32 as u32).wrapping_add(K);
    let n1 = 4 * n + 3;
    let century = n1 / 146_097;
    let n2 = 4 * (n1 % 146_097 / 4) + 3;
    let p2 = 2_939_745u64 * u64::from(n2);
    let year_of_century = (p2 >> 32) as u32;
    let day_of_year = (p2 as u32) / 2_939_745 / 4;
    let n3 = 2141 * day_of_year + 197_913;
    let (month, day) = (n3 >> 16, (n3 & 0xffff) / 2141 + 1);
    // the computational year starts in March
    let january = day_of_year >= 306;
    let y = 100 * century + year_of_century + u32::from(january) - 400 * SHIFT;
    let (m, d) = (if january { month - 12 } else { month }, day);
    let [y0, y1] = two_digits(u64::from(y / 100));
    let [y2, y3] = two_digits(u64::from(y % 100));
    let [m0, m1] = two_digits(u64::from(m));
    let [d0, d1] = two_digits(u64::from(d));
    Ok([y0, y1, y2, y3, b'-', m0, m1, b'-', d0, d1])
}

/// "00" to "99".
const PAIRS: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

/// The two decimal digits of `v < 100`.
#[inline(always)]
fn two_digits(v: u64) -> [u8; 2] {
    let i = 2 * v as usize;
    [PAIRS[i], PAIRS[i + 1]]
}

/// `v < 10^digits.len()` in decimal, zero-padded to fill `digits`. The texts of a value are
/// put together on the stack and appended once (a `Vec` push per piece checked the capacity
/// each time: a timestamp cost ~600 instructions).
#[inline(always)]
fn fill_digits(digits: &mut [u8], mut v: u64) {
    let mut end = digits.len();
    while end >= 2 {
        digits[end - 2..end].copy_from_slice(&two_digits(v % 100));
        v /= 100;
        end -= 2;
    }
    if end == 1 {
        digits[0] = b'0' + (v % 10) as u8;
    }
}

/// `HH:MM:SS` of seconds within a day (24:00:00 for the day's end).
pub(crate) fn clock_text(secs: i64) -> [u8; 8] {
    let minute = secs / 60;
    let [h0, h1] = two_digits((minute / 60) as u64);
    let [m0, m1] = two_digits((minute % 60) as u64);
    let [s0, s1] = two_digits((secs % 60) as u64);
    [h0, h1, b':', m0, m1, b':', s0, s1]
}

/// `v.div_euclid(divisor)` and `v.rem_euclid(divisor)`: the time units and fraction steps, the
/// powers of ten up to 10^9, are constants in their arms, so the compiler multiplies instead of
/// dividing (a 64-bit hardware division takes tens of cycles).
#[inline(always)]
fn div_rem_euclid(v: i64, divisor: i64) -> (i64, i64) {
    macro_rules! arms {
        ($($power:literal),*) => {
            match divisor {
                $($power => (v.div_euclid($power), v.rem_euclid($power)),)*
                _ => (v.div_euclid(divisor), v.rem_euclid(divisor)),
            }
        };
    }
    arms!(
        10,
        100,
        1_000,
        10_000,
        100_000,
        1_000_000,
        10_000_000,
        100_000_000,
        1_000_000_000
    )
}

/// The reference's `_fraction_formatter(unit, digits)`: the text (`.` and up to 9 digits) in
/// the first `len` bytes. `sub < 10^full`, `full` and `digits` at most 9.
fn fraction_text(sub: i64, full: u32, digits: u32) -> ([u8; 10], usize) {
    let mut text = [b'0'; 10];
    text[0] = b'.';
    let (full_len, kept_len) = (full as usize, digits as usize);
    if digits >= full {
        fill_digits(&mut text[1..=full_len], sub as u64);
        return (text, 1 + kept_len);
    }
    let (kept, dropped) = div_rem_euclid(sub, 10i64.pow(full - digits));
    if dropped != 0 {
        // every digit, less the trailing zeros (a digit is not zero: `dropped` is not)
        fill_digits(&mut text[1..=full_len], sub as u64);
        let mut end = 1 + full_len;
        while text[end - 1] == b'0' {
            end -= 1;
        }
        (text, end)
    } else if digits > 0 {
        fill_digits(&mut text[1..=kept_len], kept as u64);
        (text, 1 + kept_len)
    } else {
        (text, 0)
    }
}

/// A quoted timestamp or time of day: the date (when given), the clock and the fraction put
/// together on the stack and appended at once.
fn write_moment(date: Option<[u8; 10]>, secs: i64, fraction: ([u8; 10], usize), out: &mut Vec<u8>) {
    let mut text = [0u8; 32];
    text[0] = b'"';
    let mut at = 1;
    if let Some(date) = date {
        text[1..11].copy_from_slice(&date);
        text[11] = b'T';
        at = 12;
    }
    text[at..at + 8].copy_from_slice(&clock_text(secs));
    at += 8;
    let (fraction, len) = fraction;
    text[at..at + 10].copy_from_slice(&fraction);
    at += len;
    text[at] = b'"';
    out.extend_from_slice(&text[..at + 1]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_digits_are_formats_zero_padding() {
        for width in 1..=20usize {
            for v in [
                0u64,
                7,
                42,
                99,
                100,
                999,
                1000,
                9999,
                10_000,
                123_456_789,
                u64::MAX,
            ] {
                if width < 20 && v >= 10u64.pow(width as u32) {
                    continue; // more digits than the width: not a fill
                }
                let mut digits = [b'x'; 20];
                fill_digits(&mut digits[..width], v);
                assert_eq!(
                    &digits[..width],
                    format!("{v:0width$}").as_bytes(),
                    "{v} width {width}"
                );
            }
        }
    }

    #[test]
    fn fractions_are_the_references() {
        // `_fraction_formatter(unit, digits)`: all `full` digits when `digits` reaches them
        // (zeros added), the kept digits when the dropped ones are zero, else every digit
        // less the trailing zeros; the expected texts are the ones the Python reference
        // printed for these arguments
        let text = |sub, full, digits| {
            let (text, len) = fraction_text(sub, full, digits);
            String::from_utf8(text[..len].to_vec()).unwrap()
        };
        assert_eq!(text(123, 3, 3), ".123");
        assert_eq!(text(5, 3, 6), ".005000");
        assert_eq!(text(123_400, 6, 3), ".1234");
        assert_eq!(text(123_000, 6, 3), ".123");
        assert_eq!(text(123_450, 6, 3), ".12345");
        assert_eq!(text(0, 6, 0), "");
        assert_eq!(text(999_999_999, 9, 7), ".999999999");
        assert_eq!(text(100, 9, 7), ".0000001");
        assert_eq!(text(0, 9, 9), ".000000000");
    }

    /// Howard Hinnant's `civil_from_days`: (year, month, day).
    fn hinnant(days: i64) -> (i64, i64, i64) {
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        (yoe + era * 400 + i64::from(m <= 2), m, d)
    }

    #[test]
    fn every_date_is_hinnants() {
        for days in -719_162..=2_932_896 {
            let (y, m, d) = hinnant(days);
            let want = format!("{y:04}-{m:02}-{d:02}");
            assert_eq!(date_text(days).unwrap(), want.as_bytes(), "{days}");
        }
    }

    #[test]
    fn dates_and_times() {
        let mut out = Vec::new();
        out.extend_from_slice(&date_text(0).unwrap());
        out.extend_from_slice(&date_text(-719_162).unwrap());
        out.extend_from_slice(&date_text(2_932_896).unwrap());
        assert_eq!(out, b"1970-01-010001-01-019999-12-31");
        // (date.min and date.max: the day numbers just outside are declined)
        assert!(date_text(-719_163).is_err() && date_text(2_932_897).is_err());
        let col = column(
            "t",
            "int64",
            Some("io.debezium.time.NanoTimestamp"),
            &[],
            &Options::new("x", BinaryMode::Bytes),
        )
        .unwrap();
        let mut out = Vec::new();
        convert(
            &col,
            Scalar::Int(1289567655123456700),
            &Options::new("x", BinaryMode::Bytes),
            &mut out,
        )
        .unwrap();
        assert_eq!(out, b"\"2010-11-12T13:14:15.1234567\"");
    }

    #[test]
    fn decimals() {
        let mut out = Vec::new();
        write_decimal(&[0x77, 0x35, 0x94, 0x00], 4, 19, &mut out).unwrap();
        assert_eq!(out, b"\"200000.0000\"");
        out.clear();
        write_decimal(&[0xff, 0xff, 0xfe], 2, 10, &mut out).unwrap();
        assert_eq!(out, b"\"-0.02\"");
        out.clear();
        write_decimal(&[0x00, 0x05], 0, 10, &mut out).unwrap();
        assert_eq!(out, b"\"5\"");
        // Python: format_unscaled(unscaled, scale)
        for (bytes, scale, text) in [
            (&[0x00][..], 2, "0.00"),
            (&[0x00][..], 0, "0"),
            (&[0x05][..], 3, "0.005"),
            (&[0xfb][..], 3, "-0.005"),
            (&[0x30, 0x39][..], 2, "123.45"),
            (&[0x30, 0x39][..], 5, "0.12345"),
            (&[0x30, 0x39][..], 6, "0.012345"),
            (&[0xcf, 0xc7][..], 1, "-1234.5"),
        ] {
            out.clear();
            write_decimal(bytes, scale, 38, &mut out).unwrap();
            assert_eq!(out, format!("\"{text}\"").as_bytes());
        }
        // 10^37 (beyond 64 bits), scale 10
        let big = 10i128.pow(37).to_be_bytes();
        out.clear();
        write_decimal(&big, 10, 38, &mut out).unwrap();
        assert_eq!(out, b"\"1000000000000000000000000000.0000000000\"");
        let neg = (-(10i128.pow(37)) - 7).to_be_bytes();
        out.clear();
        write_decimal(&neg, 0, 38, &mut out).unwrap();
        assert_eq!(out, b"\"-10000000000000000000000000000000000007\"");
    }

    /// Texts near base64: encodings of random bytes, some with one character replaced or the
    /// last one cut, and strings of base64 characters, padding and others.
    fn near_base64() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let chars: Vec<u8> =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_ \n.".to_vec();
        (
            proptest::collection::vec(any::<u8>(), 0..120),
            proptest::collection::vec(proptest::sample::select(chars), 0..40),
            0u8..4,
            any::<u8>(),
            any::<proptest::sample::Index>(),
        )
            .prop_map(|(bytes, chars, mode, byte, at)| {
                let encoded = base64::engine::general_purpose::STANDARD
                    .encode(&bytes)
                    .into_bytes();
                match mode {
                    0 => encoded,
                    1 => chars,
                    2 => {
                        let mut t = encoded;
                        if !t.is_empty() {
                            let i = at.index(t.len());
                            t[i] = byte;
                        }
                        t
                    }
                    _ => {
                        let mut t = encoded;
                        t.pop();
                        t
                    }
                }
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 20000, ..Default::default() })]

        #[test]
        fn base64_simd_reads_as_the_base64_crate(text in near_base64()) {
            let crate_read = base64::engine::general_purpose::STANDARD.decode(&text).ok();
            let simd_read = std::str::from_utf8(&text).ok().and_then(|t| {
                let mut room = [0u8; BASE64_ROOM];
                decode_base64(t, &mut room).ok().map(|b| b.into_owned())
            });
            if std::str::from_utf8(&text).is_ok() {
                proptest::prop_assert_eq!(simd_read, crate_read, "{:?}", String::from_utf8_lossy(&text));
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 20000, ..Default::default() })]

        /// Short decimal texts (eighths and hundredths as float32 columns hold, and any
        /// digits): a float32 column's text from the text is the one from its parsed value.
        #[test]
        fn float32_of_a_short_text_is_of_its_value(
            text in proptest::prop_oneof![
                proptest::strategy::Strategy::prop_map(-(1i64 << 23)..(1 << 23), |n| (n as f64 / 8.0).to_string()),
                proptest::strategy::Strategy::prop_map(-2_000_000i64..2_000_000, |n| (n as f64 / 100.0).to_string()),
                "-?(0|[1-9][0-9]{0,14})\\.[0-9]{1,17}",
            ]
        ) {
            if crate::scan::short_float_len(text.as_bytes()) == Some(text.len()) {
                let v: f64 = text.parse().unwrap();
                let (mut short, mut parsed) = (Vec::new(), Vec::new());
                write_float32_short(&mut short, text.as_bytes());
                write_float32(&mut parsed, v);
                proptest::prop_assert_eq!(String::from_utf8(short).unwrap(), String::from_utf8(parsed).unwrap(), "{}", text);
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn decimal_values_are_the_parsed_texts(q in 0u64..=u64::MAX, bits in 0u32..64, exp in -340i32..340) {
            // short and long digit strings (the fast path and the parse), every exponent
            let q = q >> bits;
            let expected: f64 = format!("{q}e{exp}").parse().unwrap();
            proptest::prop_assert_eq!(decimal_value(q, exp).to_bits(), expected.to_bits());
        }
    }

    #[test]
    fn constant_divisions_are_euclids() {
        let mut divisors: Vec<i64> = (1..=9).map(|p| 10i64.pow(p)).collect();
        divisors.extend([7, 86_400]);
        for d in divisors {
            for v in [
                0,
                1,
                -1,
                d - 1,
                d,
                -d,
                -d - 1,
                i64::MAX,
                i64::MIN + 1,
                1_234_567_890_123,
            ] {
                assert_eq!(
                    div_rem_euclid(v, d),
                    (v.div_euclid(d), v.rem_euclid(d)),
                    "{v} {d}"
                );
            }
        }
    }

    #[test]
    fn decimal_texts_are_plain() {
        // BigDecimal.toString's Javadoc examples, [unscaled, scale] -> text, and toPlainString
        for (text, plain) in [
            ("1.23E-8", Some("0.0000000123")),
            ("-1.23E-10", Some("-0.000000000123")),
            ("1.23E+3", Some("1230")),
            ("0E-10", Some("0.0000000000")),
            ("0E+3", Some("0")),
            ("-0E-2", Some("0.00")),
        ] {
            assert_eq!(
                plain_decimal(text.as_bytes()),
                Some(plain.map(str::to_owned)),
                "{text}"
            );
        }
        for plain in ["123", "-0.00123", "12.3"] {
            assert_eq!(plain_decimal(plain.as_bytes()), Some(None), "{plain}");
        }
        for bad in [
            "", "-", "1.", ".5", "1E", "1E+", "1E1234", "1e-99", "+1", "1 ", "NaN",
        ] {
            assert_eq!(plain_decimal(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn float32() {
        // msgspec.json.encode(_float32(v)) of the Python reference (formats/debezium/logical.py)
        for (v, text) in [
            (0.1f32 as f64, "0.1"),
            (3.4028234663852886e38, "3.4028235e38"),
            (16777217.0, "16777217.0"),
            (-1.5e-7f32 as f64, "-1.5e-7"),
        ] {
            let mut out = Vec::new();
            write_float32(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap(), text);
        }
    }

    #[test]
    fn float32_digits_are_the_searchs_text() {
        // float32 values, their f64 neighbours and decimal texts as JSON carries them: the
        // digit-rounding search answers as the formatting search does, or leaves it the value
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut answered = 0;
        let mut values: Vec<f64> = vec![
            0.1,
            3076.25,
            -3076.2501,
            9.999_999_5,
            1e-45,
            3.4028235e38,
            -15905.875,
            48717.875,
            1.25,
            0.125,
            1234567.5,
            12345678.5,
        ];
        for _ in 0..100_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = f32::from_bits(state as u32);
            values.push(x as f64);
            values.push(f64::from_bits(
                (x as f64).to_bits().wrapping_add(state >> 60),
            ));
            let short =
                ((state >> 24) % 2_000_000_000) as f64 / 10f64.powi((state >> 56) as i32 % 12);
            values.push(short);
            values.push(-short * 1e-30);
            // binary fractions: exact ties at some precision
            values.push(((state >> 8) % (1 << 24)) as f64 / f64::from(1u32 << ((state >> 3) % 12)));
            // float32 columns of short decimals, as columns usually hold
            let short32 = ((state >> 32) % 2_000_000) as f32 / 100.0 - 10_000.0;
            values.extend([short32, short32 * 1e-20, short32 * 1e20].map(f64::from));
        }
        values.extend(
            [
                0.1f32,
                1.0,
                10.0,
                9.999_999,
                1e-7,
                123.45,
                -0.3,
                1e30,
                3.0e-38,
                f32::MIN_POSITIVE,
            ]
            .map(f64::from),
        );
        for v in values {
            if !v.is_finite() || !((v as f32).is_finite()) || v == 0.0 {
                continue;
            }
            let mut buf = ryu::Buffer::new();
            let shortest = jsonw::Digits::of_text(buf.format_finite(v.abs()).as_bytes());
            if let Some(digits) = float32_digits(v, shortest) {
                let (mut written, mut expected) = (Vec::new(), Vec::new());
                digits.write(&mut written, v < 0.0);
                jsonw::write_f64(&mut expected, search_f32(v));
                assert_eq!(written, expected, "{v:e}");
                answered += 1;
            }
        }
        assert!(answered > 650_000, "{answered}");
    }
}
