/* serialize(x, NULL, xdr = FALSE) of simple values, written here instead of
 * by R_Serialize, which allocates a reference table of 1,099 entries for
 * every stream: for a small message of the pool that allocation, and the
 * collections it brings about, cost more than the rest of its trip.
 *
 * Simple: NULL, and vectors of the basic types (logical, integer, double,
 * complex, raw, character, and lists of simple values) that have no
 * attribute and are not ALTREP objects, nested at most MAX_DEPTH deep. Such values hold no symbol,
 * environment or other item that R's format writes as a reference, so their
 * bytes follow from the format alone (R Internals, "Serialization Formats";
 * version 3, native binary): a flags word (the type, and for a string its
 * encoding), the length, the elements. R's unserialize() reads them.
 *
 * The bytes are checked once per process against R_Serialize's for probes of
 * every kind written here (self_check()); where any differs (another R's
 * format), ps_serialize_simple_into() declines everything and callers use
 * R_Serialize. */
#include <Rinternals.h>
#include <Rversion.h>
#include <string.h>
#include "pool_messages.h"
#include "simple_serialize.h"

#define MAX_DEPTH 32
#define NILVALUE_SXP 254
/* R's encoding bits of a string (the "levels" of its flags word) */
#define LEVEL_BYTES (1 << 1)
#define LEVEL_LATIN1 (1 << 2)
#define LEVEL_UTF8 (1 << 3)
#define LEVEL_ASCII (1 << 6)

static int has_attributes(SEXP x) {
#if R_VERSION >= R_Version(4, 5, 0)
  return ANY_ATTRIB(x);
#else
  return ATTRIB(x) != R_NilValue;
#endif
}

static int string_levels(SEXP s) {
  const unsigned char *c = (const unsigned char *)CHAR(s);
  int ascii = 1;
  for (int i = 0; i < LENGTH(s); i++) ascii &= c[i] < 128;
  if (ascii) return LEVEL_ASCII;
  switch (Rf_getCharCE(s)) {
  case CE_UTF8: return LEVEL_UTF8;
  case CE_LATIN1: return LEVEL_LATIN1;
  case CE_BYTES: return LEVEL_BYTES;
  default: return 0;
  }
}

/* The size in bytes of x's item, or -1 when x is not simple. */
static R_xlen_t item_size(SEXP x, int depth) {
  if (x == R_NilValue) return 4;
  /* (an ALTREP vector, such as 1:n, would allocate its data here; R writes
   * some in a compact form of their own) */
  int type = TYPEOF(x);
  if (type != LGLSXP && type != INTSXP && type != REALSXP && type != CPLXSXP && type != RAWSXP &&
      type != STRSXP && type != VECSXP) {
    return -1;
  }
  if (depth > MAX_DEPTH || ALTREP(x) || has_attributes(x) || XLENGTH(x) > 0x7fffffff) return -1;
  R_xlen_t n = XLENGTH(x), size = 8;
  switch (type) {
  case LGLSXP:
  case INTSXP: return size + n * (R_xlen_t)sizeof(int);
  case REALSXP: return size + n * (R_xlen_t)sizeof(double);
  case CPLXSXP: return size + n * (R_xlen_t)sizeof(Rcomplex);
  case RAWSXP: return size + n;
  case STRSXP:
    for (R_xlen_t i = 0; i < n; i++) {
      SEXP s = STRING_ELT(x, i);
      size += 8 + (s == NA_STRING ? 0 : LENGTH(s));
    }
    return size;
  case VECSXP:
    for (R_xlen_t i = 0; i < n; i++) {
      R_xlen_t element = item_size(VECTOR_ELT(x, i), depth + 1);
      if (element < 0) return -1;
      size += element;
    }
    return size;
  default: return -1;
  }
}

static unsigned char *put_int(unsigned char *at, int value) {
  memcpy(at, &value, sizeof value);
  return at + sizeof value;
}

static unsigned char *put_bytes(unsigned char *at, const void *bytes, size_t n) {
  if (n) memcpy(at, bytes, n);
  return at + n;
}

/* Writes x's item (x simple, as item_size() found) at `at`; returns its end.
 * Allocates nothing (so nothing moves or goes while it writes). */
static unsigned char *put_item(unsigned char *at, SEXP x) {
  if (x == R_NilValue) return put_int(at, NILVALUE_SXP);
  int type = TYPEOF(x), n = (int)XLENGTH(x);
  at = put_int(put_int(at, type), n);
  switch (type) {
  case LGLSXP: return put_bytes(at, LOGICAL_RO(x), n * sizeof(int));
  case INTSXP: return put_bytes(at, INTEGER_RO(x), n * sizeof(int));
  case REALSXP: return put_bytes(at, REAL_RO(x), n * sizeof(double));
  case CPLXSXP: return put_bytes(at, COMPLEX_RO(x), n * sizeof(Rcomplex));
  case RAWSXP: return put_bytes(at, RAW_RO(x), n);
  case STRSXP:
    for (int i = 0; i < n; i++) {
      SEXP s = STRING_ELT(x, i);
      if (s == NA_STRING) {
        at = put_int(put_int(at, CHARSXP), -1);
      } else {
        at = put_int(put_int(at, CHARSXP | string_levels(s) << 12), LENGTH(s));
        at = put_bytes(at, CHAR(s), LENGTH(s));
      }
    }
    return at;
  default: /* VECSXP */
    for (int i = 0; i < n; i++) at = put_item(at, VECTOR_ELT(x, i));
    return at;
  }
}

