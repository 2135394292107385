/* The iterations of a foreach task, run in C: for each iteration k, bind every
 * iteration variable to its k-th value in the loop's environment and evaluate
 * the body there, as eval(body, env) would but without eval()'s closure call
 * and context, which cost more than a tiny body itself. Only used for bodies
 * that do not look at that context (see evaluates_directly() in
 * R/doshm-tasks.R). An iteration that raises an error gets the condition as
 * its result and the others go on; which results are errors (raised, or
 * returned by the body) is reported with them.
 *
 * C, not Rust: the body raises R errors, which unwind through these frames to
 * the handler R_tryCatchError() sets up (one for each run of iterations up to
 * an error). */
#include <Rinternals.h>
#include <string.h>
#include "boundary.h"

typedef struct {
  SEXP columns, syms, expr, env, out, errors;
  R_xlen_t n;
  volatile R_xlen_t k; /* the iteration being run; read by on_error() after a jump */
} chunk_t;

/* column[[k]] */
static SEXP element(SEXP column, R_xlen_t k) {
  switch (TYPEOF(column)) {
  case VECSXP:
  case EXPRSXP: return VECTOR_ELT(column, k);
  case INTSXP: return Rf_ScalarInteger(INTEGER_ELT(column, k));
  case REALSXP: return Rf_ScalarReal(REAL_ELT(column, k));
  case LGLSXP: return Rf_ScalarLogical(LOGICAL_ELT(column, k));
  case STRSXP: return Rf_ScalarString(STRING_ELT(column, k));
  case CPLXSXP: return Rf_ScalarComplex(COMPLEX_ELT(column, k));
  case RAWSXP: return Rf_ScalarRaw(RAW_ELT(column, k));
  default: Rf_error("an iteration column of type %s", Rf_type2char(TYPEOF(column)));
  }
  return R_NilValue; /* not reached */
}

static SEXP run_from(void *data) {
  chunk_t *c = data;
  R_xlen_t vars = XLENGTH(c->columns);
  for (; c->k < c->n; c->k++) {
    for (R_xlen_t j = 0; j < vars; j++) {
      SEXP value = PROTECT(element(VECTOR_ELT(c->columns, j), c->k));
      Rf_defineVar(VECTOR_ELT(c->syms, j), value, c->env);
      UNPROTECT(1);
    }
    SEXP result = Rf_eval(c->expr, c->env);
    SET_VECTOR_ELT(c->out, c->k, result);
    if (Rf_isObject(result) && Rf_inherits(result, "error")) INTEGER(c->errors)[c->k] = 1;
  }
  return R_NilValue;
}

static SEXP on_error(SEXP condition, void *data) {
  chunk_t *c = data;
  SET_VECTOR_ELT(c->out, c->k, condition);
  INTEGER(c->errors)[c->k] = 2;
  c->k++;
  return R_NilValue;
}

/* list(results, error) for the iterations given by `columns` (a named list
 * of vectors or lists of equal length). */
SEXP ps_run_iterations(SEXP columns, SEXP expr, SEXP env) {
  if (TYPEOF(env) != ENVSXP) ps_raise_error("pageshare_bad_argument", "`env` must be an environment");
  SEXP names = Rf_getAttrib(columns, R_NamesSymbol);
  if (TYPEOF(columns) != VECSXP || TYPEOF(names) != STRSXP) ps_raise_error("pageshare_bad_argument", "`columns` must be a named list");
  R_xlen_t vars = XLENGTH(columns);
  R_xlen_t n = vars ? XLENGTH(VECTOR_ELT(columns, 0)) : 0;
  SEXP syms = PROTECT(Rf_allocVector(VECSXP, vars));
  for (R_xlen_t j = 0; j < vars; j++) {
    SEXP column = VECTOR_ELT(columns, j);
    if (!Rf_isVector(column) || XLENGTH(column) != n) ps_raise_error("pageshare_bad_argument", "the iteration columns must be vectors of one length");
    SET_VECTOR_ELT(syms, j, ps_symbol_of(STRING_ELT(names, j), "columns' names"));
  }
  SEXP out = PROTECT(Rf_allocVector(VECSXP, n));
  /* 0: a value, 1: an error condition returned, 2: an error raised */
  SEXP errors = PROTECT(Rf_allocVector(INTSXP, n));
  if (n) memset(INTEGER(errors), 0, n * sizeof(int));
  chunk_t c = {columns, syms, expr, env, out, errors, n, 0};
  while (c.k < c.n) R_tryCatchError(run_from, &c, on_error, &c);
  SEXP ans = PROTECT(Rf_allocVector(VECSXP, 2));
  SET_VECTOR_ELT(ans, 0, out);
  SET_VECTOR_ELT(ans, 1, errors);
  UNPROTECT(4);
  return ans;
}
