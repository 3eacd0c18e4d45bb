//! The release step of the Spark job on a streaming DataFrame, natively: the full rule set of
//! `core/windowed.py::WindowState` (its module docstring is the specification) for one state
//! bucket across micro-batches, with the state saved and loaded as bytes (Spark's state store).
//!
//! Per call: [`StreamWindow::load`] the bucket's state, [`StreamWindow::push`] the call's staged
//! events, [`StreamWindow::observe`] the progress rows and [`StreamWindow::add_transactions`]
//! the transaction END rows, then [`StreamWindow::add`] (dedupe by the partition marks of
//! earlier calls and by identity in the position group, late events, pairing as soon as a
//! group holds one delete and one create), [`StreamWindow::release`] (position watermark with
//! the [`Topology`], transaction complete, end of input, event-time watermark) and
//! [`StreamWindow::dump`]. The records are written by [`Core`]'s emitter, as in
//! [`crate::window::BatchWindow`], whose group keys, identities, pairing and mismatch records
//! this module shares.
//!
//! State: the waiting groups (identities seen with their image digests, the waiting events as
//! the decode step's staged bytes, commit time, topic), one [`Mark`] per Kafka partition, the
//! seen-event count of commits with groups, the transaction END records not yet matched. Its
//! bytes start with [`MAGIC`], which no msgpack state of the Python reference starts with.

use crate::core::{image_digest, lsn_key_of, sort_key, Core, LsnKey, SortKey, SCAN_LIMIT, TOP};
use crate::event::Event;
use crate::window::{
    arrival_order, complete_pair, group_key, identity, key_hash, repeated, window_core, Counts,
    GroupKey, Mismatch,
};
use crate::wire::{self, put_bytes, put_i64, put_u128, put_u32, BadWire, Cursor};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The first bytes of a native window state (then a version byte).
pub const MAGIC: &[u8] = b"DBNW";
/// 2: waiting events are staged events of wire format 2 (version 1 states, with format 1
/// events, still load; builds before version 2 cannot read a version 2 state).
const VERSION: u8 = 2;

/// How far one Kafka partition has been read (`windowed.PartitionMark`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mark {
    /// Highest commit LSN of any event read (the position watermark).
    pub commit: LsnKey,
    /// Highest position of a streamed event read (the replay rule).
    pub position: Option<SortKey>,
    /// `op + key` of the events read at `position`.
    pub at: Vec<Vec<u8>>,
    /// Highest offset read (any record).
    pub offset: i64,
    /// `at` as a set, once it is long (not part of the mark's value).
    pub at_index: AtIndex,
}

/// A set of a [`Mark`]'s `at`, built when a lookup first needs it (past [`SCAN_LIMIT`] pairs)
/// and kept up by [`Mark::note`]: many events at one position made the scans of `at`
/// quadratic (80,000: 3.3 s when checked for replays, 4.7 s when noted). It is no part of the
/// mark's value: any two are equal, and a clone starts empty.
#[derive(Default)]
pub struct AtIndex(std::sync::OnceLock<hashbrown::HashSet<Vec<u8>>>);

impl PartialEq for AtIndex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for AtIndex {}

impl Clone for AtIndex {
    fn clone(&self) -> Self {
        AtIndex::default()
    }
}

impl std::fmt::Debug for AtIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AtIndex")
    }
}

impl Mark {
    /// `ProgressTracker.event`: a decoded event read from this partition (`streamed`: not an
    /// initial snapshot row, whose position is not ordered).
    pub fn note(&mut self, e: &Event, streamed: bool) {
        let sk = sort_key(e);
        self.commit = self.commit.max(sk.0);
        if !streamed {
            return;
        }
        let mut local = Vec::with_capacity(1 + e.key_bytes().len());
        local.push(e.op);
        local.extend_from_slice(e.key_bytes());
        match self.position {
            Some(p) if sk < p => {}
            Some(p) if sk == p => {
                if !self.has_at(&local) {
                    if let Some(set) = self.at_index.0.get_mut() {
                        set.insert(local.clone());
                    }
                    self.at.push(local);
                }
            }
            _ => {
                self.position = Some(sk);
                self.at = vec![local];
                self.at_index = AtIndex::default();
            }
        }
    }

