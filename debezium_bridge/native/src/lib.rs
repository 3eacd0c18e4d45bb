//! The native translation core of debezium-bridge: decode Debezium SQL Server change events
//! (JsonConverter with and without schema, Confluent Avro), dedupe replays, order by position,
//! pair primary-key-change halves and write canonical change records, byte for byte as the
//! Python reference (`debezium_bridge.core.translator`) does.
//!
//! # Layout
//! * [`jsonw`]: JSON output exactly as msgspec writes it;
//! * [`lsn`]: LSN parsing and formatting;
//! * [`value`]: input JSON values → canonical bytes, Python equality on them;
//! * [`schema`]: Connect row schemas compiled to checks and converters (logical types);
//! * [`avro`]: Confluent Avro writer schemas compiled to readers of envelopes and keys;
//! * [`scan`]: Debezium JSON envelopes and keys read in one pass (the usual case);
//! * [`dom`]: the same through sonic-rs's document (what `scan` declines);
//! * [`decode`]: Debezium envelopes and keys → [`event::Event`];
//! * [`core`]: replay dedupe, ordering, release, pairing, canonical JSON lines;
//! * `py` (feature `python`): the extension module `debezium_bridge._native`.
//!
//! # One behaviour, two implementations
//! The native decoder either decodes a record exactly as the reference would, or *declines*
//! it ([`value::Decline`]); declined records are decoded by the Python reference and come back
//! as events into the same [`core::Core`], so ordering, dedupe and pairing state exist once,
//! here, whichever decoder read a record. Bad input is always declined: the reference writes
//! its dead letter, with its stage, class and message.

pub mod avro;
pub mod core;
pub mod decode;
pub mod dom;
pub mod dumps;
pub mod event;
pub mod jsonw;
pub mod lsn;
pub(crate) mod parse;
pub mod scan;
pub mod schema;
pub mod stream;
pub mod value;
pub mod window;
pub mod wire;

#[cfg(feature = "python")]
mod arrow;
#[cfg(feature = "python")]
mod py;

#[cfg(feature = "python")]
#[pyo3::pymodule]
fn _native(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
    py::register(m)
}
