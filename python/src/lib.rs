//! `pageshare._core`: the Python side of pageshare's keys, on the same Rust
//! core as the R package (pageshare-core: segments, the per-user index, the
//! keyed-sharing protocol, attribute blobs). The Python package
//! (`pageshare/__init__.py`) turns what this module returns into NumPy arrays
//! and Arrow tables; nothing here knows NumPy.
//!
//! A [`PySegment`] holds its segment's mapping (an `Arc`, as an R view does):
//! it exports the data read-only through Python's buffer protocol, so
//! `numpy.frombuffer()` makes an array over the shared pages whose base keeps
//! the mapping alive until the array is collected. Every error is one of the
//! exception classes below, raised after the Rust frames have returned (PyO3
//! turns a panic into an exception too, but none is expected: the core returns
//! errors).

use pageshare_core::content;
use pageshare_core::header::Kind;
use pageshare_core::keys::{self, KeyError, Shared, Wanted};
use pageshare_core::rserialize::{self, RObject, RValue, NA_INTEGER};
use pageshare_core::segment::{Contents, Segment};
use pageshare_core::strings::{self, Encoding};
use pageshare_core::{index, registry, Error as CoreError};
use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::{PyBufferError, PyException, PyKeyboardInterrupt};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::borrow::Cow;
use std::os::raw::{c_int, c_void};
use std::path::PathBuf;
use std::sync::Arc;

create_exception!(pageshare, Error, PyException, "Every error pageshare raises (R: `pageshare_error`).");
create_exception!(pageshare, NotRegistered, Error, "No live process of this user shares an object under the key.");
create_exception!(pageshare, KeyConflict, Error, "Other data are shared under the key.");
create_exception!(pageshare, KeyBusy, Error, "Another process held the key's lock for the whole wait.");
create_exception!(pageshare, InvalidSegment, Error, "A segment or attribute blob that is not what it says.");
create_exception!(pageshare, SegmentGone, Error, "The segment does not exist any more.");
create_exception!(pageshare, NoSpace, Error, "Not enough memory for a segment.");
create_exception!(pageshare, PermissionDenied, Error, "The system refused access, or a file is not safe to trust.");
create_exception!(pageshare, BadArgument, Error, "An argument has a wrong type or value.");
create_exception!(pageshare, UnsupportedType, Error, "Data of a type that cannot be shared with R.");
create_exception!(pageshare, UnsupportedEnvironment, Error, "This system cannot pass segments between processes.");
create_exception!(pageshare, TooManySegments, Error, "Too close to the limit on open files for one more segment.");

/// A core error as the exception of its class.
fn core_error(e: CoreError) -> PyErr {
    use CoreError as E;
    let m = e.to_string();
    match e {
        E::NoSpace { .. } | E::OverBudget { .. } => NoSpace::new_err(m),
        E::Missing { .. } => SegmentGone::new_err(m),
        E::Taken { .. } => KeyConflict::new_err(m),
        E::Invalid { .. } => InvalidSegment::new_err(m),
        E::Argument(_) => BadArgument::new_err(m),
        E::Descriptors { .. } => TooManySegments::new_err(m),
        E::Unsafe { .. } | E::Unreachable { .. } => PermissionDenied::new_err(m),
        E::Unsupported { .. } => UnsupportedEnvironment::new_err(m),
        E::Os { ref source, .. } => match source.raw_os_error() {
            // (EPERM, EACCES; ENOSPC)
            Some(1) | Some(13) => PermissionDenied::new_err(m),
            Some(28) => NoSpace::new_err(m),
            _ => Error::new_err(m),
        },
    }
}

/// A key error as the exception of its class, with what to do.
struct Failure(PyErr);

