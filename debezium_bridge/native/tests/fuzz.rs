//! Fuzzing of the native decoders on arbitrary bytes (proptest, part of `cargo test`): no
//! input panics; each either decodes or is declined (then the Python reference decides, and
//! bad input becomes a dead letter there).

use _native::core::{Config, Core};
use _native::decode::{Decoder, Input};
use _native::schema::{BinaryMode, Options};
use proptest::prelude::*;

const GOOD: &str = r#"{"before":null,"after":{"id":1,"name":"a","amount":"AQI=","t":1700000000123456700},"source":{"version":"3.6.3.Final","connector":"sqlserver","name":"server1","ts_ms":1700000000000,"snapshot":"false","db":"testDB","sequence":null,"schema":"dbo","table":"customers","change_lsn":"00000027:00000758:0003","commit_lsn":"00000027:00000758:0005","event_serial_no":1},"transaction":null,"op":"c","ts_ms":1700000000100}"#;

const SCHEMA_PREFIX: &str = r#"{"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"field":"name"},{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2","connect.decimal.precision":"12"},"field":"amount"},{"type":"int64","optional":true,"name":"io.debezium.time.NanoTimestamp","field":"t"}],"optional":true,"field":"after"}],"optional":false},"payload":"#;

fn run(value: &[u8], key: Option<&[u8]>, header: Option<&[u8]>) {
    let mut core = Core::new(Config {
        pair_key_changes: true,
        max_pending: 3,
        dedupe_capacity: 8,
    });
    let mut decoder = Decoder::new(Options::new(
        "__debezium_unavailable_value",
        BinaryMode::Bytes,
    ));
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
        has_headers: header.is_some(),
        newkey: header.map(Some),
        oldkey: header.map(Some),
    };
    for _ in 0..2 {
        if let Ok(event) = decoder.decode(&input, &mut core.interner, &mut core.spare) {
            let _ = core.accept(event);
        }
    }
    core.flush();
    let (lines, _) = core.take_output();
    // whatever is written is one JSON document per line
    for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        assert!(
            sonic_rs::from_slice::<sonic_rs::Value>(line).is_ok(),
            "{}",
            String::from_utf8_lossy(line)
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(value in proptest::collection::vec(any::<u8>(), 0..400),
                                   key in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..60))) {
        run(&value, key.as_deref(), None);
        let mut braced = b"{".to_vec();
        braced.extend_from_slice(&value);
        run(&braced, key.as_deref(), Some(&value));
    }

    #[test]
    fn mutated_envelopes_never_panic(cut in 0usize..GOOD.len(), byte in any::<u8>(),
                                     at in 0usize..GOOD.len(), schema in any::<bool>()) {
        let mut value = if schema { format!("{SCHEMA_PREFIX}{GOOD}}}").into_bytes() } else { GOOD.as_bytes().to_vec() };
        let at = at.min(value.len() - 1);
        value[at] = byte;
        run(&value, Some(br#"{"id":1}"#), None);
        run(&value[..cut.min(value.len())], Some(br#"{"id":1}"#), None);
    }

    #[test]
    fn json_texts_never_panic(text in "\\{(\"[a-z_]{1,8}\":(null|true|-?[0-9]{1,25}(\\.[0-9]{1,5})?(e-?[0-9]{1,3})?|\"[a-z\\\\u0-9]{0,12}\"|\\[\\]|\\{\\}),){0,8}\"op\":\"[cudrtmx]\"\\}") {
        run(text.as_bytes(), Some(br#"{"id":1}"#), None);
    }
}

#[test]
fn the_good_envelope_decodes() {
    let mut core = Core::new(Config {
        pair_key_changes: true,
        max_pending: 100,
        dedupe_capacity: 8,
    });
    let mut decoder = Decoder::new(Options::new(
        "__debezium_unavailable_value",
        BinaryMode::Bytes,
    ));
    let topic = core.topic("t");
    let tp = core.tp(topic, 0);
    for value in [GOOD.to_string(), format!("{SCHEMA_PREFIX}{GOOD}}}")] {
        let input = Input {
            topic: "t",
            topic_id: topic,
            partition: 0,
            offset: Some(1),
            tp,
            key: Some(br#"{"id":1}"#),
            value: value.as_bytes(),
            has_headers: false,
            newkey: None,
            oldkey: None,
        };
        assert!(decoder
            .decode(&input, &mut core.interner, &mut core.spare)
            .is_ok());
    }
}

/// A schema-ful key or value whose payload is a JSON string with escapes: sonic-rs hands
/// such a value over as its own unescaped copy, not a slice of the input (found by the
/// differential fuzzing of both cores, which panicked here).
#[test]
fn a_payload_that_is_an_escaped_string_is_declined_without_panic() {
    let key = br#"{"schema":{"type":"struct","optional":false,"name":"server1.testDB.dbo.customers.Key","fields":["{\"type\": \"int32\", \"optional\": false, \"field\": \"id\"}"]},"payload":"{\"id\": 1}"}"#;
    let value = br#"{"schema":{"type":"struct","fields":[]},"payload":"{\"op\": \"c\"}"}"#;
    run(GOOD.as_bytes(), Some(key), None);
    run(value, Some(key), Some(key));
}
