//! SQL Server LSNs (`binary(10)`) as Debezium writes them: `xxxxxxxx:xxxxxxxx:xxxx` in lower
//! case. Accepted like `debezium_bridge.model.lsn.parse_lsn`: any case, with or without colons,
//! `0x…`, and `NULL`/empty for a missing LSN (sorts lowest).

/// A parsed LSN: `None` = missing (NULL).
pub type Lsn = Option<[u8; 10]>;

/// Text that is not an LSN (the reference raises `LsnFormatError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadLsn;

#[inline]
fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = ONES * 0x80;

/// Eight lower-case hex digits as four bytes, all eight checked and converted at once in one
/// word (a table lookup per digit cost ~7 instructions); `None` for any other byte.
#[inline(always)]
fn hex8(text: [u8; 8]) -> Option<u32> {
    let x = u64::from_be_bytes(text);
    // 1 in the bytes with bit 6 set: the letters' base is b'a', the digits' b'0'
    let letter = (x >> 6) & ONES;
    // each byte less its base, a cleared high bit where it was below it (no borrow crosses a
    // byte: every byte is at least 0x80 here and no base exceeds 0x61)
    let shifted = (x | HIGH) - (ONES * 0x30 + letter * 0x31);
    let below = !shifted & HIGH;
    let offset = shifted & !HIGH;
    // a high bit where the offset reaches its limit (10 digits, 6 letters): offset + 0x80 - limit
    let beyond = (offset + ONES * 0x76 + letter * 4) & HIGH;
    if (x & HIGH) | below | beyond != 0 {
        return None;
    }
    let nibbles = offset + letter * 10;
    let pairs = (nibbles | (nibbles >> 4)) & 0x00ff_00ff_00ff_00ff;
    let quads = (pairs | (pairs >> 8)) & 0x0000_ffff_0000_ffff;
    Some((quads | (quads >> 16)) as u32)
}

/// Debezium's own form, lower-case hex (the fast path).
#[inline]
pub fn parse_canonical(text: &[u8]) -> Option<[u8; 10]> {
    let text: &[u8; 22] = text.try_into().ok()?;
    if text[8] != b':' || text[17] != b':' {
        return None;
    }
    let (high, rest) = text.split_first_chunk::<8>()?;
    let middle = rest[1..].first_chunk::<8>()?;
    let (high, middle) = (hex8(*high)?, hex8(*middle)?);
    let low = hex8([
        b'0', b'0', b'0', b'0', text[18], text[19], text[20], text[21],
    ])?;
    let mut out = [0u8; 10];
    out[..4].copy_from_slice(&high.to_be_bytes());
    out[4..8].copy_from_slice(&middle.to_be_bytes());
    out[8..].copy_from_slice(&(low as u16).to_be_bytes());
    Some(out)
}

/// Any accepted form; `Err(BadLsn)` where the Python reference raises `LsnFormatError` or where
/// its text handling (Unicode whitespace) is not reproduced here (the caller declines).
pub fn parse(text: &str) -> Result<Lsn, BadLsn> {
    if let Some(lsn) = parse_canonical(text.as_bytes()) {
        return Ok(Some(lsn));
    }
    if !text.is_ascii()
        || text
            .bytes()
            .any(|b| b < 0x20 && !b" \t\n\r\x0b\x0c".contains(&b))
    {
        return Err(BadLsn);
    }
    let stripped = text.trim_matches(|c: char| c.is_ascii_whitespace() || c == '\x0b');
    if stripped.is_empty() || stripped.eq_ignore_ascii_case("NULL") {
        return Ok(None);
    }
    let mut body = stripped;
    if body.starts_with("0x") || body.starts_with("0X") {
        body = &body[2..];
    }
    let joined: String;
    if body.contains(':') {
        let parts: Vec<&str> = body.split(':').collect();
        if parts.len() != 3 || parts[0].len() != 8 || parts[1].len() != 8 || parts[2].len() != 4 {
            return Err(BadLsn);
        }
        joined = parts.concat();
        body = &joined;
    }
    if body.is_empty() || body.len() > 20 || !body.bytes().all(|b| hex_val(b).is_some()) {
        return Err(BadLsn);
    }
    let padded = format!("{body:0>20}");
    let bytes = padded.as_bytes();
    let mut out = [0u8; 10];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = (hex_val(bytes[2 * i]).ok_or(BadLsn)? << 4)
            | hex_val(bytes[2 * i + 1]).ok_or(BadLsn)?;
    }
    Ok(Some(out))
}