    /// Whether `op + key` `local` was read at `position`.
    pub fn has_at(&self, local: &[u8]) -> bool {
        if self.at.len() <= SCAN_LIMIT {
            return self.at.iter().any(|a| **a == *local);
        }
        self.at_index
            .0
            .get_or_init(|| self.at.iter().cloned().collect())
            .contains(local)
    }

    /// `PartitionMark.merged`.
    pub fn merged(&self, other: &Mark) -> Mark {
        let (position, at) = if self.position == other.position {
            let mut at = self.at.clone();
            at.extend(other.at.iter().filter(|x| !self.has_at(x)).cloned());
            (self.position, at)
        } else if other.position.is_some()
            && (self.position.is_none() || other.position > self.position)
        {
            (other.position, other.at.clone())
        } else {
            (self.position, self.at.clone())
        };
        Mark {
            commit: self.commit.max(other.commit),
            position,
            at,
            offset: self.offset.max(other.offset),
            at_index: AtIndex::default(),
        }
    }
}

/// `windowed.Topology`: partition count per topic; for runs with a known end, per topic and
/// partition the offset of the last message this run reads.
#[derive(Debug, Clone, Default)]
pub struct Topology {
    pub partitions: hashbrown::HashMap<String, i32>,
    pub ends: Option<hashbrown::HashMap<String, hashbrown::HashMap<i32, i64>>>,
}

struct Group {
    commit_ms: i64,
    /// identity and the image digest of its first copy (`None`: converted state without one)
    seen: Vec<(u128, Option<u64>)>,
    /// Where each identity is in `seen`, once `seen` is long (built when first needed; many
    /// events at one position made the scans of `seen` quadratic: 80,000 took 2.2 s).
    seen_index: Option<hashbrown::HashMap<u128, usize>>,
    waiting: Vec<Box<Event>>,
    /// the Kafka timestamp of each waiting event (the state keeps it with the event's bytes)
    stamps: Vec<Option<i64>>,
    topic: Arc<str>,
}

impl Group {
    /// The image digest of the first copy of identity `id`, if `id` was seen.
    fn first_digest(&mut self, id: u128) -> Option<Option<u64>> {
        if self.seen.len() <= SCAN_LIMIT {
            return self.seen.iter().find(|s| s.0 == id).map(|s| s.1);
        }
        let seen = &self.seen;
        let index = self.seen_index.get_or_insert_with(|| {
            let mut index = hashbrown::HashMap::with_capacity(seen.len());
            for (i, s) in seen.iter().enumerate() {
                index.entry(s.0).or_insert(i);
            }
            index
        });
        index.get(&id).map(|&i| seen[i].1)
    }

    fn note_seen(&mut self, id: u128, digest: Option<u64>) {
        if let Some(index) = self.seen_index.as_mut() {
            index.entry(id).or_insert(self.seen.len());
        }
        self.seen.push((id, digest));
    }
}

struct Item {
    event: Box<Event>,
    commit_ms: i64,
    timestamp: Option<i64>,
}

/// Why waiting events were released (`windowed.RELEASE_RULES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rule {
    Position,
    Transaction,
    End,
    Watermark,
}

/// One state bucket of a streaming DataFrame and the outputs of one call on it.
pub struct StreamWindow {
    pub core: Core,
    reader: wire::Reader,
    incremental: u32,
    pub topology: Topology,
    groups: hashbrown::HashMap<GroupKey, Group>,
    marks: BTreeMap<(Arc<str>, i32), Mark>,
    incoming: Vec<(Arc<str>, i32, Mark)>,
    commits: hashbrown::HashMap<LsnKey, i64>,
    /// commit -> (event_count, ms)
    transactions: hashbrown::HashMap<LsnKey, (i64, i64)>,
    items: Vec<Item>,
    pub counts: Counts,
    pub mismatches: Vec<Mismatch>,
}

