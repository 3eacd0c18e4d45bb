//! Replay dedupe, ordering by position, release by watermark / transaction END / pressure,
//! pairing of primary-key-change halves and canonical JSON lines: `core/translator.py`
//! rule for rule (that module's docstring is the specification; the comments here name the
//! Python function each part mirrors).
//!
//! State lives here only: records the native decoder declines are decoded by Python and handed
//! back as events ([`Core::accept`]), so ordering, dedupe and pairing see every event in input
//! order whichever decoder read it.

use crate::decode::Interner;
use crate::event::{Event, Image, SpareBuffers};
use crate::jsonw;
use crate::value::{self, Member};
use std::collections::{BTreeMap, VecDeque};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

/// An LSN as the reference compares its bytes: NULL (`b""`) lowest, then the 10 bytes.
pub type LsnKey = u128;
/// Above every LSN: the reference's `b"\xff" * 11` (no active partition).
pub const TOP: LsnKey = u128::MAX;

#[inline]
pub fn lsn_key(lsn: &crate::lsn::Lsn) -> LsnKey {
    match lsn {
        None => 0,
        Some(b) => {
            // 1, then the 10 bytes, big-endian
            let mut v = [0u8; 16];
            v[5] = 1;
            v[6..].copy_from_slice(b);
            u128::from_be_bytes(v)
        }
    }
}

/// The bytes an [`LsnKey`] stands for (`b""` for NULL, else the 10 bytes).
pub fn lsn_bytes(key: LsnKey) -> Vec<u8> {
    if key == 0 {
        return Vec::new();
    }
    (0..10).rev().map(|i| (key >> (8 * i)) as u8).collect()
}

/// The [`LsnKey`] of LSN bytes (`None` unless empty or 10 bytes long).
pub fn lsn_key_of(bytes: &[u8]) -> Option<LsnKey> {
    match bytes.len() {
        0 => Some(0),
        10 => <[u8; 10]>::try_from(bytes).ok().map(|b| lsn_key(&Some(b))),
        _ => None,
    }
}

pub type SortKey = (LsnKey, LsnKey, i64);
/// How many emptied group lists [`Core`] keeps for reuse.
const SPARE_GROUPS: usize = 64;
type GroupKey = (LsnKey, LsnKey, Arc<str>);

#[derive(Debug, Default, Clone)]
pub struct Counters {
    pub records_in: i64,
    pub changes_out: i64,
    pub merged: i64,
    pub duplicates: i64,
    pub side_records: i64,
    pub tombstones: i64,
    pub dead_letters: i64,
    pub skipped: i64,
    pub pending: i64,
    pub late: i64,
    pub key_changes_paired: i64,
    pub released_by_pressure: i64,
    pub replay_mismatches: i64,
}

pub struct Config {
    pub pair_key_changes: bool,
    pub max_pending: i64,
    pub dedupe_capacity: usize,
}

/// `_BoundedSet`: forgets its oldest members beyond `capacity`.
struct BoundedSet {
    capacity: usize,
    members: hashbrown::HashSet<u128>,
    order: VecDeque<u128>,
}

impl BoundedSet {
    fn contains(&self, item: u128) -> bool {
        self.members.contains(&item)
    }
    fn add(&mut self, item: u128) {
        if self.capacity == 0 || self.members.contains(&item) {
            return;
        }
        self.members.insert(item);
        self.order.push_back(item);
        if self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.members.remove(&old);
            }
        }
    }
}

/// `_ImageMemory`: two generations of identity → image digest.
///
/// The newer generation is filled [`ImageMemory::BATCH`] identities at a time, in the order of
/// the regions of its table their places fall in: an insert at a random place of a table of 10^5–10^6 identities
/// missed the caches every time (~0.2 µs of a narrow event's ~1.6 µs, bench of 2026-11-28: the
/// native core ran 20 % faster without the memory). Identities are uniform hashes already,
/// so the tables hash nothing ([`IdentityHash`]). What a lookup, a count or a change of
/// generation sees is what inserting each identity on arrival gives: the batch goes in before
/// any of them, and in arrival order once the newer generation could fill up within it.
struct ImageMemory {
    half: usize,
    new: hashbrown::HashMap<u128, u64, IdentityHash>,
    old: hashbrown::HashMap<u128, u64, IdentityHash>,
    /// Remembered and not in `new` yet, in arrival order.
    batch: Vec<(u128, u64)>,
    /// The batch in the order of `new`'s regions (kept for its memory).
    ordered: Vec<(u128, u64)>,
}

/// Hashes an identity (a uniform 128-bit hash) to its low 64 bits.
#[derive(Clone, Copy, Default)]
struct IdentityHash;

impl BuildHasher for IdentityHash {
    type Hasher = IdentityHasher;
    fn build_hasher(&self) -> IdentityHasher {
        IdentityHasher(0)
    }
}

#[derive(Default)]
struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // (not used: identities are written as `u128`)
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64;
    }
}

impl ImageMemory {
    const BATCH: usize = 1024;
    /// A batch is put in the order of `2^REGION_BITS` regions of the table.
    const REGION_BITS: u32 = 10;
    /// Fewer identities than this are not worth the counting pass.
    const FEW: usize = 64;

    fn new(capacity: usize) -> Self {
        ImageMemory {
            half: if capacity > 0 {
                (capacity / 2).max(1)
            } else {
                0
            },
            new: Default::default(),
            old: Default::default(),
            batch: Vec::with_capacity(Self::BATCH),
            ordered: Vec::with_capacity(Self::BATCH),
        }
    }

    fn remember(&mut self, identity: u128, digest: u64) {
        if self.half == 0 {
            return;
        }
        self.batch.push((identity, digest));
        if self.new.len() + self.batch.len() >= self.half || self.batch.len() >= Self::BATCH {
            self.insert_batch();
        }
    }

    /// The batch into `new`: in the order of its table's regions while `new` cannot fill up
    /// within it, else (or when a lookup flushes a few) in arrival order, changing generation
    /// where `new` fills up.
    fn insert_batch(&mut self) {
        if self.batch.len() >= Self::FEW && self.new.len() + self.batch.len() < self.half {
            self.new.reserve(self.batch.len());
            // the table's place of an identity is its low bits (`IdentityHash`). One stable
            // counting pass by the place's top `REGION_BITS` bits puts the batch in the order of
            // the table's regions (a sort by place cost ~265 instructions an identity; the
            // inserts into one region of at most 2^(k - 10) places stay in cache all the same);
            // equal identities keep their order, so the later digest wins
            let place_bits = (self.new.capacity() * 8 / 7)
                .next_power_of_two()
                .trailing_zeros();
            let shift = place_bits.saturating_sub(Self::REGION_BITS);
            let places = (1u64 << place_bits) - 1;
            let region = |identity: u128| ((identity as u64 & places) >> shift) as usize;
            let mut starts = [0u32; (1 << Self::REGION_BITS) + 1];
            for &(identity, _) in &self.batch {
                starts[region(identity) + 1] += 1;
            }
            for r in 1..starts.len() {
                starts[r] += starts[r - 1];
            }
            self.ordered.clear();
            self.ordered.resize(self.batch.len(), (0, 0));
            for &(identity, digest) in &self.batch {
                let at = &mut starts[region(identity)];
                self.ordered[*at as usize] = (identity, digest);
                *at += 1;
            }
            self.batch.clear();
            self.new.extend(self.ordered.iter().copied());
            return;
        }
        for (identity, digest) in self.batch.drain(..) {
            self.new.insert(identity, digest);
            if self.new.len() >= self.half {
                // the old generation's table becomes the new one, emptied: no regrowth
                std::mem::swap(&mut self.old, &mut self.new);
                self.new.clear();
            }
        }
    }

    fn contains(&mut self, identity: u128) -> bool {
        self.get(identity).is_some()
    }

    fn get(&mut self, identity: u128) -> Option<u64> {
        self.insert_batch();
        self.new
            .get(&identity)
            .or_else(|| self.old.get(&identity))
            .copied()
    }

    /// How many identities the two generations hold.
    fn len(&self) -> usize {
        let mut waiting: hashbrown::HashSet<u128, IdentityHash> = Default::default();
        for &(identity, _) in &self.batch {
            if !self.new.contains_key(&identity) {
                waiting.insert(identity);
            }
        }
        self.new.len() + self.old.len() + waiting.len()
    }
}

/// A hasher with fixed seeds (the same in every process): identities, digests, key hashes.
pub(crate) fn hasher(seed: u64) -> ahash::AHasher {
    ahash::RandomState::with_seeds(
        seed,
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
    )
    .build_hasher()
}

fn hash128(parts: &dyn Fn(&mut dyn Hasher)) -> u128 {
    let mut a = hasher(1);
    parts(&mut a);
    let mut b = hasher(2);
    parts(&mut b);
    ((a.finish() as u128) << 64) | b.finish() as u128
}

/// Per topic-partition replay mark (`_partition_marks`): the highest position seen and the
/// (op, key) pairs seen at it.
#[derive(Debug, Clone)]
pub struct Mark {
    key: SortKey,
    seen: Seen,
}

/// An (op, key id) pair seen at a mark's position.
pub type SeenPair = (u8, Box<[u8]>);

/// The (op, key id) pairs seen at a mark's position (`set` in the reference): a list, scanned
/// while it is short (one or two pairs, as a rule), and indexed by a hash table past
/// [`SCAN_LIMIT`] pairs. Many events can share one position (bad input, or a connector that
/// repeats one); scanning them all was quadratic: 40,000 inserts at one position took 2.7 s
/// against the reference's 0.33 s.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pairs: Vec<SeenPair>,
    /// Indices into `pairs` by the hash of the pair, once there are more than [`SCAN_LIMIT`].
    index: hashbrown::HashTable<u32>,
}

fn pair_hash(op: u8, key: &[u8]) -> u64 {
    let mut h = hasher(3);
    h.write_u8(op);
    h.write(key);
    h.finish()
}

