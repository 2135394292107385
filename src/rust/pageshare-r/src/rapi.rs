//! R's C API: extendr-ffi's bindings plus the few entry points it lacks.
//! Every call into R goes through this module's names.
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
    pub fn Rf_getCharCE(x: SEXP) -> std::os::raw::c_int;
    pub fn TRUELENGTH(x: SEXP) -> R_xlen_t;
    pub fn ATTRIB(x: SEXP) -> SEXP;
    pub fn OBJECT(x: SEXP) -> std::os::raw::c_int;
    pub fn LEVELS(x: SEXP) -> std::os::raw::c_int;
    pub fn SET_TRUELENGTH(x: SEXP, v: R_xlen_t);
    pub fn R_set_altraw_Elt_method(cls: R_altrep_class_t, fun: R_altraw_Elt_method_t);
    pub fn R_set_altraw_Get_region_method(cls: R_altrep_class_t, fun: R_altraw_Get_region_method_t);
    pub fn R_set_altcomplex_Elt_method(cls: R_altrep_class_t, fun: R_altcomplex_Elt_method_t);
    pub fn R_set_altcomplex_Get_region_method(cls: R_altrep_class_t, fun: R_altcomplex_Get_region_method_t);
}

pub fn nil() -> SEXP {
    // SAFETY: R_NilValue is initialised before any package code runs.
    unsafe { R_NilValue }
}