impl StreamWindow {
    pub fn new(pair_key_changes: bool, topology: Topology) -> Self {
        let (core, incremental) = window_core(pair_key_changes);
        StreamWindow {
            core,
            reader: wire::Reader::default(),
            incremental,
            topology,
            groups: Default::default(),
            marks: BTreeMap::new(),
            incoming: Vec::new(),
            commits: Default::default(),
            transactions: Default::default(),
            items: Vec::new(),
            counts: Counts::default(),
            mismatches: Vec::new(),
        }
    }

    /// One staged event on its own (a call's, or one kept in state).
    fn read(&mut self, data: &[u8]) -> Result<(Box<Event>, Option<i64>), BadWire> {
        self.reader.begin();
        self.read_next(data)
    }

    /// The next staged event of a packed value (after [`wire::Reader::begin`]).
    fn read_next(&mut self, data: &[u8]) -> Result<(Box<Event>, Option<i64>), BadWire> {
        let mut read = self
            .reader
            .read(data, &mut self.core.interner, &mut self.core.spare)?;
        let name = self.reader.topics[read.topic as usize].clone();
        read.event.origin.topic = self.core.topic(&name);
        Ok((read.event, read.timestamp))
    }

    /// Take one staged event of this call on its own ([`wire::write`]) and its commit time.
    pub fn push(&mut self, data: &[u8], commit_ms: i64) -> Result<(), BadWire> {
        self.reader.begin();
        self.take(data, commit_ms)
    }

    /// Take the staged events of one packed value of this call (the decode step's rows,
    /// [`wire::pack`]).
    pub fn push_packed(&mut self, packed: &[u8]) -> Result<(), BadWire> {
        self.reader.begin();
        wire::unpack(packed, |data, commit_ms| self.take(data, commit_ms))
    }

    fn take(&mut self, data: &[u8], commit_ms: i64) -> Result<(), BadWire> {
        let (event, timestamp) = self.read_next(data)?;
        self.items.push(Item {
            event,
            commit_ms,
            timestamp,
        });
        Ok(())
    }

    /// Transaction END records: (commit LSN, event_count, ms).
    pub fn add_transactions(&mut self, ends: impl IntoIterator<Item = (LsnKey, i64, i64)>) {
        for (commit, count, ms) in ends {
            self.transactions.insert(commit, (count, ms));
        }
    }

    /// Progress of the partitions read in this call (applied by [`StreamWindow::release`]).
    pub fn observe(&mut self, topic: &str, partition: i32, mark: Mark) {
        self.incoming.push((topic.into(), partition, mark));
    }

    fn topic_of(&self, e: &Event) -> Arc<str> {
        self.core.topics[e.origin.topic as usize].clone()
    }

    /// `WindowState._replayed`: below its partition's position (as of earlier calls) in an
    /// earlier transaction, or at it with an (op, key) seen there. Below it inside its
    /// transaction (change_lsn need not rise there: direct mode) the group's identities decide.
    fn replayed(&self, e: &Event, sk: SortKey) -> bool {
        if e.unordered || e.is_snapshot_identity(self.incremental) {
            return false;
        }
        let tp = (self.topic_of(e), e.origin.partition);
        let Some(mark) = self.marks.get(&tp) else {
            return false;
        };
        let Some(position) = mark.position else {
            return false;
        };
        if sk < position {
            return sk.0 < position.0 || e.is_keyless_read();
        }
        if sk != position || e.is_keyless_read() {
            return false;
        }
        let mut local = Vec::with_capacity(1 + e.key_bytes().len());
        local.push(e.op);
        local.extend_from_slice(e.key_bytes());
        mark.has_at(&local)
    }