impl Seen {
    fn one(op: u8, key: &[u8]) -> Seen {
        Seen {
            pairs: vec![(op, key.into())],
            index: hashbrown::HashTable::new(),
        }
    }

    fn contains(&self, op: u8, key: &[u8]) -> bool {
        if self.pairs.len() <= SCAN_LIMIT {
            return self.pairs.iter().any(|(o, k)| *o == op && **k == *key);
        }
        let pairs = &self.pairs;
        self.index
            .find(pair_hash(op, key), |&i| {
                let (o, k) = &pairs[i as usize];
                *o == op && **k == *key
            })
            .is_some()
    }

    /// Adds `(op, key)` unless it is there already.
    fn insert(&mut self, op: u8, key: &[u8]) {
        if !self.contains(op, key) {
            self.insert_new(op, key);
        }
    }

    /// Adds `(op, key)`, which is not there.
    fn insert_new(&mut self, op: u8, key: &[u8]) {
        self.pairs.push((op, key.into()));
        let pairs = &self.pairs;
        let rehash = |&i: &u32| {
            let (o, k) = &pairs[i as usize];
            pair_hash(*o, k)
        };
        let from = match pairs.len() {
            n if n <= SCAN_LIMIT => return,
            n if n == SCAN_LIMIT + 1 => 0,
            n => n - 1,
        };
        for (i, (o, k)) in pairs.iter().enumerate().skip(from) {
            self.index.insert_unique(pair_hash(*o, k), i as u32, rehash);
        }
    }

    /// Only `(op, key)`. Reuses the first pair's buffer when the key is as long (it usually
    /// is: one table, one key shape).
    fn reset(&mut self, op: u8, key: &[u8]) {
        self.index.clear();
        self.pairs.truncate(1);
        match self.pairs.first_mut() {
            Some((o, k)) if k.len() == key.len() => {
                *o = op;
                k.copy_from_slice(key);
            }
            _ => {
                self.pairs.clear();
                self.pairs.push((op, key.into()));
            }
        }
    }

    /// The pairs, sorted.
    fn sorted(&self) -> Vec<SeenPair> {
        let mut pairs = self.pairs.clone();
        pairs.sort();
        pairs
    }
}

impl Mark {
    fn new(key: SortKey, op: u8, local_key: &[u8]) -> Mark {
        Mark {
            key,
            seen: Seen::one(op, local_key),
        }
    }

    /// Move the mark to `key`, seen there: `(op, local_key)` only.
    fn reset(&mut self, key: SortKey, op: u8, local_key: &[u8]) {
        self.key = key;
        self.seen.reset(op, local_key);
    }
}

/// `marks[tp]` moved to `key` with `(op, local_key)` seen there.
fn set_mark(
    marks: &mut hashbrown::HashMap<u32, Mark>,
    tp: u32,
    key: SortKey,
    op: u8,
    local_key: &[u8],
) {
    match marks.get_mut(&tp) {
        Some(mark) => mark.reset(key, op, local_key),
        None => {
            marks.insert(tp, Mark::new(key, op, local_key));
        }
    }
}

/// The position order of an event.
pub(crate) fn sort_key(e: &Event) -> SortKey {
    (lsn_key(&e.commit), lsn_key(&e.change), e.sort_serial())
}

/// The image digest of `_replayed` / `_ImageMemory` (members sorted by name, as the
/// reference's sorted msgspec encoding of `(before, after, unavailable)`).
pub(crate) fn image_digest(e: &Event) -> u64 {
    let mut h = hasher(3);
    for image in [&e.before, &e.after] {
        match image {
            None => h.write_u8(0),
            Some(img) => {
                h.write_u8(1);
                // order-independent (the reference sorts the keys): a sum of member hashes
                let members = e.members_of(img);
                let mut sum = 0u64;
                match &e.names {
                    // the names' hashers, prepared once (the image lists exactly these names);
                    // two loops: one with a branch per member costs ~1 % more (callgrind)
                    Some(names) if names.hashers.len() == members.len() => {
                        for (m, prepared) in members.iter().zip(&names.hashers[..]) {
                            debug_assert_eq!(
                                prepared.finish(),
                                member_hasher(&e.buf[m.name.0 as usize..m.name.1 as usize])
                                    .finish()
                            );
                            let mut mh = prepared.clone();
                            mh.write(&e.buf[m.value.0 as usize..m.value.1 as usize]);
                            sum = sum.wrapping_add(mh.finish());
                        }
                    }
                    _ => {
                        for m in members {
                            let mut mh =
                                member_hasher(&e.buf[m.name.0 as usize..m.name.1 as usize]);
                            mh.write(&e.buf[m.value.0 as usize..m.value.1 as usize]);
                            sum = sum.wrapping_add(mh.finish());
                        }
                    }
                }
                h.write_u64(sum);
                h.write_usize(members.len());
            }
        }
    }
    e.unavailable.hash(&mut h);
    h.finish()
}

/// The hasher of one image member in [`image_digest`] once its name is written.
pub(crate) fn member_hasher(name: &[u8]) -> ahash::AHasher {
    let mut mh = hasher(4);
    mh.write(name);
    mh.write_u8(0xff);
    mh
}

pub struct Core {
    pub config: Config,
    pub counters: Counters,
    pub interner: Interner,
    pub topics: Vec<Arc<str>>,
    /// Each topic name as a JSON string.
    topic_json: Vec<Vec<u8>>,
    topic_index: hashbrown::HashMap<Arc<str>, u32>,
    last_topic: Option<u32>,
    /// Buffers of written events, for the decoder.
    pub spare: SpareBuffers,
    /// The last column order met, and whether its names need no escape.
    last_order: Option<(Arc<[String]>, bool)>,
    /// (topic id, partition) per tp id
    pub tps: Vec<(u32, i32)>,
    tp_index: hashbrown::HashMap<(u32, i32), u32>,
    incremental: u32,
    // replay dedupe
    marks: hashbrown::HashMap<u32, Mark>,
    recent: BoundedSet,
    images: ImageMemory,
    pending_ids: hashbrown::HashSet<u128>,
    // ordering
    commit_marks: hashbrown::HashMap<u32, LsnKey>,
    /// Past [`SCAN_PARTITIONS`] partitions: `(commit mark, tp)` of the partitions, lowest
    /// first, with stale entries (an older mark, an idle partition) dropped when they come up:
    /// the watermark without a pass over every partition (that pass, on nearly every record
    /// of round-robin traffic, made 16,000 partitions cost 3.9 s per 160,000 records). Empty
    /// while the partitions are few: a pass over them costs less than the heap's upkeep.
    mark_heap: std::collections::BinaryHeap<std::cmp::Reverse<(LsnKey, u32)>>,
    idle: hashbrown::HashSet<u32>,
    watermark: Option<LsnKey>,
    /// The waiting events by position group, in release order (`_groups` and `_heap`: the
    /// ordered map does both for the handful of groups that wait).
    groups: BTreeMap<GroupKey, Vec<Box<Event>>>,
    released_upto: Option<GroupKey>,
    tx_expected: hashbrown::HashMap<LsnKey, i64>,
    commits: hashbrown::HashMap<LsnKey, [i64; 2]>,
    /// With [`Core::track_resume_points`]: per tp, the dedupe mark of what was released
    /// (`_released_marks`).
    released_marks: Option<hashbrown::HashMap<u32, Mark>>,
    // output
    pub out: Vec<u8>,
    pub out_records: usize,
    /// Byte offsets of each record line in `out` (for the Arrow view).
    pub line_ends: Vec<usize>,
    /// Per record line: the spans in `out` of the JSON tokens of op, table_id, seq, commit_ts,
    /// key and event_id (for the Arrow view).
    pub spans: Vec<[(u32, u32); 6]>,
    /// Whether each record line's lineage is kept (`lineage_ends`, `lineage`: the Spark
    /// release steps write their output rows from it).
    pub keep_lineage: bool,
    /// Per record line: the end in `lineage` of its lineage (the Kafka records it came from).
    pub lineage_ends: Vec<u32>,
    /// The lineage of every record line, one after the other.
    pub lineage: Vec<crate::event::Origin>,
    current: [(u32, u32); 6],
    /// Scratch for the identity bytes of an event id.
    ident: Vec<u8>,
    second_texts: SecondTexts,
    /// The text of a line from `tx` to its lineage's partition, for (snapshot, source, topic).
    tail_text: (Option<(u32, u32, u32)>, Vec<u8>),
    /// Emptied group lists, kept for the next groups (most groups hold one event).
    spare_groups: Vec<Vec<Box<Event>>>,
}

const OPS: [(u8, &[u8]); 5] = [
    (b'c', b"insert"),
    (b'u', b"update"),
    (b'd', b"delete"),
    (b'r', b"read"),
    (b't', b"truncate"),
];

fn op_name(op: u8) -> &'static [u8] {
    OPS.iter()
        .find(|(o, _)| *o == op)
        .map(|(_, n)| *n)
        .unwrap_or(b"insert")
}

#[inline]
fn op_rank(op: u8) -> u8 {
    if op == b'd' {
        0
    } else {
        1
    }
}

impl Core {
    /// The most memory the JSON lines' buffer keeps between drains (16 MiB).
    const KEPT_OUTPUT: usize = 16 << 20;

