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
#include "simple_serialize.h"

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

static SEXP serialize_with_hook(SEXP x, SEXP (*hook)(SEXP, SEXP), SEXP hook_data) {
  output_t out = {Rf_allocVector(RAWSXP, 512), 0, 0};
  PROTECT_WITH_INDEX(out.buffer, &out.index);
  struct R_outpstream_st stream;
  R_InitOutPStream(&stream, (R_pstream_data_t)&out, R_pstream_binary_format, 3, write_char, write_bytes, hook,
                   hook_data);
  R_Serialize(x, &stream);
  SEXP ans = Rf_allocVector(RAWSXP, out.used);
  memcpy(RAW(ans), RAW(out.buffer), out.used);
  UNPROTECT(1);
  return ans;
}

/* serialize(x, NULL, xdr = FALSE) */
SEXP ps_serialize_native(SEXP x) {
  return serialize_with_hook(x, NULL, R_NilValue);
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

/* The next serialized stream of `in`, read. */
static SEXP read_stream(input_t *in) {
  struct R_inpstream_st stream;
  R_InitInPStream(&stream, (R_pstream_data_t)in, R_pstream_any_format, read_char, read_bytes, NULL, R_NilValue);
  return R_Unserialize(&stream);
}

/* unserialize(raw) */
SEXP ps_unserialize(SEXP raw) {
  if (TYPEOF(raw) != RAWSXP) ps_raise_error("pageshare_bad_argument", "`raw` must be a raw vector");
  input_t in = {RAW(raw), XLENGTH(raw), 0};
  return read_stream(&in);
}

/* FUN(<args>), each argument a value, named by `names` (or NULL): a symbol
 * or a call among them is quoted (as do.call(quote = TRUE) does), not
 * evaluated. */
static SEXP call_of(SEXP fun, SEXP args, SEXP names) {
  R_xlen_t n = XLENGTH(args);
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

/* The message of a plain call is two serialized streams, one after the
 * other: FUN's, then that of list(values, names, threshold) (the arguments
 * without their names, their names or NULL, the threshold), the second
 * written without R_Serialize where it is simple (simple_serialize.c).
 *
 * FUN's bytes are kept for the next message of the same function, so that a
 * stream of calls of one function serializes it once. They are kept only
 * while they cannot go stale: the function is held here (no other object
 * takes its address, and R copies an object held twice before it changes
 * it), and its bytes hold nothing by value that may change in place: no
 * environment (but a srcref's srcfile, which never changes what a call
 * computes), no external pointer, no weak reference. The global environment
 * and namespaces are written as references. */
static SEXP fun_cache; /* list(fun, its bytes) */

static SEXP note_held_by_value(SEXP item, SEXP by_value) {
  if (TYPEOF(item) != ENVSXP || !Rf_inherits(item, "srcfile")) LOGICAL(by_value)[0] = TRUE;
  return R_NilValue; /* (serialized as usual) */
}

static SEXP fun_bytes(SEXP fun) {
  if (fun_cache == NULL) {
    fun_cache = Rf_allocVector(VECSXP, 2);
    R_PreserveObject(fun_cache);
  }
  if (VECTOR_ELT(fun_cache, 0) == fun) return VECTOR_ELT(fun_cache, 1);
  /* (a vector of its own: Rf_ScalarLogical() gives R's shared FALSE) */
  SEXP by_value = PROTECT(Rf_allocVector(LGLSXP, 1));
  LOGICAL(by_value)[0] = FALSE;
  SEXP bytes = PROTECT(serialize_with_hook(fun, note_held_by_value, by_value));
  if (!LOGICAL(by_value)[0]) {
    SET_VECTOR_ELT(fun_cache, 0, fun);
    SET_VECTOR_ELT(fun_cache, 1, bytes);
  }
  UNPROTECT(2);
  return bytes;
}

SEXP ps_plain_message(SEXP fun, SEXP args, SEXP threshold) {
  if (TYPEOF(args) != VECSXP) ps_raise_error("pageshare_bad_argument", "`args` must be a list");
  SEXP head = PROTECT(fun_bytes(fun));
  SEXP rest = PROTECT(Rf_allocVector(VECSXP, 3));
  R_xlen_t n = XLENGTH(args);
  SEXP values = Rf_allocVector(VECSXP, n);
  SET_VECTOR_ELT(rest, 0, values);
  for (R_xlen_t i = 0; i < n; i++) SET_VECTOR_ELT(values, i, VECTOR_ELT(args, i));
  SET_VECTOR_ELT(rest, 1, Rf_getAttrib(args, R_NamesSymbol));
  SET_VECTOR_ELT(rest, 2, threshold);
  R_xlen_t size = ps_serialize_simple_size(rest);
  SEXP tail = PROTECT(size < 0 ? ps_serialize_native(rest) : R_NilValue);
  if (size < 0) size = XLENGTH(tail);
  SEXP payload = PROTECT(Rf_allocVector(RAWSXP, XLENGTH(head) + size));
  memcpy(RAW(payload), RAW(head), XLENGTH(head));
  if (tail == R_NilValue) {
    ps_serialize_simple_into(rest, RAW(payload) + XLENGTH(head));
  } else {
    memcpy(RAW(payload) + XLENGTH(head), RAW(tail), size);
  }
  UNPROTECT(4);
  return payload;
}

/* The reply list(status = "ok", value) to a call whose value is `value`. */
static SEXP ok_reply_list(SEXP value) {
  SEXP reply = PROTECT(Rf_allocVector(VECSXP, 2));
  SEXP names = Rf_allocVector(STRSXP, 2);
  Rf_setAttrib(reply, R_NamesSymbol, names);
  SET_STRING_ELT(names, 0, Rf_mkChar("status"));
  SET_STRING_ELT(names, 1, Rf_mkChar("value"));
  SET_VECTOR_ELT(reply, 0, Rf_mkString("ok"));
  SET_VECTOR_ELT(reply, 1, value);
  UNPROTECT(1);
  return reply;
}

/* For a simple value, that reply's bytes are those of the reply with value
 * NULL around the value's own item: `reply_before` (the header, the list's
 * flags and length, "ok"'s item) and `reply_after` (its names), empty when
 * R_Serialize's bytes are not laid out so. */
static SEXP reply_before, reply_after;

static int reply_template(void) {
  if (reply_before != NULL) return XLENGTH(reply_before) > 0;
  SEXP null_reply = PROTECT(ok_reply_list(R_NilValue));
  SEXP bytes = PROTECT(ps_serialize_native(null_reply));
  SEXP ok = PROTECT(Rf_mkString("ok"));
  R_xlen_t ok_size = ps_simple_item_size(ok), header = XLENGTH(ps_serialize_header());
  R_xlen_t at = header + 8 + ok_size;
  int usable = ok_size >= 0 && at + 4 <= XLENGTH(bytes);
  if (usable) {
    SEXP mine = PROTECT(Rf_allocVector(RAWSXP, at + 4));
    memcpy(RAW(mine), RAW(ps_serialize_header()), header);
    memcpy(RAW(mine) + header, RAW(bytes) + header, 8);
    ps_simple_item_into(R_NilValue, ps_simple_item_into(ok, RAW(mine) + header + 8));
    usable = memcmp(RAW(mine), RAW(bytes), at + 4) == 0;
    UNPROTECT(1);
  }
  reply_before = Rf_allocVector(RAWSXP, usable ? at : 0);
  R_PreserveObject(reply_before);
  reply_after = Rf_allocVector(RAWSXP, usable ? XLENGTH(bytes) - at - 4 : 0);
  R_PreserveObject(reply_after);
  if (usable) {
    memcpy(RAW(reply_before), RAW(bytes), at);
    memcpy(RAW(reply_after), RAW(bytes) + at + 4, XLENGTH(reply_after));
  }
  UNPROTECT(3);
  return usable;
}

static SEXP ok_reply(SEXP value) {
  R_xlen_t size = reply_template() ? ps_simple_item_size(value) : -1;
  if (size < 0) {
    SEXP out = ps_serialize_native(PROTECT(ok_reply_list(value)));
    UNPROTECT(1);
    return out;
  }
  R_xlen_t before = XLENGTH(reply_before), after = XLENGTH(reply_after);
  SEXP out = Rf_allocVector(RAWSXP, before + size + after);
  memcpy(RAW(out), RAW(reply_before), before);
  ps_simple_item_into(value, RAW(out) + before);
  memcpy(RAW(out) + before + size, RAW(reply_after), after);
  return out;
}

/* A worker runs a plain call (`payload`, its message as ps_plain_message()
 * makes it, holding no handle). Returns the serialized reply list(status =
 * "ok", value), or list(value, threshold) when the value holds data worth
 * sharing (R/pool-worker.R then shares it). An error (in FUN or in reading
 * the message) is raised to the worker's loop, which replies with it. */
SEXP ps_pool_run_plain(SEXP payload) {
  if (TYPEOF(payload) != RAWSXP) ps_raise_error("pageshare_bad_argument", "a plain call of pageshare's pool is damaged");
  input_t in = {RAW(payload), XLENGTH(payload), 0};
  SEXP fun = PROTECT(read_stream(&in));
  SEXP rest = PROTECT(read_stream(&in));
  if (in.read != in.size || TYPEOF(rest) != VECSXP || XLENGTH(rest) != 3 || TYPEOF(VECTOR_ELT(rest, 0)) != VECSXP) {
    Rf_error("a plain call of pageshare's pool is damaged");
  }
  SEXP threshold = VECTOR_ELT(rest, 2);
  SEXP call = PROTECT(call_of(fun, VECTOR_ELT(rest, 0), VECTOR_ELT(rest, 1)));
  ps_rust(ps_task_state_rs(Rf_ScalarLogical(TRUE)));
  SEXP value = PROTECT(Rf_eval(call, R_GlobalEnv));
  ps_rust(ps_task_state_rs(Rf_ScalarLogical(FALSE)));
  if (is_vector_or_list(value) && Rf_asLogical(ps_rust(ps_worth_walking_rs(value, threshold))) == TRUE) {
    SEXP out = Rf_allocVector(VECSXP, 2);
    SET_VECTOR_ELT(out, 0, value);
    SET_VECTOR_ELT(out, 1, threshold);
    UNPROTECT(4);
    return out;
  }
  SEXP out = ok_reply(value);
  UNPROTECT(4);
  return out;
}