/* The header R_Serialize writes before the item (format, versions, native
 * encoding): serialize(NULL)'s bytes but the item's 4. */
static SEXP header;
static int checked, usable;

static int self_check(void);

static SEXP the_header(void) {
  if (header == NULL) {
    SEXP null_bytes = PROTECT(ps_serialize_native(R_NilValue));
    SEXP h = Rf_allocVector(RAWSXP, XLENGTH(null_bytes) - 4);
    memcpy(RAW(h), RAW(null_bytes), XLENGTH(h));
    R_PreserveObject(h);
    header = h;
    UNPROTECT(1);
  }
  return header;
}

SEXP ps_serialize_header(void) {
  return the_header();
}

R_xlen_t ps_simple_item_size(SEXP x) {
  if (!checked) {
    checked = 1;
    usable = self_check();
  }
  return usable ? item_size(x, 0) : -1;
}

unsigned char *ps_simple_item_into(SEXP x, unsigned char *at) {
  return put_item(at, x);
}

R_xlen_t ps_serialize_simple_size(SEXP x) {
  R_xlen_t size = ps_simple_item_size(x);
  return size < 0 ? -1 : XLENGTH(the_header()) + size;
}

unsigned char *ps_serialize_simple_into(SEXP x, unsigned char *at) {
  SEXP h = the_header();
  return put_item(put_bytes(at, RAW(h), XLENGTH(h)), x);
}

/* x's bytes as serialize(x, NULL, xdr = FALSE) gives them, written here; NULL
 * when x is not simple (or the writer is off). */
SEXP ps_serialize_simple(SEXP x) {
  R_xlen_t size = ps_serialize_simple_size(x);
  if (size < 0) return R_NilValue;
  SEXP out = PROTECT(Rf_allocVector(RAWSXP, size));
  ps_serialize_simple_into(x, RAW(out));
  UNPROTECT(1);
  return out;
}

/* Do this writer's bytes equal R_Serialize's for a value of every kind it
 * writes (types, NA, empty, strings of each encoding, nesting)? */
static int self_check(void) {
  SEXP probe = PROTECT(Rf_allocVector(VECSXP, 9));
  SET_VECTOR_ELT(probe, 0, Rf_ScalarLogical(NA_LOGICAL));
  SET_VECTOR_ELT(probe, 1, Rf_ScalarInteger(-7));
  SET_VECTOR_ELT(probe, 2, Rf_ScalarReal(0.5));
  SEXP complex = Rf_allocVector(CPLXSXP, 1);
  SET_VECTOR_ELT(probe, 3, complex);
  COMPLEX(complex)[0].r = 1;
  COMPLEX(complex)[0].i = -1;
  SEXP raw = Rf_allocVector(RAWSXP, 3);
  SET_VECTOR_ELT(probe, 4, raw);
  memcpy(RAW(raw), "abc", 3);
  SEXP strings = Rf_allocVector(STRSXP, 5);
  SET_VECTOR_ELT(probe, 5, strings);
  SET_STRING_ELT(strings, 0, Rf_mkChar("plain"));
  SET_STRING_ELT(strings, 1, NA_STRING);
  SET_STRING_ELT(strings, 2, Rf_mkCharCE("\xc3\xa9t\xc3\xa9", CE_UTF8));
  SET_STRING_ELT(strings, 3, Rf_mkCharCE("\xe9t\xe9", CE_LATIN1));
  SET_STRING_ELT(strings, 4, Rf_mkCharCE("\xff\xfe", CE_BYTES));
  SET_VECTOR_ELT(probe, 6, Rf_allocVector(VECSXP, 0));
  SET_VECTOR_ELT(probe, 7, Rf_allocVector(STRSXP, 0));
  SEXP nested = Rf_allocVector(VECSXP, 1);
  SET_VECTOR_ELT(probe, 8, nested);
  SET_VECTOR_ELT(nested, 0, Rf_ScalarInteger(NA_INTEGER));
  R_xlen_t size = item_size(probe, 0);
  SEXP expected = PROTECT(ps_serialize_native(probe));
  int same = size >= 0 && XLENGTH(the_header()) + size == XLENGTH(expected);
  if (same) {
    SEXP mine = PROTECT(Rf_allocVector(RAWSXP, XLENGTH(expected)));
    ps_serialize_simple_into(probe, RAW(mine));
    same = memcmp(RAW(mine), RAW(expected), XLENGTH(expected)) == 0;
    UNPROTECT(1);
  }
  UNPROTECT(2);
  return same;
}
