//! The staged-event bytes of the Spark steps (`wire.rs`) and the batch window (`window.rs`)
//! on arbitrary and mutated input: reading never panics (bad bytes are an error, which the
//! extension maps to a Python exception), and a window fed what could be read releases it
//! without a panic either.

use _native::decode::{Decoder, Input, Interner};
use _native::schema::{BinaryMode, Options};
use _native::window::BatchWindow;
use _native::wire;
use proptest::prelude::*;

fn staged(op: &str, id: i64, serial: i64) -> Vec<u8> {
    staged_with(op, id, serial, "b")
}

fn staged_with(op: &str, id: i64, serial: i64, text: &str) -> Vec<u8> {
    let before = if op == "c" {
        "null".to_string()
    } else {
        format!("{{\"id\":{id},\"v\":\"{text}\"}}")
    };
    let after = if op == "d" {
        "null".to_string()
    } else {
        format!("{{\"id\":{id},\"v\":\"a\"}}")
    };
    let value = format!(
        "{{\"before\":{before},\"after\":{after},\"source\":{{\"version\":\"2.5.0.Final\",\
         \"connector\":\"sqlserver\",\"name\":\"srv\",\"ts_ms\":1700000000000,\
         \"snapshot\":\"false\",\"db\":\"db\",\"schema\":\"dbo\",\"table\":\"t\",\
         \"change_lsn\":\"0000002a:00000100:0001\",\"commit_lsn\":\"0000002a:00000100:0001\",\
         \"event_serial_no\":{serial}}},\"op\":\"{op}\",\"ts_ms\":1700000000001,\"transaction\":null}}"
    );
    let key = format!("{{\"id\":{id}}}");
    let mut decoder = Decoder::new(Options::new(
        "__debezium_unavailable_value",
        BinaryMode::Bytes,
    ));
    let mut interner = Interner::default();
    let input = Input {
        topic: "srv.db.dbo.t",
        topic_id: 0,
        partition: 1,
        offset: Some(7),
        tp: 0,
        key: Some(key.as_bytes()),
        value: value.as_bytes(),
        has_headers: false,
        newkey: None,
        oldkey: None,
    };
    let event = decoder
        .decode(&input, &mut interner)
        .expect("a valid envelope");
    let mut out = Vec::new();
    wire::write(&mut out, &event, "srv.db.dbo.t", Some(1), &interner);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut window = BatchWindow::new(true);
        let _ = window.push(&data, 0);
        window.release_all();
    }

    #[test]
    fn mutated_events_never_panic(ops in proptest::collection::vec((0usize..3, any::<u8>(), 0usize..400), 1..6)) {
        let originals = [staged("d", 1, 1), staged("c", 2, 2), staged("u", 3, 1)];
        let mut window = BatchWindow::new(true);
        for (which, byte, at) in ops {
            let mut data = originals[which].clone();
            let at = at % data.len();
            data[at] = byte;
            let _ = window.push(&data, 0);
            let _ = window.push(&originals[which], 0);
        }
        window.release_all();
        let _ = window.sorted_lines();
    }
}

#[test]
fn a_staged_event_reads_back() {
    let data = staged("u", 3, 1);
    let mut interner = Interner::default();
    let read = wire::Reader::default()
        .read(&data, &mut interner)
        .expect("readable");
    assert_eq!(read.timestamp, Some(1));
    assert_eq!(read.event.key_bytes(), b"{\"id\":3}");
    assert_eq!(read.event.origin.offset, Some(7));
    assert!(wire::Reader::default()
        .read(&data[..data.len() - 1], &mut interner)
        .is_err());
}

#[test]
fn an_update_mask_travels_with_the_event() {
    // change-table events carry the columns their update mask names (`ChangeEvent.changed`)
    let data = staged("u", 3, 1);
    let mut interner = Interner::default();
    let mut event = wire::Reader::default()
        .read(&data, &mut interner)
        .expect("readable")
        .event;
    assert!(event.changed.is_none());
    event.changed = Some(vec!["v".to_string()].into());
    let mut out = Vec::new();
    wire::write(&mut out, &event, "srv.db.dbo.t", Some(1), &interner);
    let read = wire::Reader::default()
        .read(&out, &mut interner)
        .expect("readable");
    assert_eq!(read.event.changed.as_deref(), Some(&["v".to_string()][..]));
}

#[test]
fn events_beyond_64k_keep_their_member_spans() {
    let long = "x".repeat(70_000);
    let data = staged_with("u", 3, 1, &long);
    let mut window = BatchWindow::new(true);
    window.push(&data, 0).expect("readable");
    window.release_all();
    let out = String::from_utf8(window.core.out.clone()).expect("utf8");
    assert!(out.contains(&format!("\"before\":{{\"id\":3,\"v\":\"{long}\"}}")));
    assert!(out.contains("\"changed_columns\":[\"v\"]"));
}
