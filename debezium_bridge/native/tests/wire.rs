//! The staged-event bytes of the Spark steps (`wire.rs`), the batch window (`window.rs`) and
//! the streaming window's state bytes (`stream.rs`) on arbitrary and mutated input: reading
//! never panics (bad bytes are an error, which the extension maps to a Python exception), and
//! a window fed (or loaded from) what could be read releases it without a panic either.

use _native::decode::{Decoder, Input, Interner};
use _native::event::{Event, SpareBuffers};
use _native::schema::{BinaryMode, Options};
use _native::stream::{StreamWindow, Topology};
use _native::window::BatchWindow;
use _native::wire;
use proptest::prelude::*;

fn staged(op: &str, id: i64, serial: i64) -> Vec<u8> {
    staged_with(op, id, serial, "b")
}

/// The key and value of a Debezium envelope (JsonConverter, no schema) of table `t`.
fn envelope(op: &str, id: i64, serial: i64, text: &str) -> (String, String) {
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
    (key, value)
}

/// `event` staged as topic `srv.db.dbo.t` with Kafka timestamp 1.
fn written(event: &Event, interner: &Interner, repeats: &mut wire::Repeats) -> Vec<u8> {
    let mut out = Vec::new();
    wire::write(&mut out, event, "srv.db.dbo.t", Some(1), interner, repeats);
    out
}

/// Events of table `t` decoded by one decoder, as the decode step reads them.
struct Staging {
    decoder: Decoder,
    interner: Interner,
}

impl Staging {
    fn new() -> Self {
        let options = Options::new("__debezium_unavailable_value", BinaryMode::Bytes);
        Staging {
            decoder: Decoder::new(options),
            interner: Interner::default(),
        }
    }

    /// The event `(op, id, serial)` at `offset`, written (Kafka timestamp 1) after the event
    /// `repeats` remembers.
    fn write(
        &mut self,
        (op, id, serial, text): (&str, i64, i64, &str),
        offset: i64,
        repeats: &mut wire::Repeats,
    ) -> Vec<u8> {
        let (key, value) = envelope(op, id, serial, text);
        let input = Input {
            topic: "srv.db.dbo.t",
            topic_id: 0,
            partition: 1,
            offset: Some(offset),
            tp: 0,
            key: Some(key.as_bytes()),
            value: value.as_bytes(),
            has_headers: false,
            newkey: None,
            oldkey: None,
        };
        let event = self
            .decoder
            .decode(&input, &mut self.interner, &mut Default::default())
            .expect("a valid envelope");
        written(&event, &self.interner, repeats)
    }
}

