/* A column of a matrix, as `x[, j]` gives it, for memApply(). R's own `[`
 * copies a matrix's column element by element, with index arithmetic per
 * element; a column is contiguous, so it is copied here as one region
 * (through the *_GET_REGION API, which a view answers from its pages).
 *
 * Done here only where the result is certain to be `x[, j]`'s: a plain
 * matrix (no class) of an atomic type, j a whole number within its columns,
 * and no dimnames, or row names and at least two rows (then they are the
 * result's names; R's rules for a single row keep or drop names depending on
 * both dimnames). Anything else evaluates `x[, j]` itself.
 *
 * C, not Rust: that evaluation may raise R errors (a subscript out of
 * bounds, a method's own), which unwind through this frame. */
#include <Rinternals.h>
#include <math.h>

static SEXP evaluate_bracket(SEXP x, SEXP j) {
  SEXP call = PROTECT(Rf_lang4(R_BracketSymbol, x, R_MissingArg, j));
  SEXP out = Rf_eval(call, R_BaseEnv);
  UNPROTECT(1);
  return out;
}

/* j as a 0-based column index, or -1 when it is not one whole number in
 * [1, ncol]. */
static R_xlen_t column_index(SEXP j, R_xlen_t ncol) {
  if (Rf_isObject(j) || XLENGTH(j) != 1) return -1;
  double v;
  if (TYPEOF(j) == INTSXP) {
    if (INTEGER_ELT(j, 0) == NA_INTEGER) return -1;
    v = INTEGER_ELT(j, 0);
  } else if (TYPEOF(j) == REALSXP) {
    v = REAL_ELT(j, 0);
  } else {
    return -1;
  }
  if (!(v >= 1 && v <= (double)ncol) || v != floor(v)) return -1;
  return (R_xlen_t)v - 1;
}

/* The row names to give the column, R_NilValue for none, or NULL when the
 * result's names are not certain (see above). */
static SEXP names_of_column(SEXP x, R_xlen_t nrow) {
  SEXP dimnames = Rf_getAttrib(x, R_DimNamesSymbol);
  if (dimnames == R_NilValue) return R_NilValue;
  if (nrow < 2) return NULL;
  return VECTOR_ELT(dimnames, 0);
}

SEXP ps_matrix_column(SEXP x, SEXP j) {
  SEXP dim = Rf_getAttrib(x, R_DimSymbol);
  int type = TYPEOF(x);
  int plain_type = type == LGLSXP || type == INTSXP || type == REALSXP || type == CPLXSXP ||
                   type == RAWSXP || type == STRSXP;
  if (!plain_type || Rf_isObject(x) || TYPEOF(dim) != INTSXP || XLENGTH(dim) != 2) {
    return evaluate_bracket(x, j);
  }
  R_xlen_t nrow = INTEGER(dim)[0], ncol = INTEGER(dim)[1];
  R_xlen_t col = column_index(j, ncol);
  SEXP names = names_of_column(x, nrow);
  if (col < 0 || names == NULL) return evaluate_bracket(x, j);
  R_xlen_t from = col * nrow;
  SEXP out = PROTECT(Rf_allocVector(type, nrow));
  if (nrow > 0) {
    switch (type) {
    case LGLSXP: LOGICAL_GET_REGION(x, from, nrow, LOGICAL(out)); break;
    case INTSXP: INTEGER_GET_REGION(x, from, nrow, INTEGER(out)); break;
    case REALSXP: REAL_GET_REGION(x, from, nrow, REAL(out)); break;
    case CPLXSXP: COMPLEX_GET_REGION(x, from, nrow, COMPLEX(out)); break;
    case RAWSXP: RAW_GET_REGION(x, from, nrow, RAW(out)); break;
    case STRSXP:
      for (R_xlen_t k = 0; k < nrow; k++) SET_STRING_ELT(out, k, STRING_ELT(x, from + k));
      break;
    }
  }
  if (names != R_NilValue) Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(1);
  return out;
}
