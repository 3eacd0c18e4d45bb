//! The release step of the Spark job on a batch DataFrame, natively: the rules of
//! `core/windowed.py::WindowState` for one bucket that holds the whole input (no partition
//! marks of earlier calls, no transaction END rows, everything released at the end), with the
//! canonical records written by [`Core`]'s emitter (`Core::emit` / `Core::emit_each`, the
//! same writer as the native translator's).
//!
//! Per position group (table, commit_lsn, change_lsn; initial snapshot rows: one group per
//! key): an event whose identity (serial, op, key) was already seen in its group is a replay
//! (a duplicate when its images are those of the first copy, else a replay mismatch);
//! updates, reads and truncates are emitted at once; deletes and creates wait and are emitted
//! as one merged update as soon as the group holds exactly one of each whose partner-key
//! headers (when present) name each other; at the end every group that still has waiting
//! events is emitted (paired by the core's rules), counted as released by the event-time
//! watermark, as `WindowState.release(2**62)` counts them. The records come out sorted by
//! (seq, event_id).

use crate::core::{hasher, image_digest, sort_key, Config, Core, SortKey};
use crate::event::Event;
use crate::wire;
use std::hash::Hasher;

/// One event as the release step reads it.
pub struct Item {
    pub event: Box<Event>,
    pub commit_ms: i64,
    pub timestamp: Option<i64>,
}

/// A replay whose images differ from the first copy's: what its dead letter needs.
pub struct Mismatch {
    pub topic: String,
    pub partition: i32,
    pub offset: Option<i64>,
    pub timestamp: Option<i64>,
    pub table_id: String,
    pub seq: String,
    pub op: u8,
    pub key: Vec<u8>,
    /// `[before, after, unavailable]` as the reference's `image_bytes` writes it (the images'
    /// members in their canonical order; the Python side re-encodes them sorted).
    pub before: Option<Vec<u8>>,
    pub after: Option<Vec<u8>>,
    pub unavailable: Vec<String>,
}

#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    pub changes_out: i64,
    pub merged: i64,
    pub duplicates: i64,
    pub replay_mismatches: i64,
    pub late: i64,
    pub pending: i64,
    pub released_by_watermark: i64,
    pub released_by_position: i64,
    pub released_by_transaction: i64,
    pub released_by_end: i64,
}

/// (table_id, commit, is an initial snapshot row, change LSN or the snapshot row's key hash)
pub(crate) type GroupKey = (std::sync::Arc<str>, u128, u8, u128);

/// The position group of `e` (`windowed.group_key`; snapshot rows: one group per key).
pub(crate) fn group_key(
    e: &Event,
    table_id: std::sync::Arc<str>,
    sk: SortKey,
    snapshot: bool,
) -> GroupKey {
    let local = if snapshot {
        key_hash(1, e.key_bytes())
    } else {
        sk.1
    };
    (table_id, sk.0, u8::from(snapshot), local)
}

/// The identity of an event in its position group (group, serial, op, key) as a 128-bit hash.
pub(crate) fn identity(group: &GroupKey, serial: i64, op: u8, key: &[u8]) -> u128 {
    let mut a = hasher(5);
    let mut b = hasher(6);
    for h in [&mut a, &mut b] {
        h.write(group.0.as_bytes());
        h.write_u8(0xff);
        h.write_u128(group.1);
        h.write_u8(group.2);
        h.write_u128(group.3);
        h.write_i64(serial);
        h.write_u8(op);
        h.write(key);
    }
    ((a.finish() as u128) << 64) | b.finish() as u128
}

/// What the dead letter of a replay mismatch needs (`WindowState.drain_mismatches`).
pub(crate) fn mismatch_of(core: &Core, e: &Event, timestamp: Option<i64>) -> Mismatch {
    let image = |i: &Option<crate::event::Image>| i.as_ref().map(|i| e.image_bytes(i).to_vec());
    Mismatch {
        topic: core.topics[e.origin.topic as usize].to_string(),
        partition: e.origin.partition,
        offset: e.origin.offset,
        timestamp,
        table_id: core.interner.tables[e.table as usize].table_id.to_string(),
        seq: String::from_utf8_lossy(&e.seq_string()).into_owned(),
        op: e.op,
        key: e.key_bytes().to_vec(),
        before: image(&e.before),
        after: image(&e.after),
        unavailable: e.unavailable.iter().map(|u| u.to_string()).collect(),
    }
}

