//! Canonical records as an Arrow record batch, handed to Python through the Arrow C Data
//! Interface (the PyCapsule protocol: `__arrow_c_array__`), so that `pyarrow.record_batch(b)`
//! or any Arrow consumer takes the columns without a Python object per record.
//!
//! Columns (all UTF-8): `event_id`, `op`, `table_id`, `seq`, `commit_ts` (nullable), `key` (the
//! canonical key JSON) and `value` (the canonical record JSON, as in the JSON lines).

use crate::core::Core;
use arrow_array::builder::StringBuilder;
use arrow_array::{Array, ArrayRef, StructArray};
use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;
use arrow_schema::{DataType, Field};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};
use std::ffi::CString;
use std::sync::Arc;

pub const COLUMNS: [&str; 7] = [
    "event_id",
    "op",
    "table_id",
    "seq",
    "commit_ts",
    "key",
    "value",
];

/// The text of a JSON token of the output ([`crate::jsonw::token_bytes`] as UTF-8).
fn token(out: &[u8], span: (u32, u32)) -> Option<std::borrow::Cow<'_, str>> {
    match crate::jsonw::token_bytes(out, span)? {
        std::borrow::Cow::Borrowed(b) => {
            std::str::from_utf8(b).ok().map(std::borrow::Cow::Borrowed)
        }
        std::borrow::Cow::Owned(b) => String::from_utf8(b).ok().map(std::borrow::Cow::Owned),
    }
}

/// The records written so far as a struct array (the caller then clears the output).
pub fn batch(core: &Core) -> StructArray {
    let out = &core.out;
    let n = core.spans.len();
    let mut builders: Vec<StringBuilder> = (0..COLUMNS.len())
        .map(|i| StringBuilder::with_capacity(n, if i == 6 { out.len() } else { n * 24 }))
        .collect();
    let mut start = 0usize;
    for (spans, &end) in core.spans.iter().zip(core.line_ends.iter()) {
        let id = token(out, spans[5]);
        builders[0].append_option(id.as_deref());
        for (column, span) in [(1, spans[0]), (2, spans[1]), (3, spans[2]), (4, spans[3])] {
            builders[column].append_option(token(out, span).as_deref());
        }
        let key = &out[spans[4].0 as usize..spans[4].1 as usize];
        builders[5].append_value(std::str::from_utf8(key).unwrap_or("{}"));
        let line = &out[start..end - 1];
        builders[6].append_value(std::str::from_utf8(line).unwrap_or(""));
        start = end;
    }
    let fields: Vec<(Arc<Field>, ArrayRef)> = COLUMNS
        .iter()
        .zip(builders.iter_mut())
        .map(|(name, b)| {
            let array: ArrayRef = Arc::new(b.finish());
            (
                Arc::new(Field::new(*name, DataType::Utf8, *name == "commit_ts")),
                array,
            )
        })
        .collect();
    StructArray::from(fields)
}

/// One exported batch: `pyarrow.record_batch(obj)` (or any consumer of the Arrow PyCapsule
/// protocol) takes it once.
#[pyclass(module = "debezium_bridge._native")]
pub struct ArrowBatch {
    array: Option<StructArray>,
    rows: usize,
}

impl ArrowBatch {
    pub fn new(array: StructArray) -> Self {
        let rows = array.len();
        ArrowBatch {
            array: Some(array),
            rows,
        }
    }
}

#[pymethods]
impl ArrowBatch {
    #[getter]
    fn num_rows(&self) -> usize {
        self.rows
    }

    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &mut self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let _ = requested_schema; // the batch is given in its own schema
        let array = self
            .array
            .take()
            .ok_or_else(|| PyValueError::new_err("this Arrow batch was exported already"))?;
        let data = array.to_data();
        let schema = FFI_ArrowSchema::try_from(data.data_type())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let ffi_array = FFI_ArrowArray::new(&data);
        let schema_capsule = PyCapsule::new(py, schema, Some(CString::new("arrow_schema")?))?;
        let array_capsule = PyCapsule::new(py, ffi_array, Some(CString::new("arrow_array")?))?;
        PyTuple::new(py, [schema_capsule.into_any(), array_capsule.into_any()])
    }
}