/// Two lower-case hex digits per byte value.
static HEX2: [[u8; 2]; 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [HEX[i >> 4], HEX[i & 15]];
        i += 1;
    }
    t
};

/// Debezium's lower-case text of an LSN.
pub fn format(lsn: &[u8; 10], out: &mut Vec<u8>) {
    let mut text = [0u8; 22];
    let mut at = 0;
    for (i, &b) in lsn.iter().enumerate() {
        if i == 4 || i == 8 {
            text[at] = b':';
            at += 1;
        }
        text[at..at + 2].copy_from_slice(&HEX2[b as usize]);
        at += 2;
    }
    out.extend_from_slice(&text);
}

/// 20 hex digits (zeros for a missing LSN): sorts like the LSN.
pub fn hex20(lsn: &Lsn, out: &mut Vec<u8>) {
    match lsn {
        Some(lsn) => {
            let mut text = [0u8; 20];
            for (i, &b) in lsn.iter().enumerate() {
                text[2 * i..2 * i + 2].copy_from_slice(&HEX2[b as usize]);
            }
            out.extend_from_slice(&text);
        }
        None => out.extend_from_slice(b"00000000000000000000"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let bytes = [0, 0, 0, 0x27, 0, 0, 0x07, 0x58, 0, 3];
        let want = Some(bytes);
        assert_eq!(parse("00000027:00000758:0003"), Ok(want));
        assert_eq!(
            parse("00000027:00000758:0003".to_uppercase().as_str()),
            Ok(want)
        );
        assert_eq!(parse("0x00000027000007580003"), Ok(want));
        assert_eq!(parse(" 27000007580003 "), Ok(want));
        assert_eq!(parse("NULL"), Ok(None));
        assert_eq!(parse(""), Ok(None));
        assert!(parse("xyz").is_err());
        assert!(parse("0000002:700000758:0003").is_err());
        let mut out = Vec::new();
        format(&bytes, &mut out);
        assert_eq!(out, b"00000027:00000758:0003");
    }

    #[test]
    fn canonical_fast_path() {
        // every byte position, every hex digit (the SQL Server documentation's form: lower-case
        // hex, colons after the 4th and 8th byte)
        for digit in b"0123456789abcdef" {
            for pos in (0..22).filter(|p| *p != 8 && *p != 17) {
                let mut text = *b"00000000:00000000:0000";
                text[pos] = *digit;
                let got = parse_canonical(&text).expect("canonical");
                let hex: String = text
                    .iter()
                    .filter(|b| **b != b':')
                    .map(|&b| b as char)
                    .collect();
                let want: Vec<u8> = (0..10)
                    .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0))
                    .collect();
                assert_eq!(got.to_vec(), want);
            }
        }
        // every byte value at every digit position: accepted exactly where it is a lower-case
        // hex digit
        for pos in (0..22).filter(|p| *p != 8 && *p != 17) {
            for byte in 0..=255u8 {
                let mut text = *b"0123abcd:456789ef:a0f9";
                text[pos] = byte;
                let digits: Vec<u8> = text.iter().copied().filter(|b| *b != b':').collect();
                let want = (byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)).then(|| {
                    let hex = std::str::from_utf8(&digits).expect("ascii");
                    let mut out = [0u8; 10];
                    for (i, slot) in out.iter_mut().enumerate() {
                        *slot = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex");
                    }
                    out
                });
                assert_eq!(parse_canonical(&text), want, "{pos} {byte:#x}");
            }
        }
        for bad in [
            &b"0000002g:00000758:0003"[..],
            b"00000027:00000758:000A",
            b"00000027-00000758:0003",
            b"00000027:00000758:003",
            b"00000027:00000758:00030",
        ] {
            assert_eq!(
                parse_canonical(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