impl From<KeyError> for Failure {
    fn from(e: KeyError) -> Failure {
        Failure(match e {
            KeyError::Conflict(m) => KeyConflict::new_err(m),
            KeyError::NotRegistered(m) => NotRegistered::new_err(format!(
                "{m}; share it first (R: share(x, key = ), Python: pageshare.share(a, key=)), or check the key"
            )),
            KeyError::Invalid(m) => InvalidSegment::new_err(m),
            KeyError::Interrupted => PyKeyboardInterrupt::new_err("interrupted while waiting for a key's lock"),
            busy @ KeyError::Busy { .. } => KeyBusy::new_err(format!(
                "{busy} (argument wait=, environment variable PAGESHARE_KEY_WAIT); try again once it is done, or \
                 wait longer"
            )),
            KeyError::Core(e, context) => {
                let err = core_error(e);
                match context {
                    None => err,
                    Some(c) => Python::with_gil(|py| {
                        let text = format!("{c}: {}", err.value(py));
                        PyErr::from_type(err.get_type(py), text)
                    }),
                }
            }
        })
    }
}

impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        f.0
    }
}

fn kind_of(name: &str) -> PyResult<Kind> {
    Ok(match name {
        "double" => Kind::Double,
        "integer" => Kind::Integer,
        "logical" => Kind::Logical,
        "character" => Kind::Character,
        "raw" => Kind::Raw,
        other => {
            return Err(UnsupportedType::new_err(format!(
                "kind '{other}': segments hold double, integer, logical, character or raw vectors"
            )))
        }
    })
}

/// One segment's mapping, held while this object (or an array over its
/// buffer) lives.
#[pyclass(name = "Segment", module = "pageshare._core", frozen)]
struct PySegment {
    seg: Arc<Segment>,
}

#[pymethods]
impl PySegment {
    /// The R type of the elements: "double", "integer", "logical", "character", ...
    #[getter]
    fn kind(&self) -> &'static str {
        self.seg.header().kind.name()
    }
    /// How many elements.
    #[getter]
    fn length(&self) -> u64 {
        self.seg.header().length
    }
    /// The segment's name (as R's `shared_info()` gives it).
    #[getter]
    fn name(&self) -> &str {
        self.seg.name()
    }
    /// The pid of the process that made it (or last adopted it).
    #[getter]
    fn owner_pid(&self) -> u32 {
        self.seg.owner().0
    }
    /// The address of the data in this process (for tests of zero copy).
    #[getter]
    fn address(&self) -> usize {
        self.seg.data().as_ptr() as usize
    }
    /// The serialized R attributes as stored.
    fn attributes_blob<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.seg.attributes())
    }
    /// The R attributes as a list of (name, value) pairs (see `decode_attributes`).
    fn attributes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        decode_attributes(py, self.seg.attributes())
    }
    /// A character segment's strings (a copy), None for NA.
    fn strings(&self) -> PyResult<Vec<Option<String>>> {
        if self.seg.header().kind != Kind::Character {
            return Err(BadArgument::new_err("strings() reads character segments"));
        }
        let table = self.seg.strings();
        Ok((0..table.len())
            .map(|i| {
                table.get(i).map(|(b, enc)| match enc {
                    Encoding::Latin1 => b.iter().map(|&c| c as char).collect(),
                    _ => String::from_utf8_lossy(b).into_owned(),
                })
            })
            .collect())
    }

    /// The data, read-only, as bytes (Python's buffer protocol).
    ///
    /// # Safety
    /// Called by Python with a valid `Py_buffer` to fill.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no buffer to fill"));
        }
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err(
                "shared pages are read-only: copy the array (numpy.array(a)) to write to it",
            ));
        }
        let data = slf.get().seg.data();
        // SAFETY: `view` is Python's to fill (checked non-null); the data stay
        // mapped while the exporter `slf` lives, and PyBuffer_FillInfo takes a
        // reference to it for the buffer's lifetime. The buffer is read-only
        // (readonly = 1): nothing writes through it.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(view, slf.as_ptr(), data.as_ptr() as *mut c_void, data.len() as isize, 1, flags)
        };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    /// Nothing to release: the reference PyBuffer_FillInfo took is Python's.
    ///
    /// # Safety
    /// Called by Python with the buffer `__getbuffer__` filled.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}

    fn __repr__(&self) -> String {
        let h = self.seg.header();
        format!(
            "<pageshare segment {} of {} {} elements, owner pid {}>",
            self.seg.name(),
            h.length,
            h.kind.name(),
            h.owner_pid
        )
    }
}

