//! The native Confluent Avro reader: a hand-encoded Debezium envelope (the Avro binary encoding
//! as the specification defines it, written here independently of the reader) decodes to the
//! canonical values the documented logical types give; truncated, mutated and arbitrary bytes
//! never panic (proptest, part of `cargo test`), and input the reference reads differently is
//! declined.

use _native::core::{Config, Core};
use _native::decode::{Decoder, Input};
use _native::schema::{BinaryMode, Options};
use proptest::prelude::*;

const VALUE_SCHEMA: &str = r#"{"type":"record","name":"Envelope","namespace":"server1.testDB.dbo.customers","fields":[
 {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
   {"name":"id","type":"int"},
   {"name":"name","type":["null","string"],"default":null},
   {"name":"amount","type":["null",{"type":"bytes","scale":2,"precision":12,"connect.version":1,"connect.parameters":{"scale":"2","connect.decimal.precision":"12"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}],"default":null},
   {"name":"t","type":["null",{"type":"long","connect.version":1,"connect.name":"io.debezium.time.NanoTimestamp"}],"default":null},
   {"name":"small","type":["null",{"type":"int","connect.type":"int16"}],"default":null},
   {"name":"r","type":["null","float"],"default":null},
   {"name":"blob","type":["null","bytes"],"default":null},
   {"name":"d","type":["null",{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}],"default":null}
 ],"connect.name":"server1.testDB.dbo.customers.Value"}],"default":null},
 {"name":"after","type":["null","Value"],"default":null},
 {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.sqlserver","fields":[
   {"name":"version","type":"string"},{"name":"connector","type":"string"},{"name":"name","type":"string"},
   {"name":"ts_ms","type":"long"},
   {"name":"snapshot","type":[{"type":"string","connect.version":1,"connect.parameters":{"allowed":"true,last,false,incremental"},"connect.default":"false","connect.name":"io.debezium.data.Enum"},"null"],"default":"false"},
   {"name":"db","type":"string"},{"name":"sequence","type":["null","string"],"default":null},
   {"name":"schema","type":"string"},{"name":"table","type":"string"},
   {"name":"change_lsn","type":["null","string"],"default":null},{"name":"commit_lsn","type":["null","string"],"default":null},
   {"name":"event_serial_no","type":["null","long"],"default":null}]}},
 {"name":"op","type":"string"},
 {"name":"ts_ms","type":["null","long"],"default":null},
 {"name":"transaction","type":["null",{"type":"record","name":"ConnectDefault","namespace":"io.confluent.connect.avro","fields":[
   {"name":"id","type":"string"},{"name":"total_order","type":"long"},{"name":"data_collection_order","type":"long"}]}],"default":null}
],"connect.name":"server1.testDB.dbo.customers.Envelope"}"#;

const KEY_SCHEMA: &str = r#"{"type":"record","name":"Key","namespace":"server1.testDB.dbo.customers","fields":[{"name":"id","type":"int"}],"connect.name":"server1.testDB.dbo.customers.Key"}"#;

fn long(out: &mut Vec<u8>, v: i64) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        if n < 0x80 {
            out.push(n as u8);
            return;
        }
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
}

fn string(out: &mut Vec<u8>, s: &[u8]) {
    long(out, s.len() as i64);
    out.extend_from_slice(s);
}

fn header(id: u32) -> Vec<u8> {
    let mut out = vec![0u8];
    out.extend_from_slice(&id.to_be_bytes());
    out
}

fn good_value() -> Vec<u8> {
    value_with(-300)
}

/// An update of row 1 (see the assertions); `small` is an int16 column of the before image.
fn value_with(small: i64) -> Vec<u8> {
    let mut v = header(1);
    // before: branch 1 (Value)
    long(&mut v, 1);
    long(&mut v, 1); // id
    long(&mut v, 1);
    string(&mut v, "é\"x".as_bytes()); // name
    long(&mut v, 1);
    string(&mut v, &[0x01, 0x02]); // amount: unscaled 258, scale 2
    long(&mut v, 1);
    long(&mut v, 1_289_567_655_123_456_700); // t (ns)
    long(&mut v, 1);
    long(&mut v, small); // small
    long(&mut v, 1);
    v.extend_from_slice(&0.1f32.to_le_bytes()); // r
    long(&mut v, 1);
    string(&mut v, b"\x00\xff"); // blob
    long(&mut v, 1);
    long(&mut v, 0); // d
                     // after
    long(&mut v, 1);
    long(&mut v, 1);
    long(&mut v, 1);
    string(&mut v, b"__debezium_unavailable_value");
    long(&mut v, 0); // amount null
    long(&mut v, 0);
    long(&mut v, 0);
    long(&mut v, 0);
    long(&mut v, 1);
    string(&mut v, b"__debezium_unavailable_value"); // blob: unavailable
    long(&mut v, 0);
    // source
    string(&mut v, b"3.6.3.Final");
    string(&mut v, b"sqlserver");
    string(&mut v, b"server1");
    long(&mut v, 1_700_000_000_000);
    long(&mut v, 0);
    string(&mut v, b"false");
    string(&mut v, b"testDB");
    long(&mut v, 0); // sequence null
    string(&mut v, b"dbo");
    string(&mut v, b"customers");
    long(&mut v, 1);
    string(&mut v, b"00000027:00000758:0003");
    long(&mut v, 1);
    string(&mut v, b"00000027:00000758:0005");
    long(&mut v, 1);
    long(&mut v, 2);
    string(&mut v, b"u"); // op
    long(&mut v, 1);
    long(&mut v, 1_700_000_000_100);
    long(&mut v, 0); // transaction null
    v
}