/// The indexes of the records `core` wrote, in (seq, event_id) order.
pub fn sorted_lines(core: &Core) -> Vec<usize> {
    let text = |span| crate::jsonw::token_bytes(&core.out, span).unwrap_or_default();
    let keys: Vec<_> = core
        .spans
        .iter()
        .map(|s| (text(s[2]), text(s[5])))
        .collect();
    stable_order(&keys)
}

/// The indexes of `keys` in stable sorted order. The core writes its lines in a few ascending
/// runs (released groups in order, then what waited), so up to [`MERGED_RUNS`] runs are merged
/// one after the other (linear per run); more are sorted.
fn stable_order<K: Ord>(keys: &[K]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    let ends: Vec<usize> = keys
        .windows(2)
        .enumerate()
        .filter(|(_, w)| w[0] > w[1])
        .map(|(i, _)| i + 1)
        .collect();
    if ends.len() >= MERGED_RUNS {
        order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
        return order;
    }
    let mut merged: Vec<usize> = Vec::with_capacity(keys.len());
    let bounds: Vec<usize> = ends.into_iter().chain([keys.len()]).collect();
    for run in bounds.windows(2) {
        let (start, end) = (run[0], run[1]);
        merged.clear();
        let (mut i, mut j) = (0, start);
        while i < start && j < end {
            // ties keep the earlier line first
            if keys[order[i]] <= keys[j] {
                merged.push(order[i]);
                i += 1;
            } else {
                merged.push(j);
                j += 1;
            }
        }
        merged.extend_from_slice(&order[i..start]);
        merged.extend(j..end);
        order[..end].copy_from_slice(&merged);
    }
    order
}

/// How many ascending runs of output lines [`stable_order`] merges before it sorts instead.
const MERGED_RUNS: usize = 8;

/// The indexes of `events` in `_arrival_order`: position order; copies of one event (replays)
/// by their Kafka coordinates (`topic` ranks a topic id as its name sorts), so the same copy
/// is kept whichever order a shuffle delivered them in.
pub(crate) fn arrival_order<'a, T: Ord>(
    events: impl Iterator<Item = &'a Event>,
    topic: impl Fn(u32) -> T,
) -> Vec<(SortKey, T, i32, i64, usize)> {
    let mut order: Vec<_> = events
        .enumerate()
        .map(|(i, e)| {
            let o = &e.origin;
            (
                sort_key(e),
                topic(o.topic),
                o.partition,
                o.offset.unwrap_or(-1),
                i,
            )
        })
        .collect();
    order.sort_unstable();
    order
}

/// A 128-bit hash of `data` (fixed seeds: the same in every process).
pub(crate) fn key_hash(seed: u64, data: &[u8]) -> u128 {
    let mut a = hasher(seed << 1);
    let mut b = hasher((seed << 1) | 1);
    a.write(data);
    b.write(data);
    ((a.finish() as u128) << 64) | b.finish() as u128
}

/// The release of one bucket of a batch DataFrame.
pub struct BatchWindow {
    pub core: Core,
    pub reader: wire::Reader,
    items: Vec<Item>,
    pub counts: Counts,
    pub mismatches: Vec<Mismatch>,
    incremental: u32,
}

/// The emitter of a release step (no pressure release, no dedupe memory: the windows keep
/// their own; each line's lineage kept for the output rows) and the interned id of the
/// `incremental` snapshot marker.
pub(crate) fn window_core(pair_key_changes: bool) -> (Core, u32) {
    let mut core = Core::new(Config {
        pair_key_changes,
        max_pending: i64::MAX,
        dedupe_capacity: 0,
    });
    core.keep_lineage = true;
    let incremental = core.interner.snapshot("incremental");
    (core, incremental)
}

impl Counts {
    /// changes_out, merged, duplicates, replay_mismatches, late, pending, released by
    /// position, transaction, end, watermark (`spark.translate.RELEASE_COUNTERS` order).
    pub fn as_tuple(&self) -> (i64, i64, i64, i64, i64, i64, i64, i64, i64, i64) {
        (
            self.changes_out,
            self.merged,
            self.duplicates,
            self.replay_mismatches,
            self.late,
            self.pending,
            self.released_by_position,
            self.released_by_transaction,
            self.released_by_end,
            self.released_by_watermark,
        )
    }
}