fn value_to_py(py: Python<'_>, obj: &RObject) -> PyResult<PyObject> {
    let na = |v: i32| if v == NA_INTEGER { None } else { Some(v) };
    Ok(match &obj.value {
        RValue::Null => py.None(),
        RValue::Logical(v) => {
            v.iter().map(|&x| na(x).map(|x| x != 0)).collect::<Vec<_>>().into_pyobject(py)?.into_any().unbind()
        }
        RValue::Integer(v) => v.iter().map(|&x| na(x)).collect::<Vec<_>>().into_pyobject(py)?.into_any().unbind(),
        RValue::Double(v) => v.clone().into_pyobject(py)?.into_any().unbind(),
        RValue::Character(v) => v.clone().into_pyobject(py)?.into_any().unbind(),
        RValue::List(v) => {
            let items = v.iter().map(|x| value_to_py(py, x)).collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any().unbind()
        }
    })
}

/// The R attributes in `blob` as a list of (name, value) pairs; values are
/// lists (integer NA and logical NA as None), None for NULL; attributes of
/// attributes are left out.
fn decode_attributes<'py>(py: Python<'py>, blob: &[u8]) -> PyResult<Bound<'py, PyList>> {
    let pairs = rserialize::decode_attributes(blob).map_err(core_error)?;
    let items = pairs
        .iter()
        .map(|(n, v)| Ok((n.clone(), value_to_py(py, v)?)))
        .collect::<PyResult<Vec<(String, PyObject)>>>()?;
    PyList::new(py, items)
}

#[pyfunction(name = "decode_attributes")]
fn py_decode_attributes<'py>(py: Python<'py>, blob: &[u8]) -> PyResult<Bound<'py, PyList>> {
    decode_attributes(py, blob)
}

/// One attribute value from Python: (kind, values).
fn value_from_py(kind: &str, values: &Bound<'_, PyAny>) -> PyResult<RObject> {
    let int = |v: Option<i64>| -> PyResult<i32> {
        match v {
            None => Ok(NA_INTEGER),
            Some(x) if x > i32::MIN as i64 && x <= i32::MAX as i64 => Ok(x as i32),
            Some(x) => Err(BadArgument::new_err(format!("{x} does not fit in R's integers"))),
        }
    };
    Ok(RObject::plain(match kind {
        "integer" => {
            RValue::Integer(values.extract::<Vec<Option<i64>>>()?.into_iter().map(int).collect::<PyResult<_>>()?)
        }
        "logical" => RValue::Logical(
            values.extract::<Vec<Option<bool>>>()?.into_iter().map(|b| b.map_or(NA_INTEGER, |b| b as i32)).collect(),
        ),
        "double" => RValue::Double(values.extract()?),
        "character" => RValue::Character(values.extract()?),
        "null" => RValue::Null,
        other => return Err(UnsupportedType::new_err(format!("attribute values of kind '{other}'"))),
    }))
}

/// The attribute blob of [(name, kind, values), ...] (kinds "integer",
/// "logical", "double", "character", "null"), as R's `serialize()` writes a
/// named list of them (version 2); empty for no attributes.
#[pyfunction]
fn encode_attributes<'py>(
    py: Python<'py>,
    attributes: Vec<(String, String, Bound<'py, PyAny>)>,
) -> PyResult<Bound<'py, PyBytes>> {
    let pairs = attributes
        .into_iter()
        .map(|(name, kind, values)| Ok((name, value_from_py(&kind, &values)?)))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyBytes::new(py, &rserialize::encode_attributes(&pairs)))
}

