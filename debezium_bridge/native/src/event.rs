//! A decoded data event, with its row images already in canonical JSON.

use crate::lsn::Lsn;
use crate::value::Member;
use std::sync::Arc;

/// A row image: the canonical JSON object `buf[span]`; its members are
/// `Event::members[members.0..members.1]`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Image {
    pub span: (u32, u32),
    pub members: (u32, u32),
}

/// What the event came from: its Kafka coordinates.
#[derive(Debug, Clone, Copy)]
pub struct Origin {
    pub topic: u32,
    pub partition: i32,
    pub offset: Option<i64>,
    /// Topic-partition id (watermark and replay marks).
    pub tp: u32,
}

#[derive(Debug, Clone)]
pub struct Tx {
    pub id: String,
    pub total_order: Option<i64>,
    pub data_collection_order: Option<i64>,
    pub begin_lsn: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Event {
    pub origin: Origin,
    pub table: u32,
    pub op: u8,
    /// Canonical key JSON (`{}` for a keyless table) is `buf[key]`.
    pub buf: Vec<u8>,
    pub key: (u32, u32),
    pub before: Option<Image>,
    pub after: Option<Image>,
    /// Where each member of the images sits in `buf`.
    pub members: Vec<Member>,
    pub unavailable: Vec<Box<str>>,
    pub commit: Lsn,
    pub change: Lsn,
    /// `event_serial_no` (`None`: absent; sorts as -1).
    pub serial: Option<i64>,
    /// Position texts when they are not Debezium's form of `commit`/`change` (fallback events).
    pub position_text: Option<Box<(Option<String>, Option<String>)>>,
    pub source_ts_ms: Option<i64>,
    pub ts_ms: Option<i64>,
    pub snapshot: u32,
    pub tx: Option<Box<Tx>>,
    pub source: u32,
    pub column_order: Option<Arc<[String]>>,
    pub partner_key: Option<Box<[u8]>>,
    /// `seq` text when it was given (fallback events); else computed from the position.
    pub seq: Option<Box<str>>,
    /// Columns the source says an update changed (`ChangeEvent.changed`: the update mask of
    /// change-table rows), in column order; `None`: found by comparing the images.
    pub changed: Option<Arc<[String]>>,
    /// The member names of both images, when the decoder read each along one list of names.
    pub names: Option<Arc<ImageNames>>,
    /// Its partition does not keep commit order (`ChangeEvent.unordered`: CES events): a
    /// replay is found by its identity among the recent ones, not by the partition's mark.
    pub unordered: bool,
}

/// The member names of a table's row images as a decoder read them (`scan::layout`): every
/// image of an event that has these names lists exactly them, in this order.
#[derive(Debug)]
pub struct ImageNames {
    /// `"a","b",…`: the names as JSON strings, comma separated (`changed_columns` when every
    /// column is in it).
    pub list: Box<[u8]>,
    /// Where each name's JSON string is in `list`.
    pub spans: Box<[(u32, u32)]>,
    /// The column order of the table version these names are in, all of them (schema-ful
    /// rows); `None`: schema-less.
    pub order: Option<Arc<[String]>>,
    /// Per name, the image digest's member hasher with the name already written
    /// ([`crate::core::member_hasher`]): the same state it reaches from the event's bytes.
    pub hashers: Box<[ahash::AHasher]>,
}

impl ImageNames {
    /// Names in `list`'s text; `order`: see [`ImageNames::order`].
    pub fn new(
        quoted: impl Iterator<Item = impl AsRef<[u8]>>,
        order: Option<Arc<[String]>>,
    ) -> Self {
        let mut list = Vec::new();
        let mut spans = Vec::new();
        let mut hashers = Vec::new();
        for name in quoted {
            if !list.is_empty() {
                list.push(b',');
            }
            let from = list.len() as u32;
            let name = name.as_ref();
            list.extend_from_slice(name);
            spans.push((from, list.len() as u32));
            // a member's name in an event's buffer is its JSON string without the quotes
            hashers.push(crate::core::member_hasher(&name[1..name.len() - 1]));
        }
        ImageNames {
            list: list.into(),
            spans: spans.into(),
            order,
            hashers: hashers.into(),
        }
    }

    /// Whether the images of an event with these names, `count` members each, list the
    /// columns of `order` (the event's column order) in that order, when it has one.
    #[inline]
    pub fn fit(&self, count: usize, order: Option<&Arc<[String]>>) -> bool {
        self.spans.len() == count
            && match order {
                None => true,
                Some(order) => self.order.as_ref().is_some_and(|o| Arc::ptr_eq(o, order)),
            }
    }
}

impl Event {
    #[inline]
    pub fn key_bytes(&self) -> &[u8] {
        &self.buf[self.key.0 as usize..self.key.1 as usize]
    }

