/* A row or a column of a matrix, as `x[i, ]` or `x[, j]` gives it, for
 * memApply(). R's own `[` copies a matrix's row or column element by
 * element, with index arithmetic per element. Here a column (contiguous) is
 * copied as one region through the *_GET_REGION API, which a view answers
 * from its pages, and a row (every nrow-th element) by a loop over the
 * read-only data pointer.
 *
 * Done here only where the result is certain to be `[`'s: a plain matrix
 * (no class) of an atomic type, the index a whole number within range, and
 * no dimnames, or dimnames and at least two elements in the result (then the
 * names along the other margin are the result's names; R's rules for a
 * single element keep or drop names depending on both dimnames). Anything
 * else evaluates `x[i, ]` or `x[, j]` itself.
 *
 * C, not Rust: that evaluation may raise R errors (a subscript out of
 * bounds, a method's own), which unwind through this frame. */
#include <Rinternals.h>
#include <math.h>

static SEXP evaluate_bracket(SEXP x, SEXP index, int by_row) {
  SEXP call = PROTECT(by_row ? Rf_lang4(R_BracketSymbol, x, index, R_MissingArg)
                             : Rf_lang4(R_BracketSymbol, x, R_MissingArg, index));
  SEXP out = Rf_eval(call, R_BaseEnv);
  UNPROTECT(1);
  return out;
}

/* `index` as a 0-based position, or -1 when it is not one whole number in
 * [1, n]. */
static R_xlen_t position(SEXP index, R_xlen_t n) {
  if (Rf_isObject(index) || XLENGTH(index) != 1) return -1;
  double v;
  if (TYPEOF(index) == INTSXP) {
    if (INTEGER_ELT(index, 0) == NA_INTEGER) return -1;
    v = INTEGER_ELT(index, 0);
  } else if (TYPEOF(index) == REALSXP) {
    v = REAL_ELT(index, 0);
  } else {
    return -1;
  }
  if (!(v >= 1 && v <= (double)n) || v != floor(v)) return -1;
  return (R_xlen_t)v - 1;
}

/* The names to give a slice of `length` elements taken along margin
 * `by_row` (the other margin's dimnames), R_NilValue for none, or NULL when
 * they are not certain (see above). */
static SEXP names_of_slice(SEXP x, R_xlen_t length, int by_row) {
  SEXP dimnames = Rf_getAttrib(x, R_DimNamesSymbol);
  if (dimnames == R_NilValue) return R_NilValue;
  if (length < 2) return NULL;
  return VECTOR_ELT(dimnames, by_row ? 1 : 0);
}

/* `n` elements of `x` from `from`, every `step`-th, into `out`. */
static void copy_slice(SEXP x, SEXP out, R_xlen_t from, R_xlen_t step, R_xlen_t n) {
  if (n == 0) return;
  if (step == 1) {
    switch (TYPEOF(x)) {
    case LGLSXP: LOGICAL_GET_REGION(x, from, n, LOGICAL(out)); return;
    case INTSXP: INTEGER_GET_REGION(x, from, n, INTEGER(out)); return;
    case REALSXP: REAL_GET_REGION(x, from, n, REAL(out)); return;
    case CPLXSXP: COMPLEX_GET_REGION(x, from, n, COMPLEX(out)); return;
    case RAWSXP: RAW_GET_REGION(x, from, n, RAW(out)); return;
    }
  }
/* (one typed loop per type: the element's C type and its read-only and
 * writable accessors) */
#define COPY_STRIDED(ctype, read_only, writable)                                                   \
  {                                                                                                \
    const ctype *p = read_only(x) + from;                                                          \
    ctype *o = writable(out);                                                                      \
    for (R_xlen_t k = 0; k < n; k++) o[k] = p[k * step];                                           \
    return;                                                                                        \
  }
  switch (TYPEOF(x)) {
  case LGLSXP: COPY_STRIDED(int, LOGICAL_RO, LOGICAL)
  case INTSXP: COPY_STRIDED(int, INTEGER_RO, INTEGER)
  case REALSXP: COPY_STRIDED(double, REAL_RO, REAL)
  case CPLXSXP: COPY_STRIDED(Rcomplex, COMPLEX_RO, COMPLEX)
  case RAWSXP: COPY_STRIDED(Rbyte, RAW_RO, RAW)
  case STRSXP:
    for (R_xlen_t k = 0; k < n; k++) SET_STRING_ELT(out, k, STRING_ELT(x, from + k * step));
    return;
  }
#undef COPY_STRIDED
}

static SEXP matrix_slice(SEXP x, SEXP index, int by_row) {
  SEXP dim = Rf_getAttrib(x, R_DimSymbol);
  int type = TYPEOF(x);
  int plain_type = type == LGLSXP || type == INTSXP || type == REALSXP || type == CPLXSXP ||
                   type == RAWSXP || type == STRSXP;
  if (!plain_type || Rf_isObject(x) || TYPEOF(dim) != INTSXP || XLENGTH(dim) != 2) {
    return evaluate_bracket(x, index, by_row);
  }
  R_xlen_t nrow = INTEGER(dim)[0], ncol = INTEGER(dim)[1];
  R_xlen_t at = position(index, by_row ? nrow : ncol);
  R_xlen_t length = by_row ? ncol : nrow;
  SEXP names = names_of_slice(x, length, by_row);
  if (at < 0 || names == NULL) return evaluate_bracket(x, index, by_row);
  SEXP out = PROTECT(Rf_allocVector(type, length));
  if (by_row) {
    copy_slice(x, out, at, nrow, ncol);
  } else {
    copy_slice(x, out, at * nrow, 1, nrow);
  }
  if (names != R_NilValue) Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(1);
  return out;
}

SEXP ps_matrix_row(SEXP x, SEXP i) {
  return matrix_slice(x, i, 1);
}

SEXP ps_matrix_column(SEXP x, SEXP j) {
  return matrix_slice(x, j, 0);
}
