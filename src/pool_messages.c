/* Messages of pageshare's pool (R/pool*.R) made and read in C, where a small
 * task's time goes: serialize() and unserialize() without their closures and
 * their 8 KB first buffer, and a plain call (see plain_call() in R/pool.R) run
 * by a worker in one step.
 *
 * C, not Rust: R_Serialize, R_Unserialize and the task's own code raise R
 * errors, which unwind through these frames to the caller's handler. Every
 * buffer here is an R vector, so such a jump leaks nothing. */
#include <Rinternals.h>
#include <string.h>
#include "boundary.h"
#include "pool_messages.h"

/* The Rust bodies of two entry points (entry_share.rs, entry_tasks.rs): NULL
 * when they failed, with the error pending. */
SEXP ps_worth_walking_rs(SEXP x, SEXP threshold);
SEXP ps_task_state_rs(SEXP running);

SEXP ps_rust(SEXP out) {
  if (out == NULL) ps_raise_pending();
  return out;
}

typedef struct {
  SEXP buffer; /* a raw vector, protected at `index` */
  PROTECT_INDEX index;
  R_xlen_t used;
} output_t;

static void write_bytes(R_outpstream_t stream, void *bytes, int n) {
  output_t *out = stream->data;
  R_xlen_t size = XLENGTH(out->buffer);
  if (out->used + n > size) {
    R_xlen_t grown = 2 * size > out->used + n ? 2 * size : out->used + n;
    SEXP bigger = Rf_allocVector(RAWSXP, grown);
    memcpy(RAW(bigger), RAW(out->buffer), out->used);
    REPROTECT(out->buffer = bigger, out->index);
  }
  memcpy(RAW(out->buffer) + out->used, bytes, n);
  out->used += n;
}

static void write_char(R_outpstream_t stream, int c) {
  unsigned char byte = (unsigned char)c;
  write_bytes(stream, &byte, 1);
}

/* serialize(x, NULL, xdr = FALSE) */
SEXP ps_serialize_native(SEXP x) {
  output_t out = {Rf_allocVector(RAWSXP, 512), 0, 0};
  PROTECT_WITH_INDEX(out.buffer, &out.index);
  struct R_outpstream_st stream;
  R_InitOutPStream(&stream, (R_pstream_data_t)&out, R_pstream_binary_format, 3, write_char, write_bytes,
                   NULL, R_NilValue);
  R_Serialize(x, &stream);
  SEXP ans = Rf_allocVector(RAWSXP, out.used);
  memcpy(RAW(ans), RAW(out.buffer), out.used);
  UNPROTECT(1);
  return ans;
}

typedef struct {
  const unsigned char *bytes;
  R_xlen_t size, read;
} input_t;

static void read_bytes(R_inpstream_t stream, void *buf, int n) {
  input_t *in = stream->data;
  if (in->read + n > in->size) Rf_error("a message of pageshare's pool ends early");
  memcpy(buf, in->bytes + in->read, n);
  in->read += n;
}

static int read_char(R_inpstream_t stream) {
  unsigned char c;
  read_bytes(stream, &c, 1);
  return c;
}

/* unserialize(raw) */
SEXP ps_unserialize(SEXP raw) {
  if (TYPEOF(raw) != RAWSXP) Rf_error("`raw` must be a raw vector");
  input_t in = {RAW(raw), XLENGTH(raw), 0};
  struct R_inpstream_st stream;
  R_InitInPStream(&stream, (R_pstream_data_t)&in, R_pstream_any_format, read_char, read_bytes, NULL,
                  R_NilValue);
  return R_Unserialize(&stream);
}

/* FUN(<args>), each argument a value: a symbol or a call among them is quoted
 * (as do.call(quote = TRUE) does), not evaluated. */