    #[inline]
    pub fn sort_serial(&self) -> i64 {
        self.serial.unwrap_or(-1)
    }

    #[inline]
    pub fn members_of(&self, image: &Image) -> &[Member] {
        &self.members[image.members.0 as usize..image.members.1 as usize]
    }

    #[inline]
    pub fn image_bytes(&self, image: &Image) -> &[u8] {
        &self.buf[image.span.0 as usize..image.span.1 as usize]
    }

    /// The `seq` text (`<commit 20 hex>:<change 20 hex>:<serial 20 digits>`).
    pub fn write_seq(&self, out: &mut Vec<u8>) {
        if let Some(seq) = &self.seq {
            out.extend_from_slice(seq.as_bytes());
            return;
        }
        crate::lsn::hex20(&self.commit, out);
        out.push(b':');
        crate::lsn::hex20(&self.change, out);
        out.push(b':');
        let serial = self.serial.unwrap_or(0).max(0) as u64;
        let mut buf = itoa::Buffer::new();
        let digits = buf.format(serial).as_bytes();
        out.extend(std::iter::repeat_n(
            b'0',
            20usize.saturating_sub(digits.len()),
        ));
        out.extend_from_slice(digits);
    }

    pub fn seq_string(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(62);
        self.write_seq(&mut out);
        out
    }

    /// A keyless table's row read in a snapshot (initial or incremental): it has no identity,
    /// so it is never a replay of another (`keyless_read` in the reference).
    pub fn is_keyless_read(&self) -> bool {
        self.op == b'r' && self.key_bytes() == b"{}"
    }

    pub fn is_snapshot_identity(&self, incremental: u32) -> bool {
        self.op == b'r' && self.snapshot != incremental
    }
}

/// Text and member buffers of written events, and the boxes they were in, kept for the next
/// events' decode: an event's two heap buffers cost ~700 instructions to allocate and free on
/// the wide table (glibc's slow path above 1 KiB; callgrind 2026-11-25), and events are
/// released in runs longer than glibc's per-size cache of freed blocks.
#[derive(Debug, Default)]
pub struct SpareBuffers {
    texts: Vec<Vec<u8>>,
    members: Vec<Vec<Member>>,
    boxes: Vec<Box<Event>>,
}

impl SpareBuffers {
    /// At most this many of each buffer are kept.
    const KEPT: usize = 64;
    /// At most this many boxes are kept (~330 bytes each). A kept box still holds what else
    /// its event owned (unavailable columns, `tx`, shared column lists) until every runner's
    /// next event fills it (they all box through [`SpareBuffers::boxed`]): at most this many
    /// events' worth; clearing it on `keep` cost ~50 instructions an event (callgrind, narrow
    /// schema-less).
    const KEPT_BOXES: usize = 1024;
    /// A buffer of more bytes than this is freed, not kept.
    const LARGEST: usize = 64 * 1024;

    /// An empty text buffer of at least `capacity` bytes.
    pub fn text(&mut self, capacity: usize) -> Vec<u8> {
        Self::take(&mut self.texts, capacity)
    }

    /// An empty member list of room for at least `capacity` members.
    pub fn members(&mut self, capacity: usize) -> Vec<Member> {
        Self::take(&mut self.members, capacity)
    }

    fn take<T>(kept: &mut Vec<Vec<T>>, capacity: usize) -> Vec<T> {
        let mut buffer = kept.pop().unwrap_or_default();
        buffer.reserve(capacity);
        buffer
    }

    /// `e` in a box, a kept one when there is one.
    #[inline]
    pub fn boxed(&mut self, e: Event) -> Box<Event> {
        match self.boxes.pop() {
            Some(mut kept) => {
                *kept = e;
                kept
            }
            None => Box::new(e),
        }
    }

    /// `e`'s buffers and box, for the next events.
    pub fn keep(&mut self, mut e: Box<Event>) {
        let mut text = std::mem::take(&mut e.buf);
        let mut members = std::mem::take(&mut e.members);
        if self.texts.len() < Self::KEPT && text.capacity() <= Self::LARGEST {
            text.clear();
            self.texts.push(text);
        }
        let member_bytes = members.capacity() * std::mem::size_of::<Member>();
        if self.members.len() < Self::KEPT && member_bytes <= Self::LARGEST {
            members.clear();
            self.members.push(members);
        }
        if self.boxes.len() < Self::KEPT_BOXES {
            self.boxes.push(e);
        }
    }
}