/// A copy of an identity seen before in its group: a duplicate when its images are those of
/// the first copy (`same`), else a replay mismatch (its dead letter's record kept).
pub(crate) fn repeated(
    core: &Core,
    counts: &mut Counts,
    mismatches: &mut Vec<Mismatch>,
    e: &Event,
    timestamp: Option<i64>,
    same: bool,
) {
    if same {
        counts.duplicates += 1;
    } else {
        counts.replay_mismatches += 1;
        mismatches.push(mismatch_of(core, e, timestamp));
    }
}

impl BatchWindow {
    fn repeated(&mut self, e: &Event, timestamp: Option<i64>, same: bool) {
        repeated(
            &self.core,
            &mut self.counts,
            &mut self.mismatches,
            e,
            timestamp,
            same,
        );
    }

    pub fn new(pair_key_changes: bool) -> Self {
        let (core, incremental) = window_core(pair_key_changes);
        BatchWindow {
            core,
            reader: wire::Reader::default(),
            items: Vec::new(),
            counts: Counts::default(),
            mismatches: Vec::new(),
            incremental,
        }
    }

    /// Take one staged event on its own ([`wire::write`]) and its commit time.
    pub fn push(&mut self, data: &[u8], commit_ms: i64) -> Result<(), wire::BadWire> {
        self.reader.begin();
        self.take(data, commit_ms)
    }

    /// Take the staged events of one packed value (the decode step's rows, [`wire::pack`]).
    pub fn push_packed(&mut self, packed: &[u8]) -> Result<(), wire::BadWire> {
        self.reader.begin();
        wire::unpack(packed, |data, ms| self.take(data, ms))
    }

    fn take(&mut self, data: &[u8], commit_ms: i64) -> Result<(), wire::BadWire> {
        let mut read = self
            .reader
            .read(data, &mut self.core.interner, &mut self.core.spare)?;
        // the writer names topics by the core's ids
        let name = self.reader.topics[read.topic as usize].clone();
        read.event.origin.topic = self.core.topic(&name);
        self.items.push(Item {
            event: read.event,
            commit_ms,
            timestamp: read.timestamp,
        });
        Ok(())
    }

    /// Dedupe, pair and release everything taken (the whole input: a batch DataFrame); the
    /// records are then in `core.out` (see [`BatchWindow::sorted_lines`]).
    pub fn release_all(&mut self) {
        let items = std::mem::take(&mut self.items);
        // position order; copies of one event by their Kafka coordinates (topics by name)
        let mut topic_rank: Vec<u32> = vec![0; self.core.topics.len()];
        {
            let mut by_name: Vec<u32> = (0..self.core.topics.len() as u32).collect();
            by_name
                .sort_by(|&a, &b| self.core.topics[a as usize].cmp(&self.core.topics[b as usize]));
            for (rank, &t) in by_name.iter().enumerate() {
                topic_rank[t as usize] = rank as u32;
            }
        }
        let order = arrival_order(items.iter().map(|it| &*it.event), |t| {
            topic_rank[t as usize]
        });
        let mut slots: Vec<Option<Item>> = items.into_iter().map(Some).collect();
        let pair = self.core.config.pair_key_changes;
        // identity (group, serial, op, key) -> image digest of its first copy
        let mut seen: hashbrown::HashMap<u128, u64> =
            hashbrown::HashMap::with_capacity(order.len());
        let mut groups: hashbrown::HashMap<GroupKey, Vec<Box<Event>>> = hashbrown::HashMap::new();
        let mut ready: Vec<Box<Event>> = Vec::with_capacity(order.len());
        let total: usize = slots
            .iter()
            .flatten()
            .map(|i| i.event.buf.len() * 2 + 600)
            .sum();
        self.core.out.reserve(total);
        for &(sk, _, _, _, index) in &order {
            let Some(item) = slots[index].take() else {
                continue;
            };
            let e = item.event;
            let table_id = self.core.interner.tables[e.table as usize].table_id.clone();
            let snapshot = e.is_snapshot_identity(self.incremental);
            let group = group_key(&e, table_id, sk, snapshot);
            let identity = identity(&group, sk.2, e.op, e.key_bytes());
            let digest = image_digest(&e);
            match seen.entry(identity) {
                // a keyless table's row read in a snapshot has no identity
                _ if e.is_keyless_read() => {}
                hashbrown::hash_map::Entry::Occupied(first) => {
                    let same = *first.get() == digest;
                    self.repeated(&e, item.timestamp, same);
                    continue;
                }
                hashbrown::hash_map::Entry::Vacant(slot) => {
                    slot.insert(digest);
                }
            }
            if !pair || (e.op != b'd' && e.op != b'c') {
                ready.push(e);
                continue;
            }
            let waiting = groups.entry(group).or_default();
            waiting.push(e);
            self.counts.pending += 1;
            if let Some((d, c)) = complete_pair(waiting) {
                self.counts.pending -= 2;
                self.core.emit(vec![d, c]);
            }
        }
        self.core.emit_each(ready);
        let mut left: Vec<(GroupKey, Vec<Box<Event>>)> = groups
            .into_iter()
            .filter(|(_, waiting)| !waiting.is_empty())
            .collect();
        left.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, mut waiting) in left {
            let n = waiting.len() as i64;
            self.counts.pending -= n;
            self.counts.released_by_watermark += n;
            waiting.sort_by_key(|e| sort_key(e));
            self.core.emit(waiting);
        }
        self.counts.changes_out = self.core.counters.changes_out;
        self.counts.merged = self.core.counters.merged;
    }

    /// The indexes of the records written, in (seq, event_id) order.
    pub fn sorted_lines(&self) -> Vec<usize> {
        sorted_lines(&self.core)
    }
}