/// `data` as bytes: a C-contiguous buffer of unsigned bytes (a NumPy array's
/// `.view(numpy.uint8)` of its flat data).
fn bytes_of(buf: &PyBuffer<u8>) -> PyResult<&[u8]> {
    if !buf.is_c_contiguous() {
        return Err(BadArgument::new_err("the data must be one contiguous block"));
    }
    if buf.len_bytes() == 0 {
        return Ok(&[]);
    }
    // SAFETY: a contiguous buffer of len_bytes() bytes, kept alive (and its
    // exporter with it) by `buf`, which outlives the slice; the GIL is held
    // while it is read, so Python code cannot resize the exporter meanwhile.
    Ok(unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const u8, buf.len_bytes()) })
}

/// Share `data`, `length` elements of `kind` with the attribute blob
/// `attributes`, under `key` (see `share_vector`).
fn share_contents(
    py: Python<'_>,
    key: &str,
    dir: PathBuf,
    (kind, length, attributes): (Kind, u64, &[u8]),
    data: &[u8],
    wait: f64,
) -> PyResult<PySegment> {
    let wanted = Wanted { kind, length, attributes, data: Cow::Borrowed(data) };
    let shared = keys::share(
        &dir,
        key,
        wanted,
        wait,
        &mut || py.check_signals().is_err(),
        &mut || {},
        |name| -> Result<(Arc<Segment>, Arc<Segment>), Failure> {
            let contents = Contents { kind, length, data_len: data.len() as u64, attributes };
            // SAFETY: no handover: create_copy only copies `data`.
            let (seg, _) =
                unsafe { registry::create_copy(name, contents, data, 0, None) }.map_err(|e| Failure(core_error(e)))?;
            Ok((seg.clone(), seg))
        },
    )?;
    Ok(PySegment {
        seg: match shared {
            Shared::Existing(seg) | Shared::Made(seg) => seg,
        },
    })
}

/// Share `data` (the bytes of `length` elements of `kind`, with the attribute
/// blob `attributes`) under `key` in the index under `dir`: the segment a
/// holder already has with these contents, or a new sealed one. This process
/// holds it until `release(key)` or its end.
#[pyfunction]
#[pyo3(signature = (key, dir, kind, length, attributes, data, wait))]
#[allow(clippy::too_many_arguments)]
fn share_vector(
    py: Python<'_>,
    key: &str,
    dir: PathBuf,
    kind: &str,
    length: u64,
    attributes: &[u8],
    data: PyBuffer<u8>,
    wait: f64,
) -> PyResult<PySegment> {
    let kind = kind_of(kind)?;
    let bytes = bytes_of(&data)?;
    if kind == Kind::Character || Some(bytes.len() as u64) != length.checked_mul(kind.elem_size()) {
        return Err(BadArgument::new_err(format!(
            "{} bytes are not {length} elements of {}",
            bytes.len(),
            kind.name()
        )));
    }
    share_contents(py, key, dir, (kind, length, attributes), bytes, wait)
}

/// Pack `items` (None for NA) as a character segment's data.
fn packed(items: &[Option<String>]) -> PyResult<Vec<u8>> {
    let total: u64 = items.iter().flatten().map(|s| s.len() as u64).sum();
    let n = strings::packed_len(items.len() as u64, total)
        .ok_or_else(|| BadArgument::new_err("the strings are too large to share"))?;
    let mut out = vec![0u8; n as usize];
    strings::pack(items.iter().map(|s| s.as_deref().map(|s| (s.as_bytes(), Encoding::Utf8))), &mut out);
    Ok(out)
}

/// As `share_vector`, for a character vector (UTF-8 strings, None for NA).
#[pyfunction]
fn share_strings(
    py: Python<'_>,
    key: &str,
    dir: PathBuf,
    items: Vec<Option<String>>,
    attributes: &[u8],
    wait: f64,
) -> PyResult<PySegment> {
    let data = packed(&items)?;
    let length = items.len() as u64;
    share_contents(py, key, dir, (Kind::Character, length, attributes), &data, wait)
}

/// The content key of a vector (as R's `content_key()` gives it): `data` the
/// bytes of its elements, `attributes` its canonical attribute blob.
#[pyfunction]
fn content_key(kind: &str, length: u64, attributes: &[u8], data: PyBuffer<u8>) -> PyResult<String> {
    let kind = kind_of(kind)?;
    Ok(content::content_key(kind, length, attributes, bytes_of(&data)?))
}

