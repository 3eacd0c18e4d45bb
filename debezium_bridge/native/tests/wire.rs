//! The staged-event bytes of the Spark steps (`wire.rs`), the batch window (`window.rs`) and
//! the streaming window's state bytes (`stream.rs`) on arbitrary and mutated input: reading
//! never panics (bad bytes are an error, which the extension maps to a Python exception), and
//! a window fed (or loaded from) what could be read releases it without a panic either.

use _native::decode::{Decoder, Input, Interner};
use _native::event::SpareBuffers;
use _native::schema::{BinaryMode, Options};
use _native::stream::{StreamWindow, Topology};
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
        .decode(&input, &mut interner, &mut Default::default())
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
    let mut spare = SpareBuffers::default();
    let read = wire::Reader::default()
        .read(&data, &mut interner, &mut spare)
        .expect("readable");
    assert_eq!(read.timestamp, Some(1));
    assert_eq!(read.event.key_bytes(), b"{\"id\":3}");
    assert_eq!(read.event.origin.offset, Some(7));
    assert!(wire::Reader::default()
        .read(&data[..data.len() - 1], &mut interner, &mut spare)
        .is_err());
}

#[test]
fn an_update_mask_travels_with_the_event() {
    // change-table events carry the columns their update mask names (`ChangeEvent.changed`)
    let data = staged("u", 3, 1);
    let mut interner = Interner::default();
    let mut event = wire::Reader::default()
        .read(&data, &mut interner, &mut SpareBuffers::default())
        .expect("readable")
        .event;
    assert!(event.changed.is_none());
    event.changed = Some(vec!["v".to_string()].into());
    let mut out = Vec::new();
    wire::write(&mut out, &event, "srv.db.dbo.t", Some(1), &interner);
    let read = wire::Reader::default()
        .read(&out, &mut interner, &mut SpareBuffers::default())
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

/// A state holding two waiting deletes (one position group: no pair).
fn state() -> Vec<u8> {
    let mut w = StreamWindow::new(true, Topology::default());
    w.push(&staged("d", 1, 1), 5).expect("read");
    w.push(&staged("d", 2, 3), 5).expect("read");
    w.add(0);
    w.release(0);
    w.dump()
}

fn exercise(w: &mut StreamWindow) {
    let _ = w.push(&staged("c", 2, 2), 5);
    w.add(0);
    w.release(i64::MAX);
    let _ = w.dump();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_stream_state_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut w = StreamWindow::new(true, Topology::default());
        let mut prefixed = b"DBNW\x01".to_vec();
        prefixed.extend_from_slice(&data);
        for bytes in [&data, &prefixed] {
            if w.load(bytes).is_ok() {
                exercise(&mut w);
            }
            w = StreamWindow::new(true, Topology::default());
        }
    }

    #[test]
    fn mutated_stream_states_never_panic(ops in proptest::collection::vec((any::<u8>(), 0usize..2000), 1..4)) {
        let mut data = state();
        for (byte, at) in ops {
            let at = at % data.len();
            data[at] = byte;
        }
        let mut w = StreamWindow::new(true, Topology::default());
        if w.load(&data).is_ok() {
            exercise(&mut w);
        }
    }
}

#[test]
fn a_state_reads_back_as_written() {
    let data = state();
    let mut w = StreamWindow::new(true, Topology::default());
    w.load(&data).expect("its own state");
    assert_eq!(w.waiting_events(), 2);
    assert_eq!(w.dump(), data);
}