    pub fn new(config: Config) -> Self {
        let capacity = config.dedupe_capacity;
        let mut interner = Interner::default();
        let incremental = interner.snapshot("incremental");
        Core {
            config,
            counters: Counters::default(),
            interner,
            topics: Vec::new(),
            topic_json: Vec::new(),
            topic_index: Default::default(),
            last_topic: None,
            spare: SpareBuffers::default(),
            last_order: None,
            tps: Vec::new(),
            tp_index: Default::default(),
            incremental,
            marks: Default::default(),
            recent: BoundedSet {
                capacity,
                members: Default::default(),
                order: VecDeque::new(),
            },
            images: ImageMemory::new(capacity),
            pending_ids: Default::default(),
            commit_marks: Default::default(),
            mark_heap: Default::default(),
            idle: Default::default(),
            watermark: None,
            groups: BTreeMap::new(),
            released_upto: None,
            tx_expected: Default::default(),
            commits: Default::default(),
            released_marks: None,
            out: Vec::new(),
            out_records: 0,
            line_ends: Vec::new(),
            spans: Vec::new(),
            keep_lineage: false,
            lineage_ends: Vec::new(),
            lineage: Vec::new(),
            current: [(0, 0); 6],
            ident: Vec::with_capacity(128),
            second_texts: SecondTexts::default(),
            tail_text: (None, Vec::new()),
            spare_groups: Vec::new(),
        }
    }

    /// Topic `id`'s name as a JSON string.
    pub fn topic_json(&self, id: u32) -> &[u8] {
        &self.topic_json[id as usize]
    }

    pub fn topic(&mut self, name: &str) -> u32 {
        // records come in runs of one topic
        if let Some(i) = self.last_topic {
            if *self.topics[i as usize] == *name {
                return i;
            }
        }
        let i = match self.topic_index.get(name) {
            Some(&i) => i,
            None => {
                let i = self.topics.len() as u32;
                let arc: Arc<str> = name.into();
                self.topics.push(arc.clone());
                self.topic_json.push(jsonw::json_string(name));
                self.topic_index.insert(arc, i);
                i
            }
        };
        self.last_topic = Some(i);
        i
    }

    pub fn tp(&mut self, topic: u32, partition: i32) -> u32 {
        if let Some(&i) = self.tp_index.get(&(topic, partition)) {
            return i;
        }
        let i = self.tps.len() as u32;
        self.tps.push((topic, partition));
        self.tp_index.insert((topic, partition), i);
        i
    }

    // -- partitions -----------------------------------------------------------------------
    pub fn expect(&mut self, tp: u32) {
        if let hashbrown::hash_map::Entry::Vacant(e) = self.commit_marks.entry(tp) {
            e.insert(0);
            self.push_mark(tp, 0);
            self.watermark = None;
        }
    }

    /// `tp`'s commit mark is now `commit` (or it counts again): into the mark heap (past
    /// [`SCAN_PARTITIONS`]), built from the marks when it starts and when stale entries
    /// outnumber them.
    #[inline]
    fn push_mark(&mut self, tp: u32, commit: LsnKey) {
        if self.commit_marks.len() <= SCAN_PARTITIONS {
            return;
        }
        if self.mark_heap.is_empty() || self.mark_heap.len() > 2 * self.commit_marks.len() + 64 {
            let idle = &self.idle;
            self.mark_heap = self
                .commit_marks
                .iter()
                .filter(|(tp, _)| !idle.contains(*tp))
                .map(|(&tp, &c)| std::cmp::Reverse((c, tp)))
                .collect();
        }
        self.mark_heap.push(std::cmp::Reverse((commit, tp)));
    }

    /// `tp` is no longer idle: its mark counts again.
    fn wake(&mut self, tp: u32) {
        if self.idle.remove(&tp) {
            if let Some(&commit) = self.commit_marks.get(&tp) {
                self.push_mark(tp, commit);
            }
        }
    }

    pub fn mark_idle(&mut self, tp: u32) {
        self.idle.insert(tp);
        self.watermark = None;
        self.release_ready();
    }

    /// `Translator.mark_active`: count an idle partition in the watermark again.
    pub fn mark_active(&mut self, tp: u32) {
        if self.idle.contains(&tp) {
            self.wake(tp);
            self.watermark = None;
        }
    }

    /// A TX END with its complete event count (`Translator._side`).
    pub fn tx_end(&mut self, commit: LsnKey, event_count: i64) {
        self.end_transaction(&lsn_bytes(commit), event_count);
    }

    /// `Translator.end_transaction`: `commit` in `parse_lsn` form (bytes, compared as bytes).
    /// `false` when no event of that transaction has arrived yet.
    pub fn end_transaction(&mut self, commit: &[u8], event_count: i64) -> bool {
        if let Some(key) = lsn_key_of(commit) {
            if self.commits.contains_key(&key) {
                self.tx_expected.insert(key, event_count);
                self.release_ready();
                return true;
            }
        }
        self.released_upto
            .as_ref()
            .is_some_and(|upto| commit < lsn_bytes(upto.0).as_slice())
    }

    /// `Translator.process_event` / `drop_duplicate`'s accounting: `records` input records
    /// made one event (the first counts as `merged`), or repeat one already taken.
    pub fn count_records(&mut self, records: i64, duplicate: bool) {
        self.counters.records_in += records;
        if duplicate {
            self.counters.duplicates += records;
        } else {
            self.counters.merged += records - 1;
        }
    }

    // -- resume points ----------------------------------------------------------------------
    /// `Translator.track_resume_points`.
    pub fn track_resume_points(&mut self) {
        if self.released_marks.is_none() {
            self.released_marks = Some(Default::default());
        }
    }

    /// `Translator.pending_offsets`: the lowest input offset waiting per tp.
    pub fn pending_offsets(&self) -> hashbrown::HashMap<u32, i64> {
        let mut lowest: hashbrown::HashMap<u32, i64> = Default::default();
        for events in self.groups.values() {
            for e in events {
                let Some(offset) = e.origin.offset else {
                    continue;
                };
                lowest
                    .entry(e.origin.tp)
                    .and_modify(|o| *o = (*o).min(offset))
                    .or_insert(offset);
            }
        }
        lowest
    }

    /// `Translator.resume_marks`: per tp, the mark of what was released, its (op, key) pairs
    /// sorted; `None` without [`Core::track_resume_points`].
    pub fn resume_marks(&self) -> Option<Vec<(u32, SortKey, Vec<SeenPair>)>> {
        let marks = self.released_marks.as_ref()?;
        let mut out: Vec<_> = marks
            .iter()
            .map(|(&tp, mark)| (tp, mark.key, mark.seen.sorted()))
            .collect();
        out.sort_by_key(|m| m.0);
        Some(out)
    }

    /// `Translator.restore_marks` of one partition (before its first record).
    pub fn restore_mark(&mut self, tp: u32, key: SortKey, pairs: Vec<SeenPair>) {
        let mut seen = Seen::default();
        for (op, id) in &pairs {
            seen.insert(*op, id);
        }
        let mark = Mark { key, seen };
        self.marks.insert(tp, mark.clone());
        self.released_marks
            .get_or_insert_with(Default::default)
            .insert(tp, mark);
    }

    /// `Translator._note_released` of one event.
    fn note_released(&mut self, e: &Event) {
        if e.is_snapshot_identity(self.incremental) {
            return; // snapshot rows are not in the partition marks
        }
        let sk = sort_key(e);
        let Some(marks) = self.released_marks.as_mut() else {
            return;
        };
        match marks.get_mut(&e.origin.tp) {
            Some(mark) if sk <= mark.key => {
                if sk == mark.key {
                    mark.seen.insert(e.op, e.key_bytes());
                }
            }
            _ => set_mark(marks, e.origin.tp, sk, e.op, e.key_bytes()),
        }
    }

    fn identity(&self, e: &Event, snapshot: bool, sk: SortKey) -> u128 {
        let key = e.key_bytes();
        let table = e.table;
        let op = e.op;
        if snapshot {
            hash128(&|h| {
                h.write_u8(b'r');
                h.write_u32(table);
                h.write(key);
                h.write_u128(sk.0);
            })
        } else {
            hash128(&|h| {
                h.write_u8(b's');
                h.write_u32(table);
                h.write_u128(sk.0);
                h.write_u128(sk.1);
                h.write_i64(sk.2);
                h.write_u8(op);
                h.write(key);
            })
        }
    }

    /// `Translator._accept`. Returns the message of a replay-mismatch dead letter.
    pub fn accept(&mut self, e: Box<Event>) -> Option<String> {
        let tp = e.origin.tp;
        let sk = sort_key(&e);
        let snapshot = e.is_snapshot_identity(self.incremental);
        let identity = self.identity(&e, snapshot, sk);
        // a keyless table's row read in a snapshot has no identity (`keyless_read` in the
        // reference): never a replay of another
        let keyless_read = e.is_keyless_read();
        let mut tracked = false;
        if snapshot {
            tracked = !keyless_read;
        } else if e.unordered {
            tracked = true;
        } else {
            let local_key = e.key_bytes();
            match self.marks.get_mut(&tp) {
                Some(mark) if sk == mark.key => {
                    if !keyless_read && mark.seen.contains(e.op, local_key) {
                        return self.replayed(&e, identity);
                    }
                    if !keyless_read {
                        mark.seen.insert_new(e.op, local_key);
                    }
                }
                // below the mark: a replay in an earlier transaction; inside the mark's own
                // (change_lsn need not rise there: direct mode) only when remembered
                Some(mark) if sk < mark.key => {
                    if sk.0 < mark.key.0 || keyless_read || self.images.contains(identity) {
                        return self.replayed(&e, identity);
                    }
                }
                _ => set_mark(&mut self.marks, tp, sk, e.op, local_key),
            }
            if local_key == b"{}" && !keyless_read {
                tracked = true;
            }
        }
        if tracked {
            if self.recent.contains(identity) || self.pending_ids.contains(&identity) {
                return self.replayed(&e, identity);
            }
            self.recent.add(identity);
        }
        if !keyless_read {
            self.images.remember(identity, image_digest(&e));
        }
        let (commit, change) = (sk.0, sk.1);
        // watermark bookkeeping
        let previous = self.commit_marks.get(&tp).copied();
        if previous.is_none() || commit > previous.unwrap_or(0) {
            self.commit_marks.insert(tp, commit);
            self.push_mark(tp, commit);
            if previous.is_none() || previous == self.watermark || self.idle.contains(&tp) {
                self.watermark = None;
            }
        }
        if !self.idle.is_empty() {
            self.wake(tp);
        }
        if let Some(upto) = &self.released_upto {
            if commit < upto.0 || (commit == upto.0 && change <= upto.1) {
                self.counters.late += 1;
                if self.released_marks.is_some() {
                    self.note_released(&e);
                }
                self.emit_group(vec![e]);
                return None;
            }
        }
        let table_id = self.interner.tables[e.table as usize].table_id.clone();
        let group_key: GroupKey = (commit, change, table_id);
        let spare_groups = &mut self.spare_groups;
        self.groups
            .entry(group_key)
            .or_insert_with(|| spare_groups.pop().unwrap_or_default())
            .push(e);
        if tracked {
            self.pending_ids.insert(identity);
        }
        self.counters.pending += 1;
        let counts = self.commits.entry(commit).or_insert([0, 0]);
        counts[0] += 1;
        counts[1] += 1;
        let head = self.groups.first_key_value().map_or(TOP, |(k, _)| k.0);
        match self.watermark {
            Some(w)
                if head >= w
                    && self.tx_expected.is_empty()
                    && self.counters.pending <= self.config.max_pending => {}
            _ => self.release_ready(),
        }
        None
    }

