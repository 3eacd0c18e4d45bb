//! JSON values: from the input text (already validated by sonic-rs) to the canonical bytes the
//! Python reference writes (msgspec's encoding of what msgspec decoded), and Python's `==` on
//! two canonical values.
//!
//! The reference decodes a value with msgspec and encodes it again, so strings lose their
//! escapes (`"\u00e9"` → `"é"`), `-0` becomes `0`, floats are re-printed in msgspec's shortest
//! form and duplicate object keys collapse. Anything this module does not reproduce exactly
//! (integers beyond 64 bits, lone surrogates, duplicate keys, non-finite floats) is reported as
//! [`Decline`]: the record then goes to the Python decoder, which decides.

use crate::jsonw;
use sonic_rs::{JsonContainerTrait, JsonNumberTrait, JsonValueTrait};

/// The native path does not decode this record; the Python reference does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decline;

pub type Result<T> = std::result::Result<T, Decline>;

/// A JSON number from its text: `Int` within 64 bits, `Float` otherwise finite.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    Int(i64),
    UInt(u64),
    Float(f64),
}

/// The text of a JSON string literal (with its quotes), unescaped.
pub fn unescape(raw: &str) -> Result<std::borrow::Cow<'_, str>> {
    let b = raw.as_bytes();
    if b.len() < 2 || b[0] != b'"' || b[b.len() - 1] != b'"' {
        return Err(Decline);
    }
    let body = &raw[1..raw.len() - 1];
    if memchr::memchr(b'\\', body.as_bytes()).is_none() {
        return Ok(std::borrow::Cow::Borrowed(body));
    }
    let bytes = body.as_bytes();
    let mut out = String::with_capacity(body.len());
    let mut i = 0;
    let mut start = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        out.push_str(&body[start..i]);
        let esc = *bytes.get(i + 1).ok_or(Decline)?;
        i += 2;
        match esc {
            b'"' => out.push('"'),
            b'\\' => out.push('\\'),
            b'/' => out.push('/'),
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'n' => out.push('\n'),
            b'r' => out.push('\r'),
            b't' => out.push('\t'),
            b'u' => {
                let hi = hex4(bytes, i)?;
                i += 4;
                let code = if (0xD800..0xDC00).contains(&hi) {
                    if bytes.get(i) != Some(&b'\\') || bytes.get(i + 1) != Some(&b'u') {
                        return Err(Decline);
                    }
                    let lo = hex4(bytes, i + 2)?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return Err(Decline);
                    }
                    i += 6;
                    0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                } else if (0xDC00..0xE000).contains(&hi) {
                    return Err(Decline);
                } else {
                    hi
                };
                out.push(char::from_u32(code).ok_or(Decline)?);
            }
            _ => return Err(Decline),
        }
        start = i;
    }
    out.push_str(&body[start..]);
    Ok(std::borrow::Cow::Owned(out))
}

fn hex4(b: &[u8], at: usize) -> Result<u32> {
    let s = b.get(at..at + 4).ok_or(Decline)?;
    let mut v = 0u32;
    for &c in s {
        v = (v << 4)
            | match c {
                b'0'..=b'9' => (c - b'0') as u32,
                b'a'..=b'f' => (c - b'a' + 10) as u32,
                b'A'..=b'F' => (c - b'A' + 10) as u32,
                _ => return Err(Decline),
            };
    }
    Ok(v)
}

/// Where one member of a written object sits in the output buffer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Member {
    pub name: (u32, u32),
    pub value: (u32, u32),
}

/// A canonical object (msgspec's output, from the Python decoder) copied as it is, with the
/// spans of its members.
pub fn canonical_members(raw: &str, out: &mut Vec<u8>) -> Result<Vec<Member>> {
    let mut members = Vec::new();
    out.push(b'{');
    for (i, item) in sonic_rs::to_object_iter(raw).enumerate() {
        let (key, value) = item.map_err(|_| Decline)?;
        if i > 0 {
            out.push(b',');
        }
        let name_start = out.len();
        jsonw::write_str(out, &key);
        let name_end = out.len();
        out.push(b':');
        let value_start = out.len();
        out.extend_from_slice(value.as_raw_str().as_bytes());
        members.push(Member {
            name: (name_start as u32 + 1, name_end as u32 - 1),
            value: (value_start as u32, out.len() as u32),
        });
    }
    out.push(b'}');
    Ok(members)
}