    /// `WindowState.add`: the call's events, in position order (copies of one event by their
    /// Kafka coordinates), against the marks of earlier calls and the groups.
    pub fn add(&mut self, watermark_ms: i64) {
        let items = std::mem::take(&mut self.items);
        let topics = &self.core.topics;
        let order = arrival_order(items.iter().map(|it| &*it.event), |t| {
            topics[t as usize].clone()
        });
        let mut slots: Vec<Option<Item>> = items.into_iter().map(Some).collect();
        let pair = self.core.config.pair_key_changes;
        let check_marks = !self.marks.is_empty();
        let mut ready: Vec<Box<Event>> = Vec::new();
        for (sk, topic, _, _, index) in order {
            let Some(item) = slots[index].take() else {
                continue;
            };
            let e = item.event;
            if check_marks && self.replayed(&e, sk) {
                self.counts.duplicates += 1;
                continue;
            }
            let table_id = self.core.interner.tables[e.table as usize].table_id.clone();
            let snapshot = e.is_snapshot_identity(self.incremental);
            let key = group_key(&e, table_id, sk, snapshot);
            let id = identity(&key, sk.2, e.op, e.key_bytes());
            let group = match self.groups.entry(key) {
                hashbrown::hash_map::Entry::Occupied(found) => found.into_mut(),
                hashbrown::hash_map::Entry::Vacant(_) if item.commit_ms < watermark_ms => {
                    self.counts.late += 1;
                    ready.push(e);
                    continue;
                }
                hashbrown::hash_map::Entry::Vacant(slot) => slot.insert(Group {
                    commit_ms: item.commit_ms,
                    seen: Vec::new(),
                    seen_index: None,
                    waiting: Vec::new(),
                    stamps: Vec::new(),
                    topic,
                }),
            };
            let digest = image_digest(&e);
            let keyless_read = e.is_keyless_read();
            if let Some(first) = group.first_digest(id).filter(|_| !keyless_read) {
                let same = first.is_none_or(|d| d == digest);
                repeated(
                    &self.core,
                    &mut self.counts,
                    &mut self.mismatches,
                    &e,
                    item.timestamp,
                    same,
                );
                continue;
            }
            if !keyless_read {
                group.note_seen(id, Some(digest));
            }
            if e.op != b'r' {
                *self.commits.entry(sk.0).or_insert(0) += 1;
            }
            if !pair || (e.op != b'd' && e.op != b'c') {
                ready.push(e);
                continue;
            }
            group.waiting.push(e);
            group.stamps.push(item.timestamp);
            self.counts.pending += 1;
            if let Some((d, c)) = complete_pair(&mut group.waiting) {
                group.stamps.clear();
                self.counts.pending -= 2;
                self.core.emit(vec![d, c]);
            }
        }
        self.core.emit_each(ready);
        self.sync_counts();
    }

    fn sync_counts(&mut self) {
        self.counts.changes_out = self.core.counters.changes_out;
        self.counts.merged = self.core.counters.merged;
    }

    fn apply_progress(&mut self) {
        for (topic, partition, mark) in std::mem::take(&mut self.incoming) {
            let tp = (topic, partition);
            let merged = match self.marks.get(&tp) {
                None => mark,
                Some(known) => known.merged(&mark),
            };
            self.marks.insert(tp, merged);
        }
    }

    /// `WindowState.position_watermark`: the commit LSN every partition of `topic` has passed
    /// (0: none known; [`TOP`]: every partition ended).
    pub fn position_watermark(&self, topic: &str) -> LsnKey {
        let count = self.topology.partitions.get(topic).copied();
        let ends = self.topology.ends.as_ref();
        if count.is_none() && ends.is_none() {
            return 0;
        }
        let marks: BTreeMap<i32, &Mark> = self
            .marks
            .iter()
            .filter(|((t, _), _)| &**t == topic)
            .map(|((_, p), m)| (*p, m))
            .collect();
        let no_ends = hashbrown::HashMap::new();
        let topic_ends = ends.map(|e| e.get(topic).unwrap_or(&no_ends));
        let partitions: BTreeSet<i32> = (0..count.unwrap_or(0).max(0))
            .chain(marks.keys().copied())
            .collect();
        let mut low = TOP;
        for p in partitions {
            let mark = marks.get(&p);
            if let Some(te) = topic_ends {
                match te.get(&p) {
                    None => continue,
                    Some(&last) if mark.is_some_and(|m| m.offset >= last) => continue,
                    Some(_) => {}
                }
            }
            match mark {
                None => return 0,
                Some(m) => low = low.min(m.commit),
            }
        }
        low
    }