    fn replayed(&mut self, e: &Event, identity: u128) -> Option<String> {
        let Some(original) = self.images.get(identity) else {
            self.counters.duplicates += 1;
            return None;
        };
        let digest = image_digest(e);
        if digest == original {
            self.counters.duplicates += 1;
            return None;
        }
        self.counters.dead_letters += 1;
        self.counters.replay_mismatches += 1;
        let table_id = &self.interner.tables[e.table as usize].table_id;
        let key_text = String::from_utf8_lossy(e.key_bytes());
        let key_short: String = key_text.chars().take(200).collect();
        let seq = String::from_utf8_lossy(&e.seq_string()).into_owned();
        Some(format!(
            "replay of {table_id} '{}' key {key_short} at {seq} has images that differ from the \
             event already translated (image hash {digest:016x}, original {original:016x}); \
             Debezium replays differ only in the envelope ts_ms and the Kafka offsets",
            e.op as char
        ))
    }

    fn current_watermark(&mut self) -> LsnKey {
        if let Some(w) = self.watermark {
            return w;
        }
        if self.commit_marks.len() <= SCAN_PARTITIONS {
            let w = self
                .commit_marks
                .iter()
                .filter(|(tp, _)| !self.idle.contains(*tp))
                .map(|(_, c)| *c)
                .min()
                .unwrap_or(TOP);
            self.watermark = Some(w);
            return w;
        }
        let mut w = TOP;
        while let Some(&std::cmp::Reverse((commit, tp))) = self.mark_heap.peek() {
            if !self.idle.contains(&tp) && self.commit_marks.get(&tp) == Some(&commit) {
                w = commit;
                break;
            }
            self.mark_heap.pop(); // stale: an older mark of tp, or tp is idle
        }
        self.watermark = Some(w);
        w
    }

    fn release_ready(&mut self) {
        if self.groups.is_empty() {
            return;
        }
        let watermark = self.current_watermark();
        while let Some((head, group)) = self.groups.first_key_value() {
            let commit = head.0;
            let complete = !self.tx_expected.is_empty()
                && self.tx_expected.get(&commit).is_some_and(|&expected| {
                    self.commits.get(&commit).is_some_and(|c| c[0] >= expected)
                });
            if commit < watermark || complete {
            } else if self.counters.pending > self.config.max_pending {
                self.counters.released_by_pressure += group.len() as i64;
            } else {
                break;
            }
            let Some((key, events)) = self.groups.pop_first() else {
                break;
            };
            self.release_group(key, events);
        }
    }

    fn release_group(&mut self, key: GroupKey, events: Vec<Box<Event>>) {
        let n = events.len() as i64;
        self.counters.pending -= n;
        if !self.pending_ids.is_empty() {
            for e in &events {
                let snapshot = e.is_snapshot_identity(self.incremental);
                if e.key_bytes() == b"{}" || snapshot {
                    let id = self.identity(e, snapshot, sort_key(e));
                    self.pending_ids.remove(&id);
                }
            }
        }
        let commit = key.0;
        self.released_upto = Some(key);
        if self.released_marks.is_some() {
            for e in &events {
                self.note_released(e);
            }
        }
        if let Some(counts) = self.commits.get_mut(&commit) {
            if counts[1] > n {
                counts[1] -= n;
            } else {
                self.commits.remove(&commit);
                if !self.tx_expected.is_empty() {
                    self.tx_expected.remove(&commit);
                }
            }
        }
        self.emit(events);
    }

    /// End of input: release everything.
    pub fn flush(&mut self) {
        while let Some((key, events)) = self.groups.pop_first() {
            self.release_group(key, events);
        }
    }

    // -- pairing and output ------------------------------------------------------------------
    pub fn emit(&mut self, mut events: Vec<Box<Event>>) {
        if events.len() == 1 {
            self.counters.changes_out += 1;
            let e = events.pop().unwrap_or_else(unreachable_event);
            self.write_single(&e);
            self.spare.keep(e);
            if self.spare_groups.len() < SPARE_GROUPS {
                self.spare_groups.push(events);
            }
        } else {
            self.emit_group(events);
        }
    }

    pub fn emit_each(&mut self, events: Vec<Box<Event>>) {
        self.counters.changes_out += events.len() as i64;
        for e in events {
            self.write_single(&e);
            self.spare.keep(e);
        }
    }

    fn emit_group(&mut self, events: Vec<Box<Event>>) {
        // (serial, rank, key) and what to write: a single event or a merged pair
        enum Out {
            Single(usize),
            Pair(usize, usize),
        }
        type Ranked = ((i64, u8, Vec<u8>), Out);
        let mut outputs: Vec<Ranked> = Vec::with_capacity(events.len());
        let mut used = vec![false; events.len()];
        if self.config.pair_key_changes && events.len() > 1 {
            let deletes: Vec<usize> = (0..events.len())
                .filter(|&i| events[i].op == b'd')
                .collect();
            let creates: Vec<usize> = (0..events.len())
                .filter(|&i| events[i].op == b'c')
                .collect();
            if !deletes.is_empty() && !creates.is_empty() {
                let mut pairs: Vec<(usize, usize)> = Vec::new();
                // A bulk key update puts thousands of deletes and creates at one position: past
                // a few, creates are found through maps, not scans (32,000 pairs took 18 s).
                let many = creates.len() > SCAN_LIMIT;
                // creates_by_key: the last create with a key wins
                let by_key: hashbrown::HashMap<&[u8], usize> = if many {
                    creates
                        .iter()
                        .map(|&c| (events[c].key_bytes(), c))
                        .collect()
                } else {
                    hashbrown::HashMap::new()
                };
                let create_for = |key: &[u8]| {
                    if many {
                        by_key.get(key).copied()
                    } else {
                        creates
                            .iter()
                            .rev()
                            .copied()
                            .find(|&c| events[c].key_bytes() == key)
                    }
                };
                for &d in &deletes {
                    if let Some(c) = create_for(events[d].key_bytes()) {
                        if !used[c] {
                            pairs.push((d, c));
                            used[d] = true;
                            used[c] = true;
                        }
                    }
                }
                let left_d: Vec<usize> = deletes.iter().copied().filter(|&d| !used[d]).collect();
                let left_c: Vec<usize> = creates.iter().copied().filter(|&c| !used[c]).collect();
                if left_d.len() == 1 && left_c.len() == 1 {
                    pairs.push((left_d[0], left_c[0]));
                    used[left_d[0]] = true;
                    used[left_c[0]] = true;
                } else {
                    // Case B: headers name the partner exactly; each delete takes the first
                    // create naming it (creates by (key, partner), first last so `pop` takes it)
                    let mut named: hashbrown::HashMap<(&[u8], &[u8]), Vec<usize>> =
                        hashbrown::HashMap::new();
                    for &c in left_c.iter().rev() {
                        if let Some(partner) = events[c].partner_key.as_deref() {
                            let key = (events[c].key_bytes(), partner);
                            named.entry(key).or_default().push(c);
                        }
                    }
                    for &d in &left_d {
                        let Some(partner) = events[d].partner_key.as_deref() else {
                            continue;
                        };
                        if let Some(c) = named
                            .get_mut(&(partner, events[d].key_bytes()))
                            .and_then(Vec::pop)
                        {
                            pairs.push((d, c));
                            used[d] = true;
                            used[c] = true;
                        }
                    }
                }
                for (d, c) in pairs {
                    if events[d].key_bytes() != events[c].key_bytes() {
                        self.counters.key_changes_paired += 1;
                    }
                    self.counters.merged += 1;
                    let c_ev = &events[c];
                    outputs.push((
                        (c_ev.sort_serial(), 1, c_ev.key_bytes().to_vec()),
                        Out::Pair(d, c),
                    ));
                }
            }
        }
        for (i, e) in events.iter().enumerate() {
            if !used[i] {
                outputs.push((
                    (e.sort_serial(), op_rank(e.op), e.key_bytes().to_vec()),
                    Out::Single(i),
                ));
            }
        }
        if outputs.len() > 1 {
            outputs.sort_by(|a, b| a.0.cmp(&b.0)); // stable, as Python's sort
        }
        self.counters.changes_out += outputs.len() as i64;
        for (_, out) in outputs {
            match out {
                Out::Single(i) => self.write_single(&events[i]),
                Out::Pair(d, c) => self.write_merged(&events[d], &events[c]),
            }
        }
        for e in events {
            self.spare.keep(e);
        }
    }

