//! Shared by the decoders: how row images are read ([`RowMode`]), where a written image sits
//! ([`ImageAt`]), and integers as msgspec's typed `int` reads them ([`StrictInt`], dump lines).

use crate::schema::Table;
use serde::de::{self, Deserializer, Visitor};
use std::fmt;

fn refuse<E: de::Error>() -> E {
    E::custom("declined")
}

/// How row images are read.
#[derive(Clone, Copy)]
pub enum RowMode<'t> {
    Schemaless,
    Table(&'t Table),
}

/// Where an image sits: `out[span]`, `members[from..to]`.
#[derive(Debug, Clone, Copy)]
pub struct ImageAt {
    pub span: (u32, u32),
    pub members: (u32, u32),
}

/// An integer as msgspec's typed `int` reads it (floats refused).
#[derive(Debug, Clone, Copy)]
pub struct StrictInt(pub i64);

impl<'de> de::Deserialize<'de> for StrictInt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = StrictInt;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<StrictInt, E> {
                Ok(StrictInt(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<StrictInt, E> {
                i64::try_from(v).map(StrictInt).map_err(|_| refuse())
            }
        }
        d.deserialize_any(V)
    }
}