/// Python's `==` on two canonical values (1 == 1.0 == True, dicts regardless of order).
#[inline(always)]
pub fn py_eq(a: &[u8], b: &[u8]) -> bool {
    if crate::jsonw::same_bytes(a, b) {
        return true;
    }
    let (Some(&fa), Some(&fb)) = (a.first(), b.first()) else {
        return false;
    };
    // different bytes of two strings, or of two values of which one is null, never compare
    // equal; the rest is decided by [`py_eq_values`]
    if fa == b'"' || fb == b'"' || fa == b'n' || fb == b'n' {
        return false;
    }
    py_eq_values(a, b, fa, fb)
}

/// [`py_eq`] on two values whose bytes differ, neither a string or null, that begin with `fa`
/// and `fb`: two different canonical integers never compare equal; two floats compare as
/// floats; the rest (int against float or bool, arrays, objects) needs the values.
fn py_eq_values(a: &[u8], b: &[u8], fa: u8, fb: u8) -> bool {
    let boolean = |c: u8| c == b't' || c == b'f';
    if boolean(fa) && boolean(fb) {
        return false; // `true` against `false`
    }
    let numeric = |c: u8| c == b'-' || c.is_ascii_digit();
    if numeric(fa) && numeric(fb) {
        let is_float = |v: &[u8]| v.iter().any(|&c| c == b'.' || c == b'e' || c == b'E');
        match (is_float(a), is_float(b)) {
            (false, false) => return false,
            (true, true) => {
                let parse = |v: &[u8]| {
                    std::str::from_utf8(v)
                        .ok()
                        .and_then(|t| t.parse::<f64>().ok())
                };
                return matches!((parse(a), parse(b)), (Some(x), Some(y)) if x == y);
            }
            _ => {}
        }
    }
    let (Ok(va), Ok(vb)) = (
        sonic_rs::from_slice::<sonic_rs::Value>(a),
        sonic_rs::from_slice::<sonic_rs::Value>(b),
    ) else {
        return false;
    };
    value_eq(&va, &vb)
}

fn numeric(v: &sonic_rs::Value) -> Option<Num> {
    if let Some(b) = v.as_bool() {
        return Some(Num::Int(b as i64));
    }
    let n = v.as_number()?;
    if let Some(i) = n.as_i64() {
        return Some(Num::Int(i));
    }
    if let Some(u) = n.as_u64() {
        return Some(Num::UInt(u));
    }
    n.as_f64().map(Num::Float)
}

fn num_eq(a: Num, b: Num) -> bool {
    fn as_i128(n: Num) -> Option<i128> {
        match n {
            Num::Int(v) => Some(v as i128),
            Num::UInt(v) => Some(v as i128),
            Num::Float(f) => {
                if f.fract() == 0.0 && f.abs() < 1.8e19 {
                    Some(f as i128)
                } else {
                    None
                }
            }
        }
    }
    match (a, b) {
        (Num::Float(x), Num::Float(y)) => x == y,
        (Num::Float(_), _) | (_, Num::Float(_)) => match (as_i128(a), as_i128(b)) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
        _ => as_i128(a) == as_i128(b),
    }
}

fn value_eq(a: &sonic_rs::Value, b: &sonic_rs::Value) -> bool {
    if let (Some(x), Some(y)) = (numeric(a), numeric(b)) {
        return num_eq(x, y);
    }
    if a.is_null() || b.is_null() {
        return a.is_null() && b.is_null();
    }
    if let (Some(x), Some(y)) = (a.as_str(), b.as_str()) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (a.as_array(), b.as_array()) {
        return x.len() == y.len() && x.iter().zip(y.iter()).all(|(p, q)| value_eq(p, q));
    }
    if let (Some(x), Some(y)) = (a.as_object(), b.as_object()) {
        return x.len() == y.len()
            && x.iter()
                .all(|(k, v)| y.get(&k).is_some_and(|w| value_eq(v, w)));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_equality() {
        assert!(!py_eq(b"true", b"false"));
        assert!(py_eq(b"1.5", b"1.50"));
        assert!(py_eq(b"1e2", b"100.0"));
        assert!(!py_eq(b"0.1", b"0.10000000000000002"));
        assert!(py_eq(b"1", b"1.0"));
        assert!(py_eq(b"true", b"1"));
        assert!(py_eq(b"-0.0", b"0.0"));
        assert!(py_eq(br#"{"a":1,"b":2}"#, br#"{"b":2,"a":1.0}"#));
        assert!(!py_eq(b"1", b"2"));
        assert!(!py_eq(b"null", b"0"));
        assert!(!py_eq(br#""1""#, b"1"));
        assert!(!py_eq(b"[1]", b"[1,2]"));
    }
}