    /// `WindowState.release`: apply the call's progress, then emit and forget every group that
    /// may go.
    pub fn release(&mut self, watermark_ms: i64) {
        self.apply_progress();
        let mut watermarks: hashbrown::HashMap<Arc<str>, LsnKey> = Default::default();
        let complete: hashbrown::HashSet<LsnKey> = self
            .transactions
            .iter()
            .filter(|(c, tx)| self.commits.get(*c).copied().unwrap_or(0) >= tx.0)
            .map(|(c, _)| *c)
            .collect();
        let mut done: Vec<(GroupKey, Rule)> = Vec::new();
        for (key, group) in &self.groups {
            let watermark = match watermarks.get(&group.topic) {
                Some(&w) => w,
                None => {
                    let w = self.position_watermark(&group.topic);
                    watermarks.insert(group.topic.clone(), w);
                    w
                }
            };
            let commit = key.1;
            let rule = if commit < watermark {
                if watermark == TOP {
                    Rule::End
                } else {
                    Rule::Position
                }
            } else if complete.contains(&commit) {
                Rule::Transaction
            } else if group.commit_ms < watermark_ms {
                Rule::Watermark
            } else {
                continue;
            };
            done.push((key.clone(), rule));
        }
        done.sort();
        for (key, rule) in done {
            let Some(group) = self.groups.remove(&key) else {
                continue;
            };
            if group.waiting.is_empty() {
                continue;
            }
            let n = group.waiting.len() as i64;
            self.counts.pending -= n;
            *match rule {
                Rule::Position => &mut self.counts.released_by_position,
                Rule::Transaction => &mut self.counts.released_by_transaction,
                Rule::End => &mut self.counts.released_by_end,
                Rule::Watermark => &mut self.counts.released_by_watermark,
            } += n;
            let mut waiting = group.waiting;
            waiting.sort_by_key(|e| sort_key(e));
            self.core.emit(waiting);
        }
        self.forget(watermark_ms, &watermarks, &complete);
        self.sync_counts();
    }

    /// `WindowState._forget`.
    fn forget(
        &mut self,
        watermark_ms: i64,
        watermarks: &hashbrown::HashMap<Arc<str>, LsnKey>,
        complete: &hashbrown::HashSet<LsnKey>,
    ) {
        let live: hashbrown::HashSet<LsnKey> = self.groups.keys().map(|k| k.1).collect();
        self.commits.retain(|c, _| live.contains(c));
        if self.transactions.is_empty() {
            return;
        }
        let data_topics: BTreeSet<Arc<str>> = self
            .marks
            .iter()
            .filter(|(_, m)| m.commit != 0)
            .map(|((t, _), _)| t.clone())
            .collect();
        let floor = data_topics
            .iter()
            .map(|t| match watermarks.get(t) {
                Some(&w) if w != 0 => w,
                _ => self.position_watermark(t),
            })
            .min()
            .unwrap_or(0);
        self.transactions.retain(|c, tx| {
            live.contains(c) || (!complete.contains(c) && tx.1 >= watermark_ms && *c >= floor)
        });
    }

    /// The lowest commit time still in state.
    pub fn next_timeout_ms(&self) -> Option<i64> {
        self.groups.values().map(|g| g.commit_ms).min()
    }

    pub fn waiting_events(&self) -> usize {
        self.groups.values().map(|g| g.waiting.len()).sum()
    }

    pub fn groups(&self) -> usize {
        self.groups.len()
    }

    /// The partition marks (after the last release): (topic, partition, mark).
    pub fn marks(&self) -> impl Iterator<Item = (&str, i32, &Mark)> {
        self.marks.iter().map(|((t, p), m)| (&**t, *p, m))
    }