static SEXP call_of(SEXP fun, SEXP args) {
  R_xlen_t n = XLENGTH(args);
  SEXP names = Rf_getAttrib(args, R_NamesSymbol);
  SEXP arglist = PROTECT(Rf_allocList(n));
  SEXP cell = arglist;
  for (R_xlen_t i = 0; i < n; i++, cell = CDR(cell)) {
    SEXP value = VECTOR_ELT(args, i);
    int type = TYPEOF(value);
    if (type == SYMSXP || type == LANGSXP || type == PROMSXP || type == DOTSXP || type == BCODESXP) {
      value = Rf_lang2(Rf_install("quote"), value);
    }
    SETCAR(cell, value);
    if (names != R_NilValue) {
      const char *name = CHAR(STRING_ELT(names, i));
      if (*name) SET_TAG(cell, Rf_install(name));
    }
  }
  SEXP call = Rf_lcons(fun, arglist);
  UNPROTECT(1);
  return call;
}

static int is_vector_or_list(SEXP x) {
  switch (TYPEOF(x)) {
  case LGLSXP:
  case INTSXP:
  case REALSXP:
  case CPLXSXP:
  case STRSXP:
  case RAWSXP:
  case VECSXP: return 1;
  default: return 0;
  }
}

/* Is a call of a function whose environment is `env` (NULL for a primitive)
 * with `args` a plain call (see plain_call() in R/pool.R)? The environment is
 * none of the function's own (the global environment or a namespace) and no
 * argument holds data worth sharing or a view. */
int ps_is_plain_call(SEXP env, SEXP args, SEXP threshold) {
  if (env != R_NilValue && env != R_GlobalEnv && !R_IsNamespaceEnv(env)) return 0;
  return Rf_asLogical(ps_rust(ps_worth_walking_rs(args, threshold))) != TRUE;
}

SEXP ps_plain_call(SEXP env, SEXP args, SEXP threshold) {
  return Rf_ScalarLogical(ps_is_plain_call(env, args, threshold));
}

/* A worker runs a plain call: `payload` is list(op = "call", FUN, args,
 * threshold), serialized, holding no handle. Returns the serialized reply
 * list(status = "ok", value), or list(value, threshold) when the value holds
 * data worth sharing (R/pool-worker.R then shares it). An error (in FUN or in
 * reading the message) is raised to the worker's loop, which replies with it. */
SEXP ps_pool_run_plain(SEXP payload) {
  SEXP msg = PROTECT(ps_unserialize(payload));
  if (TYPEOF(msg) != VECSXP || XLENGTH(msg) != 4) Rf_error("a plain call of pageshare's pool is damaged");
  SEXP threshold = VECTOR_ELT(msg, 3);
  SEXP call = PROTECT(call_of(VECTOR_ELT(msg, 1), VECTOR_ELT(msg, 2)));
  ps_rust(ps_task_state_rs(Rf_ScalarLogical(TRUE)));
  SEXP value = PROTECT(Rf_eval(call, R_GlobalEnv));
  ps_rust(ps_task_state_rs(Rf_ScalarLogical(FALSE)));
  if (is_vector_or_list(value) && Rf_asLogical(ps_rust(ps_worth_walking_rs(value, threshold))) == TRUE) {
    SEXP out = Rf_allocVector(VECSXP, 2);
    SET_VECTOR_ELT(out, 0, value);
    SET_VECTOR_ELT(out, 1, threshold);
    UNPROTECT(3);
    return out;
  }
  SEXP reply = PROTECT(Rf_allocVector(VECSXP, 2));
  SEXP names = Rf_allocVector(STRSXP, 2);
  Rf_setAttrib(reply, R_NamesSymbol, names);
  SET_STRING_ELT(names, 0, Rf_mkChar("status"));
  SET_STRING_ELT(names, 1, Rf_mkChar("value"));
  SET_VECTOR_ELT(reply, 0, Rf_mkString("ok"));
  SET_VECTOR_ELT(reply, 1, value);
  SEXP out = ps_serialize_native(reply);
  UNPROTECT(4);
  return out;
}