/// `WindowState._pair_complete`: exactly one delete and one create whose partner keys (when
/// given) name each other.
pub(crate) fn complete_pair(waiting: &mut Vec<Box<Event>>) -> Option<(Box<Event>, Box<Event>)> {
    if waiting.len() != 2 || waiting[0].op == waiting[1].op {
        return None;
    }
    let (di, ci) = if waiting[0].op == b'd' {
        (0, 1)
    } else {
        (1, 0)
    };
    let (d, c) = (&waiting[di], &waiting[ci]);
    if d.partner_key.as_deref().is_some_and(|p| p != c.key_bytes())
        || c.partner_key.as_deref().is_some_and(|p| p != d.key_bytes())
    {
        return None;
    }
    let second = waiting.pop()?;
    let first = waiting.pop()?;
    Some(if di == 0 {
        (first, second)
    } else {
        (second, first)
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::decode::{Decoder, Input};
    use crate::schema::{BinaryMode, Options};

    pub(crate) fn envelope(op: &str, id: i64, commit: &str, change: &str, serial: i64) -> String {
        let before = if op == "c" {
            "null".to_string()
        } else {
            format!("{{\"id\":{id},\"v\":\"b\"}}")
        };
        let after = if op == "d" {
            "null".to_string()
        } else {
            format!("{{\"id\":{id},\"v\":\"a\"}}")
        };
        format!(
            "{{\"before\":{before},\"after\":{after},\"source\":{{\"version\":\"2.5.0.Final\",\
             \"connector\":\"sqlserver\",\"name\":\"srv\",\"ts_ms\":1700000000000,\
             \"snapshot\":\"false\",\"db\":\"db\",\"schema\":\"dbo\",\"table\":\"t\",\
             \"change_lsn\":\"{change}\",\"commit_lsn\":\"{commit}\",\"event_serial_no\":{serial}}},\
             \"op\":\"{op}\",\"ts_ms\":1700000000001,\"transaction\":null}}"
        )
    }

    /// Decode `values` (key `{"id": n}`) natively and write them as the decode step does.
    pub(crate) fn staged(values: &[(i64, i64, String)]) -> Vec<Vec<u8>> {
        let mut decoder = Decoder::new(Options::new(
            "__debezium_unavailable_value",
            BinaryMode::Bytes,
        ));
        let mut interner = crate::decode::Interner::default();
        values
            .iter()
            .map(|(offset, id, value)| {
                let key = format!("{{\"id\":{id}}}");
                let input = Input {
                    topic: "srv.db.dbo.t",
                    topic_id: 0,
                    partition: 0,
                    offset: Some(*offset),
                    tp: 0,
                    key: Some(key.as_bytes()),
                    value: value.as_bytes(),
                    has_headers: false,
                    newkey: None,
                    oldkey: None,
                };
                let e = decoder
                    .decode(&input, &mut interner, &mut Default::default())
                    .expect("decoded");
                let mut out = Vec::new();
                wire::write(
                    &mut out,
                    &e,
                    "srv.db.dbo.t",
                    Some(5),
                    &interner,
                    &mut Default::default(),
                );
                out
            })
            .collect()
    }

    fn run(payloads: &[Vec<u8>]) -> (BatchWindow, Vec<String>) {
        let mut w = BatchWindow::new(true);
        for p in payloads {
            w.push(p, 1_700_000_000_000).expect("read");
        }
        w.release_all();
        let lines: Vec<String> = String::from_utf8(w.core.out.clone())
            .expect("utf8")
            .lines()
            .map(str::to_string)
            .collect();
        let order = w.sorted_lines();
        let sorted = order.iter().map(|&i| lines[i].clone()).collect();
        (w, sorted)
    }

    pub(crate) const C1: &str = "0000002a:00000100:0001";
    pub(crate) const C2: &str = "0000002a:00000200:0001";

    #[test]
    fn wire_round_trip_keeps_the_canonical_record() {
        let p = staged(&[(1, 1, envelope("u", 1, C1, C1, 1))]);
        let (w, lines) = run(&p);
        assert_eq!(lines.len(), 1);
        assert_eq!(w.counts.changes_out, 1);
        assert!(lines[0].contains("\"op\":\"update\""));
        assert!(lines[0]
            .contains("\"lineage\":[{\"topic\":\"srv.db.dbo.t\",\"partition\":0,\"offset\":1}]"));
    }

    #[test]
    fn a_key_change_pairs_across_input_order_and_replays_are_dropped() {
        // the create arrives before the delete; the delete is replayed once
        let p = staged(&[
            (2, 2, envelope("c", 2, C1, C1, 2)),
            (1, 1, envelope("d", 1, C1, C1, 1)),
            (3, 1, envelope("d", 1, C1, C1, 1)),
        ]);
        let (w, lines) = run(&p);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("\"key_changed\":true"));
        assert_eq!(w.counts.merged, 1);
        assert_eq!(w.counts.duplicates, 1);
        assert_eq!(w.counts.pending, 0);
        assert_eq!(w.counts.released_by_watermark, 0);
    }

    #[test]
    fn unpaired_halves_wait_until_the_end_and_come_out_in_seq_order() {
        let p = staged(&[
            (2, 2, envelope("c", 2, C2, C2, 1)),
            (1, 1, envelope("d", 1, C1, C1, 1)),
        ]);
        let (w, lines) = run(&p);
        assert_eq!(w.counts.released_by_watermark, 2);
        assert_eq!(w.counts.changes_out, 2);
        assert!(lines[0].contains("\"op\":\"delete\""));
        assert!(lines[1].contains("\"op\":\"insert\""));
    }

    #[test]
    fn a_replay_with_other_images_is_a_mismatch() {
        let mut other = envelope("u", 1, C1, C1, 1);
        other = other.replace("\"v\":\"a\"", "\"v\":\"z\"");
        let p = staged(&[(1, 1, envelope("u", 1, C1, C1, 1)), (2, 1, other)]);
        let (w, lines) = run(&p);
        assert_eq!(lines.len(), 1);
        assert_eq!(w.counts.replay_mismatches, 1);
        assert_eq!(w.mismatches[0].offset, Some(2));
        assert_eq!(w.mismatches[0].timestamp, Some(5));
    }

    proptest::proptest! {
        /// Merged runs or a sort: the order a stable sort gives, for few and many runs.
        #[test]
        fn stable_order_is_a_stable_sort(
            keys in proptest::collection::vec(0u8..6, 0..300),
            runs in 1usize..12,
        ) {
            // (key, tag) pairs in about `runs` ascending runs; tags repeat, so ties test stability
            let chunk = keys.len() / runs + 1;
            let mut lines: Vec<(u8, usize)> = Vec::new();
            for part in keys.chunks(chunk) {
                let mut part = part.to_vec();
                part.sort();
                for k in part {
                    lines.push((k, lines.len() % 3));
                }
            }
            let mut expected: Vec<usize> = (0..lines.len()).collect();
            expected.sort_by(|&a, &b| lines[a].cmp(&lines[b]));
            proptest::prop_assert_eq!(stable_order(&lines), expected);
        }
    }
}