    /// The state as bytes (the call's progress applied first).
    pub fn dump(&mut self) -> Vec<u8> {
        self.apply_progress();
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        let mut event = Vec::with_capacity(1024);
        let mut keys: Vec<&GroupKey> = self.groups.keys().collect();
        keys.sort();
        put_u32(&mut out, keys.len() as u32);
        for key in keys {
            let g = &self.groups[key];
            put_bytes(&mut out, key.0.as_bytes());
            put_u128(&mut out, key.1);
            out.push(key.2);
            put_u128(&mut out, key.3);
            put_i64(&mut out, g.commit_ms);
            put_bytes(&mut out, g.topic.as_bytes());
            put_u32(&mut out, g.seen.len() as u32);
            for (id, digest) in &g.seen {
                put_u128(&mut out, *id);
                wire::put_opt_i64(&mut out, digest.map(|d| d as i64));
            }
            // each waiting event on its own (its call's bytes may lean on the event before it
            // in their packed value)
            put_u32(&mut out, g.waiting.len() as u32);
            for (e, stamp) in g.waiting.iter().zip(&g.stamps) {
                event.clear();
                let topic = &self.core.topics[e.origin.topic as usize];
                let fresh = &mut wire::Repeats::default();
                wire::write(&mut event, e, topic, *stamp, &self.core.interner, fresh);
                put_bytes(&mut out, &event);
            }
        }
        put_u32(&mut out, self.marks.len() as u32);
        for ((topic, partition), m) in &self.marks {
            put_bytes(&mut out, topic.as_bytes());
            put_u32(&mut out, *partition as u32);
            put_u128(&mut out, m.commit);
            match m.position {
                None => out.push(0),
                Some((a, b, s)) => {
                    out.push(1);
                    put_u128(&mut out, a);
                    put_u128(&mut out, b);
                    put_i64(&mut out, s);
                }
            }
            put_u32(&mut out, m.at.len() as u32);
            for a in &m.at {
                put_bytes(&mut out, a);
            }
            put_i64(&mut out, m.offset);
        }
        let mut commits: Vec<_> = self.commits.iter().collect();
        commits.sort();
        put_u32(&mut out, commits.len() as u32);
        for (c, n) in commits {
            put_u128(&mut out, *c);
            put_i64(&mut out, *n);
        }
        let mut txs: Vec<_> = self.transactions.iter().collect();
        txs.sort();
        put_u32(&mut out, txs.len() as u32);
        for (c, (count, ms)) in txs {
            put_u128(&mut out, *c);
            put_i64(&mut out, *count);
            put_i64(&mut out, *ms);
        }
        out
    }

    /// Load a state written by [`StreamWindow::dump`] (bad bytes are an error, never a panic).
    pub fn load(&mut self, data: &[u8]) -> Result<(), BadWire> {
        if !is_native_state(data) {
            return Err(BadWire);
        }
        let mut c = Cursor::new(data);
        c.take(MAGIC.len())?;
        if !matches!(c.u8()?, 1 | VERSION) {
            return Err(BadWire);
        }
        let n = c.u32()?;
        for _ in 0..n {
            let table_id: Arc<str> = c.str()?.into();
            let commit = c.u128()?;
            let snapshot = c.u8()?;
            let local = c.u128()?;
            let commit_ms = c.i64()?;
            let topic = c.str()?;
            let seen_n = c.u32()?;
            let mut seen = Vec::with_capacity((seen_n as usize).min(4096));
            for _ in 0..seen_n {
                let id = c.u128()?;
                seen.push((id, c.opt_i64()?.map(|d| d as u64)));
            }
            let waiting_n = c.u32()?;
            let mut waiting = Vec::new();
            let mut stamps = Vec::new();
            for _ in 0..waiting_n {
                let (e, stamp) = self.read(c.bytes()?)?;
                waiting.push(e);
                stamps.push(stamp);
            }
            let group = Group {
                commit_ms,
                seen,
                seen_index: None,
                waiting,
                stamps,
                topic: topic.into(),
            };
            self.insert_group((table_id, commit, snapshot, local), group, topic);
        }
        let n = c.u32()?;
        for _ in 0..n {
            let topic: Arc<str> = c.str()?.into();
            let partition = c.u32()? as i32;
            let commit = c.u128()?;
            let position = if c.flag()? {
                Some((c.u128()?, c.u128()?, c.i64()?))
            } else {
                None
            };
            let at_n = c.u32()?;
            let mut at = Vec::with_capacity((at_n as usize).min(4096));
            for _ in 0..at_n {
                at.push(c.bytes()?.to_vec());
            }
            let offset = c.i64()?;
            self.marks.insert(
                (topic, partition),
                Mark {
                    commit,
                    position,
                    at,
                    offset,
                    at_index: AtIndex::default(),
                },
            );
        }
        let n = c.u32()?;
        for _ in 0..n {
            let commit = c.u128()?;
            let count = c.i64()?;
            self.commits.insert(commit, count);
        }
        let n = c.u32()?;
        for _ in 0..n {
            let commit = c.u128()?;
            let count = c.i64()?;
            let ms = c.i64()?;
            self.transactions.insert(commit, (count, ms));
        }
        if !c.at_end() {
            return Err(BadWire);
        }
        Ok(())
    }
}

