/* The C side of the Rust/R boundary (see src/rust/pageshare-r/src/boundary.rs).
 *
 * Rust code never raises an R error and is never jumped over by one:
 * - an entry point or ALTREP method that fails returns to its C shell
 *   (entry_points.c, view_methods.c) with the error left pending and every
 *   Rust value already dropped; the shell raises it with ps_raise_pending();
 * - an R API call that may raise an R error (allocation, a bad string, a
 *   warning turned into an error) is made from Rust through ps_try_r(), which
 *   stops R's jump at R_UnwindProtect in this file's frame; the Rust code
 *   returns an error to its shell, which resumes R's jump from there. */
#include <Rinternals.h>
#include <setjmp.h>
#include "boundary.h"

/* What Rust left pending: filled by ps_take_pending() (boundary.rs). */
typedef struct {
  const char *message; /* UTF-8, no NUL inside, not terminated */
  int message_len;
  const char *kind; /* the condition's first class, e.g. "pageshare_no_space" */
  int kind_len;
  int has_space; /* needed/free are set (pageshare_no_space) */
  double needed, free;
  int resume_r_error; /* an R error was stopped by ps_try_r(): resume it */
} ps_pending_t;

void ps_take_pending(ps_pending_t *out);

/* The continuation of an R error stopped by ps_try_r(): made once at load,
 * before any Rust code runs, because making it allocates. */
static SEXP continuation = NULL;

void ps_boundary_init(void) {
  continuation = R_MakeUnwindCont();
  R_PreserveObject(continuation);
}

static void stop_here(void *jump_buffer, Rboolean jump) {
  /* R calls this after it has closed its own context, so leaving by longjmp
   * is safe; the jump itself is resumed later with R_ContinueUnwind(). */
  if (jump) longjmp(*(jmp_buf *)jump_buffer, 1);
}

SEXP ps_try_r(SEXP (*body)(void *), void *data, int *jumped) {
  jmp_buf jump_buffer;
  *jumped = 0;
  if (setjmp(jump_buffer)) {
    *jumped = 1;
    return R_NilValue;
  }
  return R_UnwindProtect(body, data, stop_here, &jump_buffer, continuation);
}

static SEXP utf8_string(const char *s, int len) {
  return Rf_ScalarString(Rf_mkCharLenCE(s, len, CE_UTF8));
}

void ps_raise_pending(void) {
  ps_pending_t p;
  ps_take_pending(&p);
  if (p.resume_r_error) R_ContinueUnwind(continuation);
  int n = p.has_space ? 4 : 2;
  SEXP cond = PROTECT(Rf_allocVector(VECSXP, n));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, n));
  SET_VECTOR_ELT(cond, 0, utf8_string(p.message, p.message_len));
  SET_STRING_ELT(names, 0, Rf_mkChar("message"));
  SET_STRING_ELT(names, 1, Rf_mkChar("call"));
  if (p.has_space) {
    SET_VECTOR_ELT(cond, 2, Rf_ScalarReal(p.needed));
    SET_VECTOR_ELT(cond, 3, Rf_ScalarReal(p.free));
    SET_STRING_ELT(names, 2, Rf_mkChar("needed"));
    SET_STRING_ELT(names, 3, Rf_mkChar("free"));
  }
  Rf_setAttrib(cond, R_NamesSymbol, names);
  SEXP cls = PROTECT(Rf_allocVector(STRSXP, 4));
  SET_STRING_ELT(cls, 0, Rf_mkCharLenCE(p.kind, p.kind_len, CE_UTF8));
  SET_STRING_ELT(cls, 1, Rf_mkChar("pageshare_error"));
  SET_STRING_ELT(cls, 2, Rf_mkChar("error"));
  SET_STRING_ELT(cls, 3, Rf_mkChar("condition"));
  Rf_setAttrib(cond, R_ClassSymbol, cls);
  SEXP call = PROTECT(Rf_lang2(Rf_install("stop"), cond));
  Rf_eval(call, R_BaseEnv);
  /* stop() does not return; should it ever, fail as R would */
  UNPROTECT(4);
  Rf_error("%s", "pageshare: an error could not be signalled");
}

static void check_interrupt(void *data) {
  (void)data;
  R_CheckUserInterrupt();
}

/* Did the user interrupt (Ctrl-C)? Asked from Rust while it waits: R's own
 * check jumps on an interrupt, here the jump stops at R_ToplevelExec and the
 * caller finishes its wait in order, then R raises the interrupt. */
int ps_interrupt_pending(void) {
  return R_ToplevelExec(check_interrupt, NULL) == FALSE;
}