    /// `table_id \0 seq \0 op \0 key` of one event; `seq`: its seq text when already written.
    fn identity_bytes(&self, e: &Event, seq: Option<&[u8]>, out: &mut Vec<u8>) {
        out.extend_from_slice(self.interner.tables[e.table as usize].table_id.as_bytes());
        out.push(0);
        match seq {
            Some(text) => out.extend_from_slice(text),
            None => e.write_seq(out),
        }
        out.push(0);
        out.push(e.op);
        out.push(0);
        out.extend_from_slice(e.key_bytes());
        if e.is_keyless_read() {
            // a keyless table's snapshot rows share all that: their Kafka coordinates differ
            let mut number = itoa::Buffer::new();
            out.push(0);
            out.extend_from_slice(self.topics[e.origin.topic as usize].as_bytes());
            out.push(0);
            out.extend_from_slice(number.format(e.origin.partition).as_bytes());
            out.push(0);
            out.extend_from_slice(number.format(e.origin.offset.unwrap_or(-1)).as_bytes());
        }
    }

    /// The event id of `parts` (the last one's seq text was just written to `out`).
    fn write_event_id(&mut self, parts: &[&Event], out: &mut Vec<u8>) {
        let seq = self.current[2];
        let mut ident = std::mem::take(&mut self.ident);
        ident.clear();
        let last = parts.len().saturating_sub(1);
        for (i, e) in parts.iter().enumerate() {
            if i > 0 {
                ident.push(1);
            }
            let text = (i == last).then(|| &out[seq.0 as usize + 1..seq.1 as usize - 1]);
            self.identity_bytes(e, text, &mut ident);
        }
        let digest = blake2b_simd::Params::new().hash_length(16).hash(&ident);
        self.ident = ident;
        const HEX: &[u8; 16] = b"0123456789abcdef";
        out.push(b'"');
        for &b in digest.as_bytes() {
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        }
        out.push(b'"');
    }

    fn write_single(&mut self, e: &Event) {
        let mut out = std::mem::take(&mut self.out);
        let op = op_name(e.op);
        out.extend_from_slice(b"{\"op\":");
        let at = out.len();
        out.push(b'"');
        out.extend_from_slice(op);
        self.current[0] = (at as u32, out.len() as u32 + 1);
        self.write_common_head(e, &mut out);
        out.extend_from_slice(b",\"key\":");
        let at = out.len();
        out.extend_from_slice(e.key_bytes());
        self.current[4] = (at as u32, out.len() as u32);
        out.extend_from_slice(b",\"old_key\":null,\"key_changed\":false,\"before\":");
        write_image(&mut out, e, &e.before);
        out.extend_from_slice(b",\"after\":");
        write_image(&mut out, e, &e.after);
        out.extend_from_slice(b",\"changed_columns\":[");
        let unavailable = &e.unavailable;
        let order = self.order(e);
        match e.op {
            b'u' if e.changed.is_some() => {
                // the source says (CDC update mask)
                write_listed(&mut out, e.changed.as_deref().unwrap_or(&[]), unavailable);
            }
            b'u' => changed(
                &mut out,
                e,
                e.before.as_ref(),
                e,
                e.after.as_ref(),
                unavailable,
                order,
            ),
            b't' => {}
            _ => {
                let image = if e.op == b'd' {
                    e.before.as_ref()
                } else {
                    e.after.as_ref()
                };
                columns(&mut out, e, image, order, unavailable);
            }
        }
        out.extend_from_slice(b"],\"unavailable_columns\":[");
        write_names(&mut out, unavailable);
        out.push(b']');
        self.write_tail(e, &[e], &mut out);
        self.out = out;
    }

    /// `e`'s column order; whether its names need an escape is found once per table version
    /// (the events of one version share their order's `Arc`).
    fn order<'e>(&mut self, e: &'e Event) -> Option<Order<'e>> {
        let names = e.column_order.as_ref()?;
        let plain = match &self.last_order {
            Some((seen, plain)) if Arc::ptr_eq(seen, names) => *plain,
            _ => {
                let plain = !names.iter().any(|n| jsonw::needs_escape(n.as_bytes()));
                self.last_order = Some((names.clone(), plain));
                plain
            }
        };
        Some(Order { names, plain })
    }

    fn write_merged(&mut self, d: &Event, c: &Event) {
        let mut out = std::mem::take(&mut self.out);
        let key_changed = d.key_bytes() != c.key_bytes();
        let mut unavailable: Vec<Box<str>> = d.unavailable.clone();
        unavailable.extend(c.unavailable.iter().cloned());
        crate::dom::first_occurrences(&mut unavailable);
        out.extend_from_slice(b"{\"op\":");
        let at = out.len();
        out.extend_from_slice(b"\"update");
        self.current[0] = (at as u32, out.len() as u32 + 1);
        self.write_common_head(c, &mut out);
        out.extend_from_slice(b",\"key\":");
        let at = out.len();
        out.extend_from_slice(c.key_bytes());
        self.current[4] = (at as u32, out.len() as u32);
        out.extend_from_slice(b",\"old_key\":");
        if key_changed {
            out.extend_from_slice(d.key_bytes());
            out.extend_from_slice(b",\"key_changed\":true");
        } else {
            out.extend_from_slice(b"null,\"key_changed\":false");
        }
        out.extend_from_slice(b",\"before\":");
        write_image(&mut out, d, &d.before);
        out.extend_from_slice(b",\"after\":");
        write_image(&mut out, c, &c.after);
        out.extend_from_slice(b",\"changed_columns\":[");
        match (&c.changed, &d.changed) {
            // halves of one update (rows 3 + 4 whose keys differ): its update mask says
            (Some(cc), Some(dc)) if cc == dc && d.partner_key.is_some() => {
                write_listed(&mut out, cc, &unavailable);
            }
            _ => changed(
                &mut out,
                d,
                d.before.as_ref(),
                c,
                c.after.as_ref(),
                &unavailable,
                self.order(c),
            ),
        }
        out.extend_from_slice(b"],\"unavailable_columns\":[");
        write_names(&mut out, &unavailable);
        out.push(b']');
        self.write_tail(c, &[d, c], &mut out);
        self.out = out;
    }

    fn write_common_head(&mut self, e: &Event, out: &mut Vec<u8>) {
        let table = &self.interner.tables[e.table as usize];
        out.extend_from_slice(b"\",\"table\":");
        out.extend_from_slice(&table.json);
        out.extend_from_slice(b",\"table_id\":");
        let at = out.len();
        out.extend_from_slice(&table.id_json);
        self.current[1] = (at as u32, out.len() as u32);
    }

    fn write_tail(&mut self, e: &Event, lineage: &[&Event], out: &mut Vec<u8>) {
        out.extend_from_slice(b",\"position\":{\"commit_lsn\":");
        match &e.position_text {
            Some(texts) => {
                jsonw::write_opt_str(out, texts.0.as_deref());
                out.extend_from_slice(b",\"change_lsn\":");
                jsonw::write_opt_str(out, texts.1.as_deref());
            }
            None => {
                write_lsn(out, &e.commit);
                out.extend_from_slice(b",\"change_lsn\":");
                write_lsn(out, &e.change);
            }
        }
        out.extend_from_slice(b",\"event_serial_no\":");
        jsonw::write_opt_i64(out, e.serial);
        out.extend_from_slice(b"},\"seq\":");
        let at = out.len();
        out.push(b'"');
        e.write_seq(out);
        out.push(b'"');
        self.current[2] = (at as u32, out.len() as u32);
        out.extend_from_slice(b",\"commit_ts\":");
        let at = out.len();
        self.second_texts.write_iso_ms(out, e.source_ts_ms);
        self.current[3] = (at as u32, out.len() as u32);
        out.extend_from_slice(b",\"capture_ts\":");
        self.second_texts.write_iso_ms(out, e.ts_ms);
        if let (None, [only]) = (&e.tx, lineage) {
            // the usual case: the same text up to the partition for every event of a topic
            let key = (e.snapshot, e.source, only.origin.topic);
            if self.tail_text.0 != Some(key) {
                let mut text = Vec::with_capacity(256);
                text.extend_from_slice(b",\"tx\":null,\"snapshot\":");
                text.extend_from_slice(&self.interner.snapshot_json[e.snapshot as usize]);
                text.extend_from_slice(b",\"source\":");
                text.extend_from_slice(&self.interner.sources[e.source as usize]);
                text.extend_from_slice(b",\"lineage\":[{\"topic\":");
                text.extend_from_slice(&self.topic_json[only.origin.topic as usize]);
                text.extend_from_slice(b",\"partition\":");
                self.tail_text = (Some(key), text);
            }
            out.extend_from_slice(&self.tail_text.1);
            jsonw::write_i64(out, only.origin.partition as i64);
            out.extend_from_slice(b",\"offset\":");
            jsonw::write_opt_i64(out, only.origin.offset);
            out.extend_from_slice(b"}],\"event_id\":");
        } else {
            self.write_tx_to_lineage(e, lineage, out);
        }
        let at = out.len();
        self.write_event_id(lineage, out);
        self.current[5] = (at as u32, out.len() as u32);
        out.extend_from_slice(b",\"format_version\":1}\n");
        self.out_records += 1;
        self.line_ends.push(out.len());
        self.spans.push(self.current);
        if self.keep_lineage {
            self.lineage.extend(lineage.iter().map(|l| l.origin));
            self.lineage_ends.push(self.lineage.len() as u32);
        }
    }

    /// `write_tail`'s text from `tx` to `event_id`'s name.
    fn write_tx_to_lineage(&mut self, e: &Event, lineage: &[&Event], out: &mut Vec<u8>) {
        out.extend_from_slice(b",\"tx\":");
        match &e.tx {
            None => out.extend_from_slice(b"null"),
            Some(tx) => {
                out.extend_from_slice(b"{\"id\":");
                jsonw::write_str(out, &tx.id);
                out.extend_from_slice(b",\"total_order\":");
                jsonw::write_opt_i64(out, tx.total_order);
                out.extend_from_slice(b",\"data_collection_order\":");
                jsonw::write_opt_i64(out, tx.data_collection_order);
                if let Some(begin) = &tx.begin_lsn {
                    out.extend_from_slice(b",\"begin_lsn\":");
                    jsonw::write_str(out, begin);
                }
                out.push(b'}');
            }
        }
        out.extend_from_slice(b",\"snapshot\":");
        out.extend_from_slice(&self.interner.snapshot_json[e.snapshot as usize]);
        out.extend_from_slice(b",\"source\":");
        out.extend_from_slice(&self.interner.sources[e.source as usize]);
        out.extend_from_slice(b",\"lineage\":[");
        for (i, l) in lineage.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"topic\":");
            out.extend_from_slice(&self.topic_json[l.origin.topic as usize]);
            out.extend_from_slice(b",\"partition\":");
            jsonw::write_i64(out, l.origin.partition as i64);
            out.extend_from_slice(b",\"offset\":");
            jsonw::write_opt_i64(out, l.origin.offset);
            out.push(b'}');
        }
        out.extend_from_slice(b"],\"event_id\":");
    }

    /// Take the JSON lines written so far (the tests' reader; the runners copy `out` and
    /// [`Core::clear_output`]).
    pub fn take_output(&mut self) -> (Vec<u8>, usize) {
        let capacity = self.out.capacity();
        let out = std::mem::replace(&mut self.out, Vec::with_capacity(capacity));
        (out, self.clear_output())
    }

    /// Forget the JSON lines written so far (`out` keeps its memory: a new buffer per drain
    /// is touched page by page again); how many records they held.
    pub fn clear_output(&mut self) -> usize {
        self.out.clear();
        if self.out.capacity() > Self::KEPT_OUTPUT {
            // after an unusually large drain: not kept at its peak
            self.out.shrink_to(Self::KEPT_OUTPUT);
        }
        self.line_ends.clear();
        self.spans.clear();
        self.lineage_ends.clear();
        self.lineage.clear();
        std::mem::take(&mut self.out_records)
    }

    pub fn state_size(&self) -> [(&'static str, i64); 6] {
        [
            ("pending_events", self.counters.pending),
            ("pending_groups", self.groups.len() as i64),
            ("partition_marks", self.marks.len() as i64),
            ("recent_identities", self.recent.members.len() as i64),
            ("image_digests", self.images.len() as i64),
            ("open_transactions", self.tx_expected.len() as i64),
        ]
    }
}

