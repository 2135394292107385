/* The C side of the Rust/R boundary (see src/rust/pageshare-r/src/boundary.rs),
 * and the classed errors of the entry points written in C.
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
#include <Rversion.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
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

/* Signal the condition of class c(kind, "pageshare_error", "error",
 * "condition") with `message` (UTF-8, length-delimited), and, for
 * pageshare_no_space, the bytes needed and free. Never returns. */
static void __attribute__((noreturn)) raise_condition(const char *message, int message_len, const char *kind, int kind_len, int has_space,
                                                      double needed, double free) {
  int n = has_space ? 4 : 2;
  SEXP cond = PROTECT(Rf_allocVector(VECSXP, n));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, n));
  SET_VECTOR_ELT(cond, 0, utf8_string(message, message_len));
  SET_STRING_ELT(names, 0, Rf_mkChar("message"));
  SET_STRING_ELT(names, 1, Rf_mkChar("call"));
  if (has_space) {
    SET_VECTOR_ELT(cond, 2, Rf_ScalarReal(needed));
    SET_VECTOR_ELT(cond, 3, Rf_ScalarReal(free));
    SET_STRING_ELT(names, 2, Rf_mkChar("needed"));
    SET_STRING_ELT(names, 3, Rf_mkChar("free"));
  }
  Rf_setAttrib(cond, R_NamesSymbol, names);
  SEXP cls = PROTECT(Rf_allocVector(STRSXP, 4));
  SET_STRING_ELT(cls, 0, Rf_mkCharLenCE(kind, kind_len, CE_UTF8));
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

/* R's interrupt, as Ctrl-C raises it (a condition of class "interrupt",
 * then the jump to the top level), for a wait that Rust ended because the
 * user interrupted it (R's own check took the interrupt: see
 * ps_interrupt_pending()). Never returns. */
static void __attribute__((noreturn)) raise_interrupt(void) {
  SEXP cond = PROTECT(Rf_allocVector(VECSXP, 2));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, 2));
  SET_VECTOR_ELT(cond, 0, Rf_mkString(""));
  SET_STRING_ELT(names, 0, Rf_mkChar("message"));
  SET_STRING_ELT(names, 1, Rf_mkChar("call"));
  Rf_setAttrib(cond, R_NamesSymbol, names);
  SEXP cls = PROTECT(Rf_allocVector(STRSXP, 2));
  SET_STRING_ELT(cls, 0, Rf_mkChar("interrupt"));
  SET_STRING_ELT(cls, 1, Rf_mkChar("condition"));
  Rf_setAttrib(cond, R_ClassSymbol, cls);
  SEXP signal = PROTECT(Rf_lang2(Rf_install("signalCondition"), cond));
  Rf_eval(signal, R_BaseEnv);
  SEXP abort = PROTECT(Rf_lang2(Rf_install("invokeRestart"), Rf_mkString("abort")));
  Rf_eval(abort, R_BaseEnv);
  UNPROTECT(5);
  Rf_error("%s", "interrupted");
}

void ps_raise_pending(void) {
  ps_pending_t p;
  ps_take_pending(&p);
  if (p.resume_r_error) R_ContinueUnwind(continuation);
  if (p.kind_len == 9 && memcmp(p.kind, "interrupt", 9) == 0) raise_interrupt();
  raise_condition(p.message, p.message_len, p.kind, p.kind_len, p.has_space, p.needed, p.free);
}

/* The errors of the C entry points, classed as those Rust leaves pending. */
void ps_raise_error(const char *kind, const char *message) {
  raise_condition(message, (int)strlen(message), kind, (int)strlen(kind), 0, 0, 0);
}

/* The symbol the R string (CHARSXP) `c` names, if R can translate it (not
 * NA, not "bytes"-encoded, which R refuses with an error of its own). */
static SEXP ps_symbol_of(SEXP c, const char *what) {
  if (c == NA_STRING || Rf_getCharCE(c) == CE_BYTES) {
    char message[200];
    snprintf(message, sizeof message, "`%s` must be text that can name a variable (not NA, not \"bytes\")", what);
    ps_raise_error("pageshare_bad_argument", message);
  }
  return Rf_installChar(c);
}

/* The symbol a single-string argument names. */
SEXP ps_symbol_arg(SEXP name, const char *what) {
  if (TYPEOF(name) != STRSXP || XLENGTH(name) != 1) {
    char message[200];
    snprintf(message, sizeof message, "`%s` must be a single string", what);
    ps_raise_error("pageshare_bad_argument", message);
  }
  return ps_symbol_of(STRING_ELT(name, 0), what);
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

/* Has `x` any attribute? For Rust (wire_values.rs): R's API for this
 * differs between R versions. */
int ps_any_attrib(SEXP x) {
#if R_VERSION >= R_Version(4, 5, 0)
  return ANY_ATTRIB(x);
#else
  return ATTRIB(x) != R_NilValue;
#endif
}