/// A waiting group of the Python reference's state (`windowed._Group` under its key), for
/// [`StreamWindow::adopt_group`].
pub struct ReferenceGroup<'a> {
    pub table_id: &'a str,
    pub commit: LsnKey,
    /// an initial snapshot row's group (`b"r" + key`), else the change LSN's
    pub snapshot: bool,
    /// the key's third part: `b"r" + key` or the change LSN bytes
    pub local: &'a [u8],
    pub commit_ms: i64,
    pub topic: &'a str,
    /// (serial, op, key) of every identity seen
    pub seen: Vec<(i64, u8, &'a [u8])>,
    /// the waiting events, staged
    pub waiting: Vec<&'a [u8]>,
}

impl StreamWindow {
    /// Take over one waiting group of a state the Python reference wrote. The image digests
    /// of its waiting events are computed here (they are the first copies); identities seen
    /// without a waiting event keep none (a later replay of one counts as a duplicate).
    pub fn adopt_group(&mut self, g: ReferenceGroup<'_>) -> Result<(), BadWire> {
        let local = if g.snapshot {
            key_hash(1, g.local.get(1..).ok_or(BadWire)?)
        } else {
            lsn_of(g.local)?
        };
        let key: GroupKey = (g.table_id.into(), g.commit, u8::from(g.snapshot), local);
        let mut waiting = Vec::with_capacity(g.waiting.len());
        let mut stamps = Vec::with_capacity(g.waiting.len());
        let mut digests = hashbrown::HashMap::new();
        for bytes in g.waiting {
            let (e, stamp) = self.read(bytes)?;
            let id = identity(&key, e.sort_serial(), e.op, e.key_bytes());
            digests.insert(id, image_digest(&e));
            waiting.push(e);
            stamps.push(stamp);
        }
        let seen = g
            .seen
            .iter()
            .map(|&(serial, op, k)| {
                let id = identity(&key, serial, op, k);
                (id, digests.get(&id).copied())
            })
            .collect();
        let group = Group {
            commit_ms: g.commit_ms,
            seen,
            seen_index: None,
            waiting,
            stamps,
            topic: g.topic.into(),
        };
        self.insert_group(key, group, g.topic);
        Ok(())
    }

    /// Keep `group` under `key`, its topic interned by the core.
    fn insert_group(&mut self, key: GroupKey, mut group: Group, topic: &str) {
        let id = self.core.topic(topic) as usize;
        group.topic = self.core.topics[id].clone();
        self.groups.insert(key, group);
    }

    /// Take over a partition mark of a state the Python reference wrote.
    pub fn adopt_mark(&mut self, topic: &str, partition: i32, mark: Mark) {
        self.marks.insert((topic.into(), partition), mark);
    }

    /// Take over the seen-event count of a commit (the transaction rule).
    pub fn adopt_commit(&mut self, commit: LsnKey, seen: i64) {
        self.commits.insert(commit, seen);
    }

    /// How many transaction END records the state keeps.
    pub fn transactions(&self) -> usize {
        self.transactions.len()
    }
}

/// Whether `data` is a state written by [`StreamWindow::dump`] (by its first bytes).
pub fn is_native_state(data: &[u8]) -> bool {
    data.starts_with(MAGIC)
}