#[cold]
fn unreachable_event() -> Box<Event> {
    // `emit` is only called with one event here; never reached
    Box::new(Event {
        unordered: false,
        origin: crate::event::Origin {
            topic: 0,
            partition: 0,
            offset: None,
            tp: 0,
        },
        table: 0,
        op: b'c',
        buf: b"{}".to_vec(),
        key: (0, 2),
        before: None,
        after: None,
        members: Vec::new(),
        unavailable: Vec::new(),
        commit: None,
        change: None,
        serial: None,
        position_text: None,
        source_ts_ms: None,
        ts_ms: None,
        snapshot: 0,
        tx: None,
        source: 0,
        column_order: None,
        partner_key: None,
        seq: None,
        changed: None,
        names: None,
    })
}

fn write_lsn(out: &mut Vec<u8>, lsn: &crate::lsn::Lsn) {
    match lsn {
        None => out.extend_from_slice(b"null"),
        Some(b) => {
            out.push(b'"');
            crate::lsn::format(b, out);
            out.push(b'"');
        }
    }
}

fn write_image(out: &mut Vec<u8>, e: &Event, image: &Option<Image>) {
    match image {
        None => out.extend_from_slice(b"null"),
        Some(img) => out.extend_from_slice(e.image_bytes(img)),
    }
}

fn write_names(out: &mut Vec<u8>, names: &[Box<str>]) {
    for (i, n) in names.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        jsonw::write_str(out, n);
    }
}

/// `[c for c in listed if c not in unavailable]`, as JSON strings.
fn write_listed(out: &mut Vec<u8>, listed: &[String], unavailable: &[Box<str>]) {
    let mut first = true;
    let unavailable = Unavailable::new(unavailable);
    for name in listed {
        if unavailable.contains_name(name) {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        jsonw::write_str(out, name);
    }
}

/// Escaped (JSON body) form of a name, as member names are kept.
fn escaped(name: &str) -> std::borrow::Cow<'_, [u8]> {
    if jsonw::needs_escape(name.as_bytes()) {
        let mut v = Vec::new();
        jsonw::write_str_body(&mut v, name.as_bytes());
        std::borrow::Cow::Owned(v)
    } else {
        std::borrow::Cow::Borrowed(name.as_bytes())
    }
}

/// A table version's column names in order, and whether none of them needs a JSON escape
/// (then a name is its own escaped text).
#[derive(Clone, Copy)]
struct Order<'a> {
    names: &'a [String],
    plain: bool,
}

impl<'a> Order<'a> {
    fn escaped(&self, name: &'a str) -> std::borrow::Cow<'a, [u8]> {
        if self.plain {
            std::borrow::Cow::Borrowed(name.as_bytes())
        } else {
            escaped(name)
        }
    }
}

/// Lists up to this long are scanned for an entry; longer ones are looked up through a hash
/// index (the replay mark's pairs, a change's unavailable columns, an image's members, the
/// creates of a position group; in `dom` and `stream`: the unavailable columns written, a
/// streaming mark's pairs and a group's identities). Scanning was quadratic in each: e.g.
/// 40,000 unavailable columns took 4 s, a 100,000-column update whose images list their
/// columns in two orders 7 s.
pub(crate) const SCAN_LIMIT: usize = 8;

/// Up to this many partitions the watermark is a pass over their marks; past it, the mark heap.
const SCAN_PARTITIONS: usize = 64;

/// The names of a change's unavailable columns, for lookups of escaped or plain names.
enum Unavailable<'a> {
    Few(&'a [Box<str>]),
    Many(hashbrown::HashSet<std::borrow::Cow<'a, [u8]>>),
}

impl<'a> Unavailable<'a> {
    fn new(names: &'a [Box<str>]) -> Self {
        if names.len() <= SCAN_LIMIT {
            Unavailable::Few(names)
        } else {
            Unavailable::Many(names.iter().map(|u| escaped(u)).collect())
        }
    }

    fn contains(&self, escaped_name: &[u8]) -> bool {
        match self {
            Unavailable::Few(names) => names.iter().any(|u| *escaped(u) == *escaped_name),
            Unavailable::Many(set) => set.contains(escaped_name),
        }
    }

    /// Whether the (unescaped) `name` is listed.
    fn contains_name(&self, name: &str) -> bool {
        match self {
            Unavailable::Few(names) => names.iter().any(|u| **u == *name),
            Unavailable::Many(set) => set.contains(&*escaped(name)),
        }
    }
}

/// The values of one image's members by name, looked for at a hinted position first (images
/// of one table version list their columns in one order), then by a scan while the image is
/// narrow, else through a map built on first need.
struct Members<'a> {
    e: &'a Event,
    members: &'a [Member],
    by_name: Option<hashbrown::HashMap<&'a [u8], &'a [u8]>>,
}

impl<'a> Members<'a> {
    fn new(e: &'a Event, members: &'a [Member]) -> Self {
        Members {
            e,
            members,
            by_name: None,
        }
    }

    /// The value of member `name`, looked for at position `hint` first.
    #[inline(always)]
    fn get(&mut self, name: &[u8], hint: usize) -> Option<&'a [u8]> {
        let e = self.e;
        let span = |s: (u32, u32)| &e.buf[s.0 as usize..s.1 as usize];
        match self.members.get(hint) {
            Some(m) if span(m.name) == name => Some(span(m.value)),
            _ if self.members.len() <= SCAN_LIMIT => self
                .members
                .iter()
                .find(|m| span(m.name) == name)
                .map(|m| span(m.value)),
            _ => {
                let members = self.members;
                let map = self.by_name.get_or_insert_with(|| {
                    let mut map = hashbrown::HashMap::with_capacity(members.len());
                    for m in members {
                        map.entry(span(m.name)).or_insert(span(m.value));
                    }
                    map
                });
                map.get(name).copied()
            }
        }
    }
}

/// The text of `e` at `span`.
#[inline(always)]
fn text_at(e: &Event, span: (u32, u32)) -> &[u8] {
    &e.buf[span.0 as usize..span.1 as usize]
}

fn push_name(out: &mut Vec<u8>, first: &mut bool, escaped_name: &[u8]) {
    if !*first {
        out.push(b',');
    }
    *first = false;
    out.push(b'"');
    out.extend_from_slice(escaped_name);
    out.push(b'"');
}

/// `_columns(image, order)` minus the unavailable ones.
fn columns(
    out: &mut Vec<u8>,
    e: &Event,
    image: Option<&Image>,
    order: Option<Order<'_>>,
    unavailable: &[Box<str>],
) {
    let Some(image) = image else { return };
    if unavailable.is_empty() {
        if let Some(names) = &e.names {
            if names.fit(e.members_of(image).len(), e.column_order.as_ref()) {
                out.extend_from_slice(&names.list);
                return;
            }
        }
    }
    let mut first = true;
    let unavailable = Unavailable::new(unavailable);
    match order {
        Some(order) if order.names.len() == e.members_of(image).len() => {
            for name in order.names {
                let esc = order.escaped(name);
                if !unavailable.contains(&esc) {
                    push_name(out, &mut first, &esc);
                }
            }
        }
        _ => {
            for m in e.members_of(image) {
                let name = &e.buf[m.name.0 as usize..m.name.1 as usize];
                if !unavailable.contains(name) {
                    push_name(out, &mut first, name);
                }
            }
        }
    }
}