fn staged_with(op: &str, id: i64, serial: i64, text: &str) -> Vec<u8> {
    Staging::new().write((op, id, serial, text), 7, &mut Default::default())
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
    let out = written(&event, &interner, &mut Default::default());
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

/// The events `(op, id, serial)` decoded by one decoder and packed into one value as the
/// decode step packs a bucket's events (commit time 5 each), and each written on its own.
fn packed(events: &[(&str, i64, i64)]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let (mut staging, mut apart) = (Staging::new(), Staging::new());
    let mut repeats = wire::Repeats::default();
    let (mut out, mut singles) = (Vec::new(), Vec::new());
    for (offset, &(op, id, serial)) in events.iter().enumerate() {
        let event = (op, id, serial, "b");
        let data = staging.write(event, offset as i64, &mut repeats);
        wire::pack(&mut out, &data, 5);
        singles.push(apart.write(event, offset as i64, &mut Default::default()));
    }
    (out, singles)
}

const KEY_CHANGE: [(&str, i64, i64); 3] = [("d", 1, 1), ("c", 2, 2), ("u", 3, 1)];

#[test]
fn packed_events_release_as_the_same_events_on_their_own() {
    let (packed, singles) = packed(&KEY_CHANGE);
    let total: usize = singles.iter().map(|s| s.len() + 12).sum();
    // the second and third events leave out topic, table, snapshot marker and source
    assert!(
        packed.len() + 2 * 150 < total,
        "{} against {total}",
        packed.len()
    );
    let mut together = BatchWindow::new(true);
    together.push_packed(&packed).expect("readable");
    together.release_all();
    let mut apart = BatchWindow::new(true);
    for single in &singles {
        apart.push(single, 5).expect("readable");
    }
    apart.release_all();
    let lines = together.sorted_lines();
    assert_eq!(
        lines.len(),
        2,
        "the key change merged, the update on its own"
    );
    assert_eq!(lines, apart.sorted_lines());
}

#[test]
fn a_packed_event_cannot_lean_on_an_event_outside_its_value() {
    let (packed, _) = packed(&KEY_CHANGE);
    let mut events = Vec::new();
    wire::unpack(&packed, |data, _| {
        events.push(data.to_vec());
        Ok(())
    })
    .expect("packed");
    assert_eq!(
        events[1][1], 0b1111,
        "the second event repeats all four parts"
    );
    let mut window = BatchWindow::new(true);
    window
        .push(&events[0], 5)
        .expect("the first event stands on its own");
    assert!(window.push(&events[1], 5).is_err());
    let mut rest = Vec::new();
    wire::pack(&mut rest, &events[1], 5);
    assert!(window.push_packed(&rest).is_err());
}

#[test]
fn waiting_events_of_a_packed_value_are_kept_on_their_own() {
    // the delete follows an update in its packed value, so it leans on it there (mask 0b1111);
    // the state keeps it written on its own: a fresh window loads it and pairs it
    let (value, singles) = packed(&[("u", 3, 1), ("d", 1, 1)]);
    let mut second = Vec::new();
    wire::unpack(&value, |data, _| {
        second = data.to_vec();
        Ok(())
    })
    .expect("packed");
    assert_eq!(second[1], 0b1111);
    let mut w = StreamWindow::new(true, Topology::default());
    w.push_packed(&value).expect("read");
    w.add(0);
    w.release(0);
    let state = w.dump();
    let mut from_single = StreamWindow::new(true, Topology::default());
    for single in &singles {
        from_single.push(single, 5).expect("read");
    }
    from_single.add(0);
    from_single.release(0);
    assert_eq!(
        state,
        from_single.dump(),
        "the same state as the events staged on their own"
    );
    let mut later = StreamWindow::new(true, Topology::default());
    later.load(&state).expect("a state of its own events");
    assert_eq!(later.waiting_events(), 1);
    pairs_with_a_create(&mut later);
}

/// A window whose one waiting event is the delete of key 1: a create of key 2 in the same
/// position group (serial 2) comes in, and the two leave as one key change.
fn pairs_with_a_create(w: &mut StreamWindow) {
    let (create, _) = packed(&[("c", 2, 2)]);
    w.push_packed(&create).expect("read");
    w.add(0);
    w.release(0);
    let out = String::from_utf8(w.core.out.clone()).expect("utf8");
    assert_eq!(out.lines().count(), 1, "{out}");
    for part in [
        "\"op\":\"update\"",
        "\"key\":{\"id\":2}",
        "\"old_key\":{\"id\":1}",
        "\"key_changed\":true",
        "\"before\":{\"id\":1,\"v\":\"b\"}",
    ] {
        assert!(out.contains(part), "{part} in {out}");
    }
}

/// A state the native core wrote at commit 5d6b823 (state version 1, its waiting delete in
/// wire format 1), by `tests/data/stream-state-v1.py` with that commit's extension.
const STATE_V1: &[u8] = include_bytes!("data/stream-state-v1.bin");

#[test]
fn a_state_of_the_previous_version_loads_and_its_delete_pairs() {
    let mut w = StreamWindow::new(true, Topology::default());
    w.load(STATE_V1).expect("a version 1 state");
    assert_eq!(w.waiting_events(), 1);
    let mut unknown = STATE_V1.to_vec();
    unknown[4] = 3;
    assert!(StreamWindow::new(true, Topology::default())
        .load(&unknown)
        .is_err());
    let again = w.dump();
    assert_eq!(&again[..5], b"DBNW\x02");
    let mut reloaded = StreamWindow::new(true, Topology::default());
    reloaded.load(&again).expect("its version 2 dump");
    assert_eq!(reloaded.waiting_events(), 1);
    pairs_with_a_create(&mut w);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn mutated_packed_values_never_panic(ops in proptest::collection::vec((any::<u8>(), 0usize..2000), 1..4)) {
        let (mut data, _) = packed(&KEY_CHANGE);
        for (byte, at) in ops {
            let at = at % data.len();
            data[at] = byte;
        }
        let mut window = BatchWindow::new(true);
        let _ = window.push_packed(&data);
        window.release_all();
        let _ = window.sorted_lines();
        let mut w = StreamWindow::new(true, Topology::default());
        let _ = w.push_packed(&data);
        w.add(0);
        w.release(i64::MAX);
        let _ = w.dump();
    }
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
