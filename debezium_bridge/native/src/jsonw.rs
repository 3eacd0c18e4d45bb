//! JSON output exactly as msgspec (the Python reference's encoder) writes it.
//!
//! * strings: only `"`, `\` and the control characters below U+0020 are escaped (`\b \t \n \f
//!   \r` by name, the rest as `\u00XX`); everything else is written as raw UTF-8;
//! * integers as decimal digits;
//! * floats as the shortest text that reads back as the same `f64` (the digits `ryu` finds), in
//!   fixed notation with at least one fraction digit when the decimal exponent is in
//!   `-5..=15` (`0.00001`, `1000000000000000.0`) and in scientific notation otherwise, without
//!   a `+` or zero padding in the exponent (`1e16`, `1.5e-7`).

use std::borrow::Cow;

/// The bytes of a JSON token written as above (`span`: its place in `out`): a string's text
/// unescaped (borrowed when it has no escapes, as nearly all the core writes), `None` for
/// `null` (and a string that does not unescape), anything else as written. UTF-8 is left to
/// the caller.
pub(crate) fn token_bytes(out: &[u8], span: (u32, u32)) -> Option<Cow<'_, [u8]>> {
    let raw = &out[span.0 as usize..span.1 as usize];
    match raw {
        b"null" => None,
        [b'"', inner @ .., b'"'] if memchr::memchr(b'\\', inner).is_none() => {
            Some(Cow::Borrowed(inner))
        }
        [b'"', ..] => match crate::value::unescape(std::str::from_utf8(raw).ok()?).ok()? {
            Cow::Borrowed(text) => Some(Cow::Borrowed(text.as_bytes())),
            Cow::Owned(text) => Some(Cow::Owned(text.into_bytes())),
        },
        _ => Some(Cow::Borrowed(raw)),
    }
}

/// The escape of each byte value: 0 = written as is.
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        table[i] = b'u';
        i += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Whether `s` can be written between quotes as it is.
#[inline]
pub fn needs_escape(s: &[u8]) -> bool {
    s.iter().any(|&b| ESCAPE[b as usize] != 0)
}

/// Whether two byte strings are the same, compared a word at a time inline (the texts compared
/// on the hot path — names, values, literal text — are short, and `memcmp` costs a call).
#[inline(always)]
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        if n < 4 {
            return a.iter().zip(b).all(|(x, y)| x == y);
        }
        // the first and the last four bytes (overlapping when `n` is below 8)
        let quad = |s: &[u8], at: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&s[at..at + 4]);
            u32::from_le_bytes(w)
        };
        return quad(a, 0) == quad(b, 0) && quad(a, n - 4) == quad(b, n - 4);
    }
    let word = |s: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let mut i = 0;
    while i + 8 < n {
        if word(a, i) != word(b, i) {
            return false;
        }
        i += 8;
    }
    // the last eight bytes (overlapping the ones compared when `n` is not a multiple of 8)
    word(a, n - 8) == word(b, n - 8)
}

/// A JSON string (with its quotes).
#[inline]
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    write_str_body(out, s.as_bytes());
    out.push(b'"');
}

/// The high bit of each byte of a word that is below 0x20, a quote or a backslash (SWAR); the
/// lowest set bit marks the first such byte exactly (false marks appear only above a true one).
#[inline]
pub(crate) fn escape_mask(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = w.wrapping_sub(ONES * 0x20) & !w;
    let quote = w ^ (ONES * b'"' as u64);
    let slash = w ^ (ONES * b'\\' as u64);
    (below | (quote.wrapping_sub(ONES) & !quote) | (slash.wrapping_sub(ONES) & !slash)) & HIGH
}

/// Whether a word holds a byte below 0x20, a quote or a backslash.
#[inline]
fn word_needs_escape(w: u64) -> bool {
    escape_mask(w) != 0
}

/// Whether a byte is below 0x20, a quote or a backslash.
#[inline]
pub(crate) fn byte_needs_escape(b: u8) -> bool {
    ESCAPE[b as usize] != 0
}

/// The escaped body of a JSON string (no quotes); `s` is UTF-8.
pub fn write_str_body(out: &mut Vec<u8>, s: &[u8]) {
    // the usual case: nothing to escape, checked eight bytes at a time
    let mut clean = 0;
    while clean + 8 <= s.len() {
        let word = u64::from_le_bytes(s[clean..clean + 8].try_into().unwrap_or([0; 8]));
        if word_needs_escape(word) {
            break;
        }
        clean += 8;
    }
    if clean == s.len() || !s[clean..].iter().any(|&b| ESCAPE[b as usize] != 0) {
        out.extend_from_slice(s);
        return;
    }
    out.extend_from_slice(&s[..clean]);
    let s = &s[clean..];
    let mut start = 0;
    for (i, &b) in s.iter().enumerate() {
        let esc = ESCAPE[b as usize];
        if esc == 0 {
            continue;
        }
        out.extend_from_slice(&s[start..i]);
        out.push(b'\\');
        out.push(esc);
        if esc == b'u' {
            out.extend_from_slice(b"00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        }
        start = i + 1;
    }
    out.extend_from_slice(&s[start..]);
}

#[inline]
pub fn write_i64(out: &mut Vec<u8>, v: i64) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(v).as_bytes());
}

