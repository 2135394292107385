//! R's C API, raw: extendr-ffi's bindings plus the few entry points it lacks.
//! Every call into R goes through this module's names (those that may raise
//! an R error through `r_calls`), and only entry points
//! that R documents as API (`tools:::funAPI()` on R >= 4.5) are used: R 4.6
//! no longer exports some of the others, and `R CMD check` reports them.
#![allow(non_snake_case)]

pub use extendr_ffi::*;

#[allow(improper_ctypes)] // SEXPREC is opaque: only pointers to it cross.
extern "C" {
    pub fn Rf_translateCharUTF8(x: SEXP) -> *const std::os::raw::c_char;
    pub fn Rf_ScalarLogical(x: std::os::raw::c_int) -> SEXP;
    pub fn Rf_ScalarReal(x: f64) -> SEXP;
    pub fn Rf_ScalarString(x: SEXP) -> SEXP;
    pub fn Rf_asInteger(x: SEXP) -> std::os::raw::c_int;
    pub fn Rf_asReal(x: SEXP) -> f64;
    pub fn Rf_asLogical(x: SEXP) -> std::os::raw::c_int;
    pub fn REAL_RO(x: SEXP) -> *const f64;
    pub fn INTEGER_RO(x: SEXP) -> *const std::os::raw::c_int;
    pub fn Rf_getCharCE(x: SEXP) -> std::os::raw::c_int;
    pub fn Rf_lang2(s: SEXP, t: SEXP) -> SEXP;
    pub fn Rf_eval(e: SEXP, rho: SEXP) -> SEXP;
    pub fn R_set_altraw_Elt_method(cls: R_altrep_class_t, fun: R_altraw_Elt_method_t);
    pub fn R_set_altraw_Get_region_method(cls: R_altrep_class_t, fun: R_altraw_Get_region_method_t);
    pub fn R_set_altcomplex_Elt_method(cls: R_altrep_class_t, fun: R_altcomplex_Elt_method_t);
    pub fn R_set_altcomplex_Get_region_method(cls: R_altrep_class_t, fun: R_altcomplex_Get_region_method_t);
    pub fn R_InitOutPStream(
        stream: R_outpstream_t,
        data: R_pstream_data_t,
        format: R_pstream_format_t,
        version: std::os::raw::c_int,
        out_char: Option<unsafe extern "C" fn(R_outpstream_t, std::os::raw::c_int)>,
        out_bytes: Option<unsafe extern "C" fn(R_outpstream_t, *mut std::os::raw::c_void, std::os::raw::c_int)>,
        hook: Option<unsafe extern "C" fn(SEXP, SEXP) -> SEXP>,
        hook_data: SEXP,
    );
    pub fn R_InitInPStream(
        stream: R_inpstream_t,
        data: R_pstream_data_t,
        format: R_pstream_format_t,
        in_char: Option<unsafe extern "C" fn(R_inpstream_t) -> std::os::raw::c_int>,
        in_bytes: Option<unsafe extern "C" fn(R_inpstream_t, *mut std::os::raw::c_void, std::os::raw::c_int)>,
        hook: Option<unsafe extern "C" fn(SEXP, SEXP) -> SEXP>,
        hook_data: SEXP,
    );
    pub fn Rf_GetOption1(tag: SEXP) -> SEXP;
    pub fn R_existsVarInFrame(rho: SEXP, symbol: SEXP) -> std::os::raw::c_int;
    pub fn R_FindNamespace(info: SEXP) -> SEXP;
    pub fn Rf_installChar(x: SEXP) -> SEXP;
    pub fn Rf_allocList(n: std::os::raw::c_int) -> SEXP;
    pub fn Rf_inherits(x: SEXP, name: *const std::os::raw::c_char) -> std::os::raw::c_int;
    pub fn SETCAR(x: SEXP, y: SEXP) -> SEXP;
    pub fn Rf_lang4(s: SEXP, t: SEXP, u: SEXP, v: SEXP) -> SEXP;
    pub fn Rf_ScalarComplex(x: Rcomplex) -> SEXP;
    pub fn Rf_ScalarRaw(x: Rbyte) -> SEXP;
    pub fn RAW_ELT(x: SEXP, i: R_xlen_t) -> Rbyte;
    pub fn LOGICAL_RO(x: SEXP) -> *const std::os::raw::c_int;
    pub fn COMPLEX_RO(x: SEXP) -> *const Rcomplex;
    pub fn RAW_RO(x: SEXP) -> *const Rbyte;
}

pub fn nil() -> SEXP {
    // SAFETY: R_NilValue is initialised before any package code runs.
    unsafe { R_NilValue }
}

/// A writeable pointer to the data of an ordinary (non-ALTREP) vector, through
/// the typed accessors that are API (`DATAPTR` is not). Character vectors give
/// their array of strings, which R only reads through this pointer.
///
/// # Safety
/// Main R thread; `x` a valid vector of an atomic type or a character vector.
pub unsafe fn data_mut(x: SEXP) -> *mut std::os::raw::c_void {
    // SAFETY: each accessor matches the vector's type.
    unsafe {
        match TYPEOF(x) {
            SEXPTYPE::REALSXP => REAL(x).cast(),
            SEXPTYPE::INTSXP => INTEGER(x).cast(),
            SEXPTYPE::LGLSXP => LOGICAL(x).cast(),
            SEXPTYPE::CPLXSXP => COMPLEX(x).cast(),
            SEXPTYPE::RAWSXP => RAW(x).cast(),
            SEXPTYPE::STRSXP => STRING_PTR_RO(x).cast_mut().cast(),
            _ => DATAPTR_RO(x).cast_mut(),
        }
    }
}