fn good_key() -> Vec<u8> {
    let mut k = header(2);
    long(&mut k, 1);
    k
}

fn decoder() -> Decoder {
    let mut d = Decoder::new(Options::new(
        "__debezium_unavailable_value",
        BinaryMode::Bytes,
    ));
    d.add_avro(1, false, Some(VALUE_SCHEMA));
    d.add_avro(2, true, Some(KEY_SCHEMA));
    d
}

fn decode(value: &[u8], key: Option<&[u8]>) -> Option<(Vec<u8>, Vec<String>)> {
    let mut core = Core::new(Config {
        pair_key_changes: true,
        max_pending: 100,
        dedupe_capacity: 8,
    });
    let mut decoder = decoder();
    let topic = core.topic("server1.testDB.dbo.customers");
    let tp = core.tp(topic, 0);
    let input = Input {
        topic: "server1.testDB.dbo.customers",
        topic_id: topic,
        partition: 0,
        offset: Some(1),
        tp,
        key,
        value,
        has_headers: false,
        newkey: None,
        oldkey: None,
    };
    let event = decoder
        .decode(&input, &mut core.interner, &mut core.spare)
        .ok()?;
    let gone = event.unavailable.iter().map(|s| s.to_string()).collect();
    let _ = core.accept(event);
    core.flush();
    let (lines, _) = core.take_output();
    for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        assert!(sonic_rs::from_slice::<sonic_rs::Value>(line).is_ok());
    }
    Some((lines, gone))
}

#[test]
fn an_avro_update_decodes_to_canonical_values() {
    let (lines, gone) = decode(&good_value(), Some(&good_key())).expect("decoded");
    let text = String::from_utf8(lines).unwrap();
    // Decimal(12,2) of unscaled 0x0102 = 258; NanoTimestamp; int16; float32 0.1 shortest;
    // bytes as standard base64; Date 0 = 1970-01-01; the placeholder in text and bytes columns
    for part in [
        r#""id":1"#,
        r#""name":"é\"x""#,
        r#""amount":"2.58""#,
        r#""t":"2010-11-12T13:14:15.1234567""#,
        r#""small":-300"#,
        r#""r":0.1"#,
        r#""blob":"AP8=""#,
        r#""d":"1970-01-01""#,
        r#""key":{"id":1}"#,
    ] {
        assert!(text.contains(part), "{part} not in {text}");
    }
    assert_eq!(gone, vec!["name".to_string(), "blob".to_string()]);
}

#[test]
fn odd_avro_input_is_declined() {
    let good = good_value();
    // trailing bytes
    let mut v = good.clone();
    v.push(0);
    assert!(decode(&v, Some(&good_key())).is_none());
    // truncated
    assert!(decode(&good[..good.len() - 1], Some(&good_key())).is_none());
    // unknown schema id
    let mut v = good.clone();
    v[4] = 9;
    assert!(decode(&v, Some(&good_key())).is_none());
    // a union index written in two bytes (fastavro reads it; the generated reader does not)
    let mut v = header(1);
    v.extend_from_slice(&[0x82, 0x00]);
    v.extend_from_slice(&good[6..]);
    assert!(decode(&v, Some(&good_key())).is_none());
    // an unknown key schema id
    let mut k = good_key();
    k[4] = 7;
    assert!(decode(&good, Some(&k)).is_none());
    // int16 out of range: the reference writes a dead letter
    assert!(decode(&value_with(32_767), Some(&good_key())).is_some());
    assert!(decode(&value_with(32_768), Some(&good_key())).is_none());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn mutated_avro_never_panics(at in 0usize..400, byte in any::<u8>(), cut in 0usize..400) {
        let mut value = good_value();
        let at = 5 + at % (value.len() - 5);
        value[at] = byte;
        let _ = decode(&value, Some(&good_key()));
        let cut = cut % value.len();
        let _ = decode(&value[..cut], Some(&good_key()));
    }

    #[test]
    fn arbitrary_avro_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..300),
                                        key in proptest::collection::vec(any::<u8>(), 0..20)) {
        let mut value = header(1);
        value.extend_from_slice(&body);
        let mut k = header(2);
        k.extend_from_slice(&key);
        let _ = decode(&value, Some(&k));
        let _ = decode(&value, None);
    }

    #[test]
    fn arbitrary_schemas_never_panic(text in "\\{\"type\":\"(record|enum|fixed|array|map|int)\",\"name\":\"[A-Za-z.]{1,6}\",(\"fields\":\\[(\\{\"name\":\"[a-z]{1,3}\",\"type\":(\"[a-z]{1,6}\"|\\[\"null\",\"[a-zA-Z]{1,6}\"\\])\\},?){0,4}\\]|\"size\":[0-9]{1,3}|\"symbols\":\\[\\]|\"items\":\"int\")\\}") {
        let mut d = Decoder::new(Options::new("x", BinaryMode::Bytes));
        d.add_avro(1, false, Some(&text));
        d.add_avro(1, true, Some(&text));
    }
}
