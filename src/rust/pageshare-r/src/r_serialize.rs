#![allow(clippy::not_unsafe_ptr_arg_deref)] // SEXPs are R's handles, valid on its main thread by R's contract
//! R's own serialization (`serialize(x, NULL, xdr = FALSE)` and
//! `unserialize()`) over Rust buffers, through R's serializer itself
//! (`R_Serialize`, `R_Unserialize`): without the closures of R's functions
//! and their 8 KB first buffer, which cost more than a small message.
//!
//! Both run under `try_r` (an R error, such as no memory or a damaged
//! stream, comes back as `Err`). The stream callbacks below are called by R
//! from inside that call and never raise, never panic and never jump: a write
//! that finds no memory is noted and the bytes are refused afterwards; a read
//! past the end gives zeros (on which R's reader stops with its own error, or
//! reads a value) and the bytes are refused afterwards.

use crate::boundary::RError;
use crate::r_calls::try_r;
use crate::r_sys::*;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

struct Output {
    bytes: Vec<u8>,
    failed: bool,
}

unsafe extern "C" fn out_bytes(stream: R_outpstream_t, buf: *mut c_void, n: c_int) {
    // SAFETY: R passes back the stream initialised in `serialize`, whose data
    // is that call's `Output`, alive until R_Serialize returns.
    let out = unsafe { &mut *(*stream).data.cast::<Output>() };
    if out.failed || n <= 0 {
        return;
    }
    let n = n as usize;
    if out.bytes.try_reserve(n).is_err() {
        out.failed = true;
        return;
    }
    // SAFETY: R hands over `n` readable bytes at `buf`; the room was reserved
    // above, so extending does not allocate (nor panic).
    out.bytes.extend_from_slice(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) });
}

unsafe extern "C" fn out_char(stream: R_outpstream_t, c: c_int) {
    let mut byte = c as u8;
    // SAFETY: as for out_bytes; one byte at a live local.
    unsafe { out_bytes(stream, (&mut byte as *mut u8).cast(), 1) };
}

/// Set by `note_by_value`: the object serialized holds an environment (other
/// than a srcref's srcfile), an external pointer or a weak reference by value.
static BY_VALUE: AtomicBool = AtomicBool::new(false);

/// R's persistence hook, called for each environment, external pointer and
/// weak reference R writes by value; it only takes note (R writes the item as
/// usual).
unsafe extern "C" fn note_by_value(item: SEXP, _data: SEXP) -> SEXP {
    // SAFETY: R passes a valid object; reading its type and class neither
    // allocates nor raises.
    let srcfile = unsafe { TYPEOF(item) == SEXPTYPE::ENVSXP && Rf_inherits(item, c"srcfile".as_ptr()) != 0 };
    if !srcfile {
        BY_VALUE.store(true, Ordering::Relaxed);
    }
    nil()
}

/// `serialize(x, NULL, xdr = FALSE)`'s bytes, and whether `x` holds anything
/// by value that may change in place (see `note_by_value`).
pub fn serialize(x: SEXP) -> Result<(Vec<u8>, bool), RError> {
    let mut out = Output { bytes: Vec::new(), failed: false };
    let data: *mut Output = &mut out;
    BY_VALUE.store(false, Ordering::Relaxed);
    // SAFETY: R's serializer on the main thread over a stream whose callbacks
    // above write into `out` (alive across the call); the stream struct is
    // initialised by R_InitOutPStream before use. The closure holds only
    // Copy values, so R's jump out of it drops nothing.
    try_r(|| unsafe {
        let mut stream = std::mem::MaybeUninit::<R_outpstream_st>::zeroed();
        R_InitOutPStream(
            stream.as_mut_ptr(),
            data.cast(),
            R_pstream_format_t::R_pstream_binary_format,
            3,
            Some(out_char),
            Some(out_bytes),
            Some(note_by_value),
            R_NilValue,
        );
        R_Serialize(x, stream.as_mut_ptr());
    })?;
    if out.failed {
        return Err(RError::system("no memory for a message of pageshare's pool"));
    }
    Ok((out.bytes, BY_VALUE.load(Ordering::Relaxed)))
}

