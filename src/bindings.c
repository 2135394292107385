/* What a binding in a function frame holds, without forcing a promise, and how
 * to put it back: a closure's frame is serialized with the closure, so the
 * front doors swap large values in it for views while a task is sent
 * (R/sharing-rule.R). R offers this as API from R 4.6 on (R_GetBindingType);
 * before, a frame's promise is read with Rf_findVarInFrame, and its value, when
 * forced, with PRVALUE (R < 4.5; R 4.5 has neither, so there the state of a
 * promise is unknown and R decides what to do without forcing it). */
#include <Rinternals.h>
#include <Rversion.h>
#include "boundary.h"

enum { B_UNBOUND = 0, B_VALUE = 1, B_MISSING = 2, B_DELAYED = 3, B_FORCED = 4, B_ACTIVE = 5, B_PROMISE = 6 };

static SEXP result(int type, SEXP value, SEXP saved) {
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 3));
  SET_VECTOR_ELT(out, 0, Rf_ScalarInteger(type));
  SET_VECTOR_ELT(out, 1, value);
  SET_VECTOR_ELT(out, 2, saved);
  UNPROTECT(1);
  return out;
}

/* list(type, value, saved): `value` for a value binding or a forced promise
 * (else NULL), `saved` what ps_restore_binding() needs to put it back. */
static void env_arg(SEXP env) {
  if (TYPEOF(env) != ENVSXP) ps_raise_error("pageshare_bad_argument", "`env` must be an environment");
}

SEXP ps_binding(SEXP env, SEXP name) {
  env_arg(env);
  SEXP sym = ps_symbol_arg(name, "name");
  if (!R_existsVarInFrame(env, sym)) return result(B_UNBOUND, R_NilValue, R_NilValue);
  if (R_BindingIsActive(sym, env)) return result(B_ACTIVE, R_NilValue, R_NilValue);
#if R_VERSION >= R_Version(4, 6, 0)
  switch (R_GetBindingType(sym, env)) {
  case R_BindingTypeValue: {
    SEXP v = R_getVar(sym, env, FALSE);
    return result(B_VALUE, v, v);
  }
  case R_BindingTypeForced: {
    SEXP v = PROTECT(R_getVar(sym, env, FALSE)); /* forced: no evaluation */
    SEXP out = result(B_FORCED, v, R_ForcedBindingExpression(sym, env));
    UNPROTECT(1);
    return out;
  }
  case R_BindingTypeMissing: return result(B_MISSING, R_NilValue, R_NilValue);
  case R_BindingTypeDelayed: return result(B_DELAYED, R_NilValue, R_NilValue);
  default: return result(B_UNBOUND, R_NilValue, R_NilValue);
  }
#else
  SEXP v = Rf_findVarInFrame(env, sym);
  if (v == R_UnboundValue) return result(B_UNBOUND, R_NilValue, R_NilValue);
  if (v == R_MissingArg) return result(B_MISSING, R_NilValue, R_NilValue);
  if (TYPEOF(v) != PROMSXP) return result(B_VALUE, v, v);
#if R_VERSION < R_Version(4, 5, 0)
  if (PRVALUE(v) == R_UnboundValue) return result(B_DELAYED, R_NilValue, R_NilValue);
  return result(B_FORCED, PRVALUE(v), v);
#else
  return result(B_PROMISE, R_NilValue, v);
#endif
#endif
}

/* Does a binding hold a promise that may be unforced (B_DELAYED, or
 * B_PROMISE where R cannot tell)? Else, in *closure, a closure it holds as a
 * value or a forced promise (R_NilValue when none). */
static int may_be_unforced(SEXP env, SEXP sym, SEXP *closure) {
  *closure = R_NilValue;
  if (R_BindingIsActive(sym, env)) return 0;
#if R_VERSION >= R_Version(4, 6, 0)
  switch (R_GetBindingType(sym, env)) {
  case R_BindingTypeDelayed: return 1;
  case R_BindingTypeValue:
  case R_BindingTypeForced: {
    SEXP v = R_getVar(sym, env, FALSE); /* a value, or forced: no evaluation */
    if (TYPEOF(v) == CLOSXP) *closure = v;
    return 0;
  }
  default: return 0;
  }
#else
  SEXP v = Rf_findVarInFrame(env, sym);
  if (TYPEOF(v) == PROMSXP) {
#if R_VERSION < R_Version(4, 5, 0)
    if (PRVALUE(v) == R_UnboundValue) return 1;
    v = PRVALUE(v);
#else
    return 1;
#endif
  }
  if (TYPEOF(v) == CLOSXP) *closure = v;
  return 0;
#endif
}

/* One frame as R/sharing-rule.R's holds_unforced() looks at it, in one call
 * (a call per binding from R costs more than a small task): list(TRUE) when a
 * binding holds a promise that may be unforced, else list(FALSE, closures),
 * the closures its bindings hold. */
SEXP ps_frame_promises(SEXP env) {
  env_arg(env);
  SEXP names = PROTECT(R_lsInternal3(env, TRUE, FALSE));
  R_xlen_t n = XLENGTH(names), k = 0;
  SEXP closures = PROTECT(Rf_allocVector(VECSXP, n));
  for (R_xlen_t i = 0; i < n; i++) {
    SEXP closure;
    if (may_be_unforced(env, Rf_installChar(STRING_ELT(names, i)), &closure)) {
      UNPROTECT(2);
      return Rf_ScalarLogical(TRUE);
    }
    if (closure != R_NilValue) SET_VECTOR_ELT(closures, k++, closure);
  }
  SEXP found = PROTECT(Rf_allocVector(VECSXP, k));
  for (R_xlen_t i = 0; i < k; i++) SET_VECTOR_ELT(found, i, VECTOR_ELT(closures, i));
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 2));
  SET_VECTOR_ELT(out, 0, Rf_ScalarLogical(FALSE));
  SET_VECTOR_ELT(out, 1, found);
  UNPROTECT(4);
  return out;
}

/* Puts back what ps_binding() saved, replacing a view swapped in meanwhile. */
SEXP ps_restore_binding(SEXP env, SEXP name, SEXP type, SEXP value, SEXP saved) {
  env_arg(env);
  SEXP sym = ps_symbol_arg(name, "name");
  /* (read as a number only once it is one: R would parse a string) */
  if (TYPEOF(type) != INTSXP || XLENGTH(type) != 1) {
    ps_raise_error("pageshare_bad_argument", "`type` must be a binding type as ps_binding() gives it (one integer)");
  }
#if R_VERSION >= R_Version(4, 6, 0)
  if (Rf_asInteger(type) == B_FORCED) {
    R_MakeForcedBinding(sym, saved, value, env);
    return R_NilValue;
  }
#else
  (void)type;
  (void)value;
#endif
  Rf_defineVar(sym, saved, env);
  return R_NilValue;
}

/* A locked binding that holds a large value is swapped too (and locked again
 * right after): R_unLockBinding is API, base::unlockBinding() is not for packages. */
SEXP ps_unlock_binding(SEXP env, SEXP name) {
  env_arg(env);
  SEXP sym = ps_symbol_arg(name, "name");
  if (!R_existsVarInFrame(env, sym)) ps_raise_error("pageshare_bad_argument", "no such variable in `env`");
  R_unLockBinding(sym, env);
  return R_NilValue;
}