/// The content key of a character vector (see `content_key`).
#[pyfunction]
fn content_key_strings(items: Vec<Option<String>>, attributes: &[u8]) -> PyResult<String> {
    Ok(content::content_key(Kind::Character, items.len() as u64, attributes, &packed(&items)?))
}

/// The segment some process of this user shares under `key`; this process
/// then holds it too, until `release(key)` or its end.
#[pyfunction]
fn retrieve(key: &str, dir: PathBuf) -> PyResult<PySegment> {
    Ok(PySegment { seg: keys::retrieve(&dir, key).map_err(Failure::from)? })
}

/// Stop holding the object shared or retrieved under `key`; False if this
/// process held none. Arrays over it stay valid until they are collected.
#[pyfunction]
fn release(key: &str) -> PyResult<bool> {
    keys::release(key).map_err(core_error)
}

/// The segment this process holds under `key`, if it does (not a retrieval).
#[pyfunction]
fn held_segment(key: &str) -> PyResult<Option<PySegment>> {
    keys::check_key(key).map_err(core_error)?;
    let name = pageshare_core::naming::keyed(key, pageshare_core::os::pid()).map_err(core_error)?;
    Ok(registry::held_as(&name).map(|seg| PySegment { seg }))
}

/// The index names this process holds (for tests).
#[pyfunction]
fn held() -> Vec<String> {
    registry::held()
}

/// The live index names under `dir` (any process of this user).
#[pyfunction]
fn live_names(dir: PathBuf) -> PyResult<Vec<String>> {
    index::live_names(&dir).map_err(core_error)
}

/// Remove index entries of holders that died; returns their names.
#[pyfunction]
fn sweep(dir: PathBuf) -> PyResult<Vec<String>> {
    index::sweep(&dir).map_err(core_error)
}

/// At a normal exit: withdraw this process's index entries.
#[pyfunction]
fn withdraw_at_exit() {
    registry::withdraw_at_exit();
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PySegment>()?;
    for (name, class) in [
        ("Error", py.get_type::<Error>()),
        ("NotRegistered", py.get_type::<NotRegistered>()),
        ("KeyConflict", py.get_type::<KeyConflict>()),
        ("KeyBusy", py.get_type::<KeyBusy>()),
        ("InvalidSegment", py.get_type::<InvalidSegment>()),
        ("SegmentGone", py.get_type::<SegmentGone>()),
        ("NoSpace", py.get_type::<NoSpace>()),
        ("PermissionDenied", py.get_type::<PermissionDenied>()),
        ("BadArgument", py.get_type::<BadArgument>()),
        ("UnsupportedType", py.get_type::<UnsupportedType>()),
        ("UnsupportedEnvironment", py.get_type::<UnsupportedEnvironment>()),
        ("TooManySegments", py.get_type::<TooManySegments>()),
    ] {
        m.add(name, class)?;
    }
    m.add_function(wrap_pyfunction!(share_vector, m)?)?;
    m.add_function(wrap_pyfunction!(share_strings, m)?)?;
    m.add_function(wrap_pyfunction!(retrieve, m)?)?;
    m.add_function(wrap_pyfunction!(release, m)?)?;
    m.add_function(wrap_pyfunction!(content_key, m)?)?;
    m.add_function(wrap_pyfunction!(content_key_strings, m)?)?;
    m.add_function(wrap_pyfunction!(py_decode_attributes, m)?)?;
    m.add_function(wrap_pyfunction!(encode_attributes, m)?)?;
    m.add_function(wrap_pyfunction!(held, m)?)?;
    m.add_function(wrap_pyfunction!(held_segment, m)?)?;
    m.add_function(wrap_pyfunction!(live_names, m)?)?;
    m.add_function(wrap_pyfunction!(sweep, m)?)?;
    m.add_function(wrap_pyfunction!(withdraw_at_exit, m)?)?;
    Ok(())
}