unsafe extern "C" fn count_bytes(stream: R_outpstream_t, _buf: *mut c_void, n: c_int) {
    // SAFETY: R passes back the stream initialised in `serialized_size`,
    // whose data is that call's count, alive until R_Serialize returns.
    unsafe { *(*stream).data.cast::<f64>() += n.max(0) as f64 };
}

unsafe extern "C" fn count_char(stream: R_outpstream_t, _c: c_int) {
    // SAFETY: as for count_bytes.
    unsafe { count_bytes(stream, std::ptr::null_mut(), 1) };
}

/// The number of bytes `serialize(x, NULL)` would write (XDR, version 3),
/// counted without building them.
pub fn serialized_size(x: SEXP) -> Result<f64, RError> {
    let mut n = 0.0f64;
    let data: *mut f64 = &mut n;
    // SAFETY: as in `serialize`, over the counting callbacks above.
    try_r(|| unsafe {
        let mut stream = std::mem::MaybeUninit::<R_outpstream_st>::zeroed();
        R_InitOutPStream(
            stream.as_mut_ptr(),
            data.cast(),
            R_pstream_format_t::R_pstream_xdr_format,
            3,
            Some(count_char),
            Some(count_bytes),
            None,
            R_NilValue,
        );
        R_Serialize(x, stream.as_mut_ptr());
    })?;
    Ok(n)
}

struct Input {
    bytes: *const u8,
    len: usize,
    at: usize,
    short: bool,
}

unsafe extern "C" fn in_bytes(stream: R_inpstream_t, buf: *mut c_void, n: c_int) {
    // SAFETY: R passes back the stream initialised in `unserialize`, whose
    // data is that call's `Input`, alive until R_Unserialize returns.
    let input = unsafe { &mut *(*stream).data.cast::<Input>() };
    let n = n.max(0) as usize;
    let have = n.min(input.len - input.at);
    // SAFETY: `buf` has room for `n` bytes (R's contract); `have` bytes are
    // read from within the input, the rest of `buf` is zeroed.
    unsafe {
        std::ptr::copy_nonoverlapping(input.bytes.add(input.at), buf.cast::<u8>(), have);
        std::ptr::write_bytes(buf.cast::<u8>().add(have), 0, n - have);
    }
    input.at += have;
    if have < n {
        input.short = true;
    }
}

unsafe extern "C" fn in_char(stream: R_inpstream_t) -> c_int {
    let mut byte = 0u8;
    // SAFETY: as for in_bytes; one byte at a live local.
    unsafe { in_bytes(stream, (&mut byte as *mut u8).cast(), 1) };
    byte as c_int
}

/// The object `bytes` (R's serialization, of any format) hold, all of them.
/// The result is unprotected: the caller protects it before R allocates.
pub fn unserialize(bytes: &[u8]) -> Result<SEXP, RError> {
    let mut input = Input { bytes: bytes.as_ptr(), len: bytes.len(), at: 0, short: false };
    let data: *mut Input = &mut input;
    // SAFETY: as in `serialize`, over the callbacks above reading `input`
    // (alive across the call, its bytes borrowed for it).
    let x = try_r(|| unsafe {
        let mut stream = std::mem::MaybeUninit::<R_inpstream_st>::zeroed();
        R_InitInPStream(
            stream.as_mut_ptr(),
            data.cast(),
            R_pstream_format_t::R_pstream_any_format,
            Some(in_char),
            Some(in_bytes),
            None,
            R_NilValue,
        );
        R_Unserialize(stream.as_mut_ptr())
    })?;
    if input.short || input.at != input.len {
        return Err(RError::system("a message of pageshare's pool is damaged"));
    }
    Ok(x)
}