#[inline]
pub fn write_u64(out: &mut Vec<u8>, v: u64) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(v).as_bytes());
}

/// An optional integer (`null` for `None`).
#[inline]
pub fn write_opt_i64(out: &mut Vec<u8>, v: Option<i64>) {
    match v {
        Some(v) => write_i64(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

/// An optional string (`null` for `None`).
#[inline]
pub fn write_opt_str(out: &mut Vec<u8>, v: Option<&str>) {
    match v {
        Some(v) => write_str(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

/// `s` as a JSON string (for names written on every record, escaped once).
pub fn json_string(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 2);
    write_str(&mut out, s);
    out
}

/// `bytes` as a JSON string of their standard base64, encoded in place (no buffer per value).
pub fn write_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    use base64::Engine;
    let engine = &base64::engine::general_purpose::STANDARD;
    out.push(b'"');
    let start = out.len();
    let len = base64::encoded_len(bytes.len(), true).unwrap_or(usize::MAX);
    match start.checked_add(len) {
        Some(end) => {
            out.resize(end, 0);
            let written = engine.encode_slice(bytes, &mut out[start..]).unwrap_or(len);
            out.truncate(start + written);
        }
        None => out.extend_from_slice(engine.encode(bytes).as_bytes()),
    }
    out.push(b'"');
}

/// A finite float as msgspec writes it (see the module docs). Returns `false` (and writes
/// nothing) for NaN and infinities, which JSON cannot hold.
pub fn write_f64(out: &mut Vec<u8>, v: f64) -> bool {
    if !v.is_finite() {
        return false;
    }
    // ryu's layout is msgspec's: fixed notation for decimal exponents -5..=15, else
    // scientific without `+` or padding (`floats_as_msgspec`, `ryu_text_is_the_layout`)
    let mut buf = ryu::Buffer::new();
    out.extend_from_slice(buf.format_finite(v).as_bytes());
    true
}

/// A decimal as `0.D × 10^point`, `D` its significant digits (ASCII) without leading or
/// trailing zeros; empty for zero.
pub struct Digits {
    ascii: [u8; 32],
    len: usize,
    point: i32,
}

impl Digits {
    /// The digits of a float's unsigned text as ryu writes it (`1.5e-7`, `100.0`): at most
    /// 17 significant digits, 22 digits with the zeros of fixed notation (a longer text would
    /// keep its first 32).
    pub fn of_text(text: &[u8]) -> Self {
        let (mantissa, exp) = match text.iter().position(|&b| b == b'e' || b == b'E') {
            Some(at) => {
                let exp_text = std::str::from_utf8(&text[at + 1..]).unwrap_or("0");
                (&text[..at], exp_text.parse::<i32>().unwrap_or(0))
            }
            None => (text, 0),
        };
        let (int, fraction) = match mantissa.iter().position(|&b| b == b'.') {
            Some(at) => (&mantissa[..at], &mantissa[at + 1..]),
            None => (mantissa, &b""[..]),
        };
        let mut digits = Digits {
            ascii: [0; 32],
            len: 0,
            point: 0,
        };
        let int = &int[..int.len().min(32)];
        let fraction = &fraction[..fraction.len().min(32 - int.len())];
        let len = int.len() + fraction.len();
        digits.ascii[..int.len()].copy_from_slice(int);
        digits.ascii[int.len()..len].copy_from_slice(fraction);
        // leading zeros move the point
        let lead = digits.ascii[..len]
            .iter()
            .take_while(|&&b| b == b'0')
            .count();
        digits.ascii.copy_within(lead..len, 0);
        digits.len = len - lead;
        digits.point = int.len() as i32 + exp - lead as i32;
        digits.trim();
        digits
    }

    /// The digits of `q × 10^exp`.
    pub fn of_scaled(q: u64, exp: i32) -> Self {
        let mut buf = itoa::Buffer::new();
        let text = buf.format(q).as_bytes();
        let mut digits = Digits {
            ascii: [0; 32],
            len: text.len(),
            point: text.len() as i32 + exp,
        };
        digits.ascii[..text.len()].copy_from_slice(text);
        digits.trim(); // `0` becomes no digits
        digits
    }

    fn trim(&mut self) {
        while self.len > 0 && self.ascii[self.len - 1] == b'0' {
            self.len -= 1;
        }
    }

    /// The significant digits, ASCII.
    pub fn ascii(&self) -> &[u8] {
        &self.ascii[..self.len]
    }

    /// The decimal exponent of `0.D`.
    pub fn point(&self) -> i32 {
        self.point
    }

    /// The value laid out as msgspec writes floats.
    pub fn write(&self, out: &mut Vec<u8>, negative: bool) {
        let digits = self.ascii();
        if negative {
            out.push(b'-');
        }
        if digits.is_empty() {
            out.extend_from_slice(b"0.0");
            return;
        }
        let point = self.point;
        let sci_exp = point - 1;
        let n = digits.len() as i32;
        if (-5..=15).contains(&sci_exp) {
            if point <= 0 {
                out.extend_from_slice(b"0.");
                out.extend(std::iter::repeat_n(b'0', (-point) as usize));
                out.extend_from_slice(digits);
            } else if point >= n {
                out.extend_from_slice(digits);
                out.extend(std::iter::repeat_n(b'0', (point - n) as usize));
                out.extend_from_slice(b".0");
            } else {
                out.extend_from_slice(&digits[..point as usize]);
                out.push(b'.');
                out.extend_from_slice(&digits[point as usize..]);
            }
        } else {
            out.push(digits[0]);
            if n > 1 {
                out.push(b'.');
                out.extend_from_slice(&digits[1..]);
            }
            out.push(b'e');
            write_i64(out, sci_exp as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_in_place_is_the_base64_crates_encoding() {
        use base64::Engine;
        let data: Vec<u8> = (0..=255u8).cycle().take(70).collect();
        for n in 0..data.len() {
            let mut out = b"x".to_vec();
            write_base64(&mut out, &data[..n]);
            let expected = base64::engine::general_purpose::STANDARD.encode(&data[..n]);
            assert_eq!(out, format!("x\"{expected}\"").into_bytes());
        }
    }

    fn f(v: f64) -> String {
        let mut out = Vec::new();
        assert!(write_f64(&mut out, v));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn floats_as_msgspec() {
        // expectations: msgspec.json.encode of the same Python floats
        let cases: &[(f64, &str)] = &[
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1e16, "1e16"),
            (1e15, "1000000000000000.0"),
            (123456789012345678.0, "1.2345678901234568e17"),
            (1e-7, "1e-7"),
            (0.0001, "0.0001"),
            (1e22, "1e22"),
            (1.5e300, "1.5e300"),
            (-0.0, "-0.0"),
            (5e-324, "5e-324"),
            (1e-5, "0.00001"),
            (1e-6, "1e-6"),
            (2.5e-5, "0.000025"),
            (12345.678, "12345.678"),
            (1.5e15, "1500000000000000.0"),
            (1234567890123456.8, "1234567890123456.8"),
            (3.4028234663852886e38, "3.4028234663852886e38"),
            (2.2250738585072014e-308, "2.2250738585072014e-308"),
            (0.000123456789, "0.000123456789"),
            (100.0, "100.0"),
        ];
        for (v, want) in cases {
            assert_eq!(f(*v), *want, "{v:?}");
        }
    }

    #[test]
    fn ryu_text_is_the_layout() {
        // the digits of ryu's text, laid out again, give the same text: all magnitudes
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let v = f64::from_bits(state);
            let short = (state >> 11) as f64 / 10f64.powi((state % 40) as i32 - 20);
            for v in [v, short] {
                if !v.is_finite() {
                    continue;
                }
                let mut buf = ryu::Buffer::new();
                let text = buf.format_finite(v).as_bytes();
                let mut laid_out = Vec::new();
                match text.strip_prefix(b"-") {
                    Some(magnitude) => Digits::of_text(magnitude).write(&mut laid_out, true),
                    None => Digits::of_text(text).write(&mut laid_out, false),
                }
                assert_eq!(laid_out, text, "{v:e}");
            }
        }
    }

    #[test]
    fn strings_as_msgspec() {
        let mut out = Vec::new();
        write_str(&mut out, "a\u{7f}/\u{2028}é\"\\\x00\x1f\x08\x0c\n\r\t");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"a\u{7f}/\u{2028}é\\\"\\\\\\u0000\\u001f\\b\\f\\n\\r\\t\""
        );
    }
}

#[cfg(test)]
mod same_bytes_tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 20000, ..ProptestConfig::default() })]

        /// Equal slices, and slices one byte apart at any position, of every length to 40.
        #[test]
        fn same_bytes_is_slice_equality(a in proptest::collection::vec(any::<u8>(), 0..40), at in any::<prop::sample::Index>(), byte in any::<u8>(), longer in any::<bool>()) {
            let mut b = a.clone();
            prop_assert!(super::same_bytes(&a, &b));
            if !b.is_empty() {
                let i = at.index(b.len());
                b[i] = byte;
            }
            if longer {
                b.push(byte);
            }
            prop_assert_eq!(super::same_bytes(&a, &b), a == b);
        }
    }
}