/// `_changed(before, after, unavailable, order)`.
fn changed(
    out: &mut Vec<u8>,
    be: &Event,
    before: Option<&Image>,
    ae: &Event,
    after: Option<&Image>,
    unavailable: &[Box<str>],
    order: Option<Order<'_>>,
) {
    let Some(before) = before else {
        columns(out, ae, after, order, unavailable);
        return;
    };
    let Some(after) = after else {
        columns(out, be, Some(before), order, &[]);
        return;
    };
    let mut first = true;
    let (bm, am) = (be.members_of(before), ae.members_of(after));
    if let (true, Some(names), Some(other)) = (unavailable.is_empty(), &ae.names, &be.names) {
        if Arc::ptr_eq(names, other)
            && bm.len() == am.len()
            && names.fit(am.len(), ae.column_order.as_ref())
        {
            // both images list these names, in this order (the table version's, if it has one)
            for ((b, a), &(from, to)) in bm.iter().zip(am).zip(names.spans.iter()) {
                let (x, y) = (text_at(be, b.value), text_at(ae, a.value));
                if !value::py_eq(x, y) {
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    out.extend_from_slice(&names.list[from as usize..to as usize]);
                }
            }
            return;
        }
    }
    if unavailable.is_empty()
        && bm.len() == am.len()
        && order.is_none_or(|o| o.plain && o.names.len() == am.len())
    {
        // the usual case: both images list the same names in one order (the table version's,
        // if it has one), so member i of one is member i of the other
        let start = out.len();
        let mut aligned = true;
        for (i, (b, a)) in bm.iter().zip(am).enumerate() {
            let name = text_at(ae, a.name);
            let named = |n: &[u8]| jsonw::same_bytes(n, name);
            if !named(text_at(be, b.name)) || order.is_some_and(|o| !named(o.names[i].as_bytes())) {
                aligned = false;
                break;
            }
            let (x, y) = (text_at(be, b.value), text_at(ae, a.value));
            if !jsonw::same_bytes(x, y) && !value::py_eq(x, y) {
                push_name(out, &mut first, name);
            }
        }
        if aligned {
            return;
        }
        out.truncate(start);
        first = true;
    }
    let (mut before_members, mut after_members) = (Members::new(be, bm), Members::new(ae, am));
    let mut differs = |name: &[u8], hint: usize| -> bool {
        let a = before_members.get(name, hint);
        let b = after_members.get(name, hint);
        match (a, b) {
            (None, None) => false,
            (Some(x), Some(y)) => !value::py_eq(x, y),
            _ => true,
        }
    };
    let unavailable = Unavailable::new(unavailable);
    match order {
        Some(order) => {
            for (i, name) in order.names.iter().enumerate() {
                let esc = order.escaped(name);
                if unavailable.contains(&esc) {
                    continue;
                }
                if differs(&esc, i) {
                    push_name(out, &mut first, &esc);
                }
            }
        }
        None => {
            for (i, m) in am.iter().enumerate() {
                let name = &ae.buf[m.name.0 as usize..m.name.1 as usize];
                if unavailable.contains(name) {
                    continue;
                }
                if differs(name, i) {
                    push_name(out, &mut first, name);
                }
            }
        }
    }
}

/// The texts of the last two seconds written (`"YYYY-MM-DDTHH:MM:SS.`, at most 21 bytes): a
/// record writes its commit and its capture time, usually in two different seconds, so one
/// entry missed on every call.
struct SecondTexts {
    seconds: [i64; 2],
    texts: [([u8; 24], u8); 2],
    next: usize,
}

impl Default for SecondTexts {
    fn default() -> Self {
        SecondTexts {
            seconds: [i64::MIN; 2],
            texts: [([0; 24], 0); 2],
            next: 0,
        }
    }
}

impl SecondTexts {
    /// `iso_ms` (see [`write_iso_ms_uncached`]) through the cache of the second's text.
    fn write_iso_ms(&mut self, out: &mut Vec<u8>, ms: Option<i64>) {
        let Some(v) = ms else {
            out.extend_from_slice(b"null");
            return;
        };
        let seconds = v.div_euclid(1000);
        let millis = v.rem_euclid(1000);
        match self.seconds.iter().position(|&s| s == seconds) {
            Some(i) => {
                let (text, len) = &self.texts[i];
                out.extend_from_slice(&text[..*len as usize]);
            }
            None => {
                let start = out.len();
                write_iso_ms_uncached(out, ms);
                let len = (out.len() - start).saturating_sub(5);
                if out.len() - start != 4 && len <= 24 {
                    // keep `"…SS.` (the text without the milliseconds and the closing `Z"`)
                    let slot = self.next;
                    self.next = 1 - slot;
                    self.seconds[slot] = seconds;
                    self.texts[slot].0[..len].copy_from_slice(&out[start..start + len]);
                    self.texts[slot].1 = len as u8;
                }
                return;
            }
        }
        out.push(b'0' + (millis / 100) as u8);
        out.push(b'0' + (millis / 10 % 10) as u8);
        out.push(b'0' + (millis % 10) as u8);
        out.extend_from_slice(b"Z\"");
    }
}