/// An LSN given as bytes (`b""` or 10 bytes), as a [`LsnKey`].
pub fn lsn_of(bytes: &[u8]) -> Result<LsnKey, BadWire> {
    lsn_key_of(bytes).ok_or(BadWire)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::tests::{envelope, staged, C1, C2};

    const MS: i64 = 1_000_000;

    fn lines(w: &mut StreamWindow) -> Vec<String> {
        let (out, _) = w.core.take_output();
        String::from_utf8(out)
            .expect("utf8")
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// A new window on `state` (the state store between calls).
    fn reopen(w: &mut StreamWindow, topology: Topology) -> StreamWindow {
        let state = w.dump();
        let mut next = StreamWindow::new(true, topology);
        next.load(&state).expect("state");
        next
    }

    fn mark(commit: &str, offset: i64) -> Mark {
        let lsn = crate::lsn::parse(commit).expect("lsn");
        Mark {
            commit: crate::core::lsn_key(&lsn),
            position: None,
            at: Vec::new(),
            offset,
            at_index: AtIndex::default(),
        }
    }

    #[test]
    fn a_key_change_pairs_across_calls_through_the_state_bytes() {
        let p = staged(&[
            (1, 1, envelope("d", 1, C1, C1, 1)),
            (2, 2, envelope("c", 2, C1, C1, 2)),
        ]);
        let mut w = StreamWindow::new(true, Topology::default());
        w.push(&p[0], MS).expect("read");
        w.add(0);
        w.release(0);
        assert!(lines(&mut w).is_empty());
        assert_eq!(w.counts.pending, 1);
        assert_eq!(w.next_timeout_ms(), Some(MS));
        let mut w = reopen(&mut w, Topology::default());
        assert_eq!(w.waiting_events(), 1);
        w.push(&p[1], MS).expect("read");
        w.add(0);
        w.release(0);
        let out = lines(&mut w);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0].contains("\"key_changed\":true"));
        assert_eq!((w.counts.merged, w.counts.pending), (1, -1));
        // the group stays (its identities drop replays) until a release rule lets it go
        assert_eq!((w.waiting_events(), w.next_timeout_ms()), (0, Some(MS)));
        w.release(MS + 1);
        assert_eq!((w.groups(), w.next_timeout_ms()), (0, None));
    }

    #[test]
    fn the_position_watermark_releases_and_the_marks_drop_later_replays() {
        let p = staged(&[
            (1, 1, envelope("d", 1, C1, C1, 1)),
            (3, 1, envelope("d", 1, C1, C1, 1)),
        ]);
        let topic = "srv.db.dbo.t";
        let topology = Topology {
            partitions: [(topic.to_string(), 1)].into_iter().collect(),
            ends: None,
        };
        let mut w = StreamWindow::new(true, topology.clone());
        w.push(&p[0], MS).expect("read");
        let c1 = crate::core::lsn_key(&crate::lsn::parse(C1).expect("lsn"));
        let mut progress = mark(C2, 2);
        progress.position = Some((c1, c1, 1));
        progress.at = vec![b"d{\"id\":1}".to_vec()];
        w.observe(topic, 0, progress);
        w.add(0);
        w.release(0);
        assert_eq!(lines(&mut w).len(), 1);
        assert_eq!(w.counts.released_by_position, 1);
        assert_eq!(w.groups(), 0);
        // the replay of the released delete: the partition mark says it was read before
        let mut w = reopen(&mut w, topology);
        w.push(&p[1], MS).expect("read");
        w.add(0);
        w.release(0);
        assert!(lines(&mut w).is_empty());
        assert_eq!((w.counts.duplicates, w.groups()), (1, 0));
    }

    #[test]
    fn bad_state_bytes_are_an_error() {
        let mut w = StreamWindow::new(true, Topology::default());
        let good = w.dump();
        for cut in 0..good.len() {
            let mut fresh = StreamWindow::new(true, Topology::default());
            assert!(fresh.load(&good[..cut]).is_err());
        }
        let mut fresh = StreamWindow::new(true, Topology::default());
        assert!(fresh.load(b"\x96\x90").is_err());
    }
}