/// `iso_ms`: epoch ms as `YYYY-MM-DDTHH:MM:SS.mmmZ` (`null` out of range). The year is not
/// zero-padded below 1000, as CPython's `strftime("%Y")` on glibc writes it.
pub fn write_iso_ms_uncached(out: &mut Vec<u8>, ms: Option<i64>) {
    let Some(ms) = ms else {
        out.extend_from_slice(b"null");
        return;
    };
    let seconds = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    if !(-62_135_596_800..=253_402_300_799).contains(&seconds) {
        out.extend_from_slice(b"null");
        return;
    }
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    let Ok(date) = crate::schema::date_text(days) else {
        out.extend_from_slice(b"null");
        return;
    };
    // strip the year's zero padding (`YYYY-`: at most three zeros)
    let lead = date[..3].iter().take_while(|&&b| b == b'0').count();
    out.push(b'"');
    out.extend_from_slice(&date[lead..]);
    out.push(b'T');
    out.extend_from_slice(&crate::schema::clock_text(secs));
    out.push(b'.');
    out.push(b'0' + (millis / 100) as u8);
    out.push(b'0' + (millis / 10 % 10) as u8);
    out.push(b'0' + (millis % 10) as u8);
    out.extend_from_slice(b"Z\"");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso() {
        let mut texts = SecondTexts::default();
        let mut out = Vec::new();
        texts.write_iso_ms(&mut out, Some(1_559_033_904_863));
        assert_eq!(out, b"\"2019-05-28T08:58:24.863Z\"");
        out.clear();
        texts.write_iso_ms(&mut out, Some(-62_135_596_800_000));
        assert_eq!(out, b"\"1-01-01T00:00:00.000Z\"");
        out.clear();
        texts.write_iso_ms(&mut out, Some(-1));
        assert_eq!(out, b"\"1969-12-31T23:59:59.999Z\"");
        // alternating seconds, through the cache, as written without it
        for ms in [
            5_000i64,
            9_001,
            5_002,
            9_003,
            12_004,
            5_005,
            253_402_300_799_999,
            5_006,
        ] {
            let (mut cached, mut plain) = (Vec::new(), Vec::new());
            texts.write_iso_ms(&mut cached, Some(ms));
            write_iso_ms_uncached(&mut plain, Some(ms));
            assert_eq!(cached, plain, "{ms}");
        }
    }

    fn lsn(n: u8) -> crate::lsn::Lsn {
        Some([0, 0, 0, 0, 0, 0, 0, 0, 0, n])
    }

    fn event(core: &mut Core, partition: i32, offset: i64, commit: u8, op: u8) -> Box<Event> {
        let topic = core.topic("srv.db.dbo.t");
        let tp = core.tp(topic, partition);
        let mut e = unreachable_event();
        e.origin = crate::event::Origin {
            topic,
            partition,
            offset: Some(offset),
            tp,
        };
        e.table = core.interner.table(Some("db"), "dbo", "t");
        e.source = core
            .interner
            .source(Some("sqlserver"), Some("srv"), Some("2.7.0.Final"));
        e.snapshot = core.interner.snapshot("false");
        e.op = op;
        e.buf = b"{\"id\":1}".to_vec();
        e.key = (0, e.buf.len() as u32);
        e.commit = lsn(commit);
        e.change = lsn(commit);
        e.serial = Some(1);
        e
    }

    fn core() -> Core {
        Core::new(Config {
            pair_key_changes: true,
            max_pending: 1000,
            dedupe_capacity: 100,
        })
    }

    #[test]
    fn lsn_bytes_round_trip() {
        assert_eq!(lsn_bytes(0), Vec::<u8>::new());
        assert_eq!(lsn_key_of(b""), Some(0));
        let key = lsn_key(&lsn(7));
        assert_eq!(lsn_bytes(key), vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 7]);
        assert_eq!(lsn_key_of(&lsn_bytes(key)), Some(key));
        assert_eq!(lsn_key_of(b"short"), None);
    }

    #[test]
    fn resume_points_follow_what_is_released() {
        let mut c = core();
        assert!(c.resume_marks().is_none());
        c.track_resume_points();
        let other = c.topic("srv.db.dbo.t");
        let tp1 = c.tp(other, 1);
        c.expect(tp1); // partition 1 is silent: nothing is released
        let e = event(&mut c, 0, 5, 3, b'c');
        assert!(c.accept(e).is_none());
        let e = event(&mut c, 0, 6, 4, b'u');
        assert!(c.accept(e).is_none());
        let tp0 = c.tp(other, 0);
        let pending: Vec<_> = c.pending_offsets().into_iter().collect();
        assert_eq!(pending, vec![(tp0, 5)]);
        assert_eq!(c.resume_marks().map(|m| m.len()), Some(0));
        // a TX END of a commit nothing arrived for, before anything was released
        assert!(!c.end_transaction(&lsn_bytes(lsn_key(&lsn(9))), 1));
        // the first transaction is whole: released, and its mark is the resume mark
        assert!(c.end_transaction(&lsn_bytes(lsn_key(&lsn(3))), 1));
        assert_eq!(c.counters.pending, 1);
        let marks = c.resume_marks().unwrap_or_default();
        assert_eq!(marks.len(), 1);
        assert_eq!(marks[0].1, (lsn_key(&lsn(3)), lsn_key(&lsn(3)), 1));
        assert_eq!(
            marks[0].2,
            vec![(b'c', b"{\"id\":1}".to_vec().into_boxed_slice())]
        );
        assert_eq!(c.pending_offsets().get(&tp0), Some(&6));
        // a commit below what was released has been decided
        assert!(c.end_transaction(&lsn_bytes(lsn_key(&lsn(2))), 1));
        c.flush();
        assert!(c.pending_offsets().is_empty());
        assert_eq!(c.resume_marks().unwrap_or_default()[0].2[0].0, b'u');
    }

    #[test]
    fn restored_marks_decide_replays() {
        let mut c = core();
        c.restore_mark(
            0,
            (lsn_key(&lsn(4)), lsn_key(&lsn(4)), 1),
            vec![(b'c', b"{\"id\":1}".to_vec().into_boxed_slice())],
        );
        let topic = c.topic("srv.db.dbo.t");
        assert_eq!(c.tp(topic, 0), 0);
        let below = event(&mut c, 0, 1, 3, b'c');
        assert!(c.accept(below).is_none());
        let same = event(&mut c, 0, 2, 4, b'c');
        assert!(c.accept(same).is_none());
        assert_eq!(c.counters.duplicates, 2);
        let other_op = event(&mut c, 0, 3, 4, b'u');
        assert!(c.accept(other_op).is_none());
        assert_eq!((c.counters.duplicates, c.counters.pending), (2, 1));
        c.count_records(2, false);
        c.count_records(1, true);
        assert_eq!(
            (
                c.counters.records_in,
                c.counters.merged,
                c.counters.duplicates
            ),
            (3, 1, 3)
        );
    }

    #[test]
    fn an_active_partition_holds_the_watermark_again() {
        let mut c = core();
        let topic = c.topic("srv.db.dbo.t");
        let tp1 = c.tp(topic, 1);
        c.expect(tp1);
        c.mark_idle(tp1);
        c.mark_active(tp1);
        for (offset, commit) in [(0, 3), (1, 5)] {
            let e = event(&mut c, 0, offset, commit, b'c');
            assert!(c.accept(e).is_none());
        }
        assert_eq!(c.counters.pending, 2, "partition 1 holds the release again");
        c.mark_idle(tp1);
        assert_eq!(c.counters.pending, 1);
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Any sequence of events, TX ENDs (any bytes), idle/active partitions and restored
        /// marks: no panic; the resume marks hold each (op, key) once, sorted; what waits is
        /// what `pending_offsets` names; after `flush` nothing waits.
        #[test]
        fn resume_points_stay_consistent(
            steps in proptest::collection::vec(
                (0u8..6, 0i32..3, 0u8..8, 0usize..4, proptest::collection::vec(any::<u8>(), 0..12)),
                0..60),
        ) {
            let mut c = core();
            c.track_resume_points();
            let mut offsets = [0i64; 3];
            for (kind, partition, commit, op, bytes) in steps {
                let topic = c.topic("srv.db.dbo.t");
                let tp = c.tp(topic, partition);
                match kind {
                    0 | 1 => {
                        let o = offsets[partition as usize];
                        offsets[partition as usize] += 1;
                        let e = event(&mut c, partition, o, commit, b"cudr"[op]);
                        let _ = c.accept(e);
                    }
                    2 => {
                        let _ = c.end_transaction(&bytes, op as i64);
                    }
                    3 => c.mark_idle(tp),
                    4 => c.mark_active(tp),
                    _ => c.restore_mark(
                        tp,
                        (lsn_key(&lsn(commit)), lsn_key(&lsn(commit)), 1),
                        vec![(b"cudr"[op], bytes.clone().into()), (b"cudr"[op], bytes.into())],
                    ),
                }
                for (_, _, seen) in c.resume_marks().unwrap_or_default() {
                    prop_assert!(seen.windows(2).all(|w| w[0] < w[1]));
                }
                let waiting: usize = c.groups.values().map(|g| g.len()).sum();
                prop_assert_eq!(waiting as i64, c.counters.pending);
                prop_assert_eq!(c.pending_offsets().is_empty(), waiting == 0);
            }
            c.flush();
            prop_assert!(c.pending_offsets().is_empty());
            prop_assert_eq!(c.counters.pending, 0);
        }
    }

    #[test]
    fn lsn_keys_order_like_bytes() {
        let a = lsn_key(&Some([0, 0, 0, 0, 0, 0, 0, 0, 0, 1]));
        let b = lsn_key(&Some([0, 0, 0, 0, 0, 0, 0, 0, 1, 0]));
        assert!(0 < a && a < b && b < TOP);
    }

    /// An event of `op` whose images list `columns` in order, before and after holding
    /// `before` and `after` (as canonical JSON values), its column order `order`.
    fn imaged(
        core: &mut Core,
        op: u8,
        columns: &[&str],
        values: (&[&str], &[&str]),
        order: Option<Arc<[String]>>,
    ) -> Box<Event> {
        let mut e = event(core, 0, 0, 1, op);
        let image = |e: &mut Event, values: &[&str]| {
            let start = e.buf.len();
            let first = e.members.len();
            e.buf.push(b'{');
            for (i, (name, value)) in columns.iter().zip(values).enumerate() {
                if i > 0 {
                    e.buf.push(b',');
                }
                e.buf.push(b'"');
                let name_at = e.buf.len();
                e.buf.extend_from_slice(name.as_bytes());
                let name_end = e.buf.len();
                e.buf.extend_from_slice(b"\":");
                let value_at = e.buf.len();
                e.buf.extend_from_slice(value.as_bytes());
                e.members.push(Member {
                    name: (name_at as u32, name_end as u32),
                    value: (value_at as u32, e.buf.len() as u32),
                });
            }
            e.buf.push(b'}');
            Image {
                span: (start as u32, e.buf.len() as u32),
                members: (first as u32, e.members.len() as u32),
            }
        };
        if op != b'c' {
            e.before = Some(image(&mut e, values.0));
        }
        if op != b'd' {
            e.after = Some(image(&mut e, values.1));
        }
        e.column_order = order;
        e
    }

    fn line_of(core: &mut Core, e: Box<Event>) -> String {
        core.write_single(&e);
        String::from_utf8(core.take_output().0).unwrap_or_default()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 3000, ..Default::default() })]

        /// An event whose images the decoder read along one list of names (`Event::names`, as
        /// `scan::layout` sets it: the table's order when the names are all its columns in its
        /// order) is written as without them.
        #[test]
        fn names_read_along_a_layout_change_nothing(
            picked in proptest::sample::subsequence(vec!["id", "a", "b", "c", "d"], 1..=5).prop_shuffle(),
            table in proptest::option::of(proptest::sample::subsequence(vec!["id", "a", "b", "c", "d"], 0..=5).prop_shuffle()),
            values in proptest::collection::vec(proptest::sample::select(vec!["1", "1.0", "2", "true", "null", "\"x\"", "\"y\""]), 10),
            op in proptest::sample::select(vec![b'c', b'u', b'd', b'r']),
        ) {
            use proptest::prelude::*;
            let mut core = core();
            let order: Option<Arc<[String]>> = table.map(|t| t.iter().map(|n| n.to_string()).collect());
            let n = picked.len();
            let (before, after) = (&values[..n], &values[5..5 + n]);
            let plain = imaged(&mut core, op, &picked, (before, after), order.clone());
            let mut named = imaged(&mut core, op, &picked, (before, after), order.clone());
            let in_order = order.as_ref().is_some_and(|o| o.len() == n && o.iter().zip(&picked).all(|(a, b)| a == b));
            named.names = Some(Arc::new(crate::event::ImageNames::new(
                picked.iter().map(|p| format!("\"{p}\"")),
                if in_order { order.clone() } else { None },
            )));
            prop_assert_eq!(line_of(&mut core, named), line_of(&mut core, plain));
        }
    }

    /// `_ImageMemory` as the reference writes it: two dicts, the newer dropped into the older
    /// when it holds `half` identities.
    struct ReferenceMemory {
        half: usize,
        new: std::collections::HashMap<u128, u64>,
        old: std::collections::HashMap<u128, u64>,
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2000, ..Default::default() })]

        /// The batched memory answers every lookup and count as the reference's does, whatever
        /// the capacity, the repeats and where lookups fall between batches: often (flushes of
        /// a few identities), rarely or never (full batches through the counting pass, into
        /// tables of several places a region).
        #[test]
        fn batched_image_memory_is_the_references(
            capacity in proptest::sample::select(vec![0usize, 1, 2, 3, 4, 7, 100, 2048, 5000, 1_000_000]),
            lookups_in_256 in proptest::sample::select(vec![0u8, 2, 25]),
            steps in proptest::collection::vec((proptest::prelude::any::<u8>(), 0u128..6000, proptest::prelude::any::<u64>()), 1..6000),
        ) {
            let mut memory = ImageMemory::new(capacity);
            let mut reference = ReferenceMemory {
                half: if capacity > 0 { (capacity / 2).max(1) } else { 0 },
                new: Default::default(),
                old: Default::default(),
            };
            for (draw, id, digest) in steps {
                // identities spread over the table's places (uniform low bits), with repeats
                let identity = id.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
                let kind = match draw {
                    d if d < lookups_in_256 => 0,
                    d if d == 255 && lookups_in_256 > 0 => 1,
                    _ => 2,
                };
                match kind {
                    0 => {
                        let want = reference.new.get(&identity).or_else(|| reference.old.get(&identity)).copied();
                        proptest::prop_assert_eq!(memory.get(identity), want);
                    }
                    1 => proptest::prop_assert_eq!(memory.len(), reference.new.len() + reference.old.len()),
                    _ => {
                        memory.remember(identity, digest);
                        if reference.half > 0 {
                            reference.new.insert(identity, digest);
                            if reference.new.len() >= reference.half {
                                reference.old = std::mem::take(&mut reference.new);
                            }
                        }
                    }
                }
            }
            proptest::prop_assert_eq!(memory.len(), reference.new.len() + reference.old.len());
        }
    }
}
