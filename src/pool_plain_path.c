/* The plain path of pageshare's pool: a call with nothing to share (see
 * plain_call() in R/pool.R) and its reply go from shm_call() to the worker
 * and back without R code on the way, which would cost more than the trip:
 *   - ps_pool_call_plain(): shm_call()'s plain case, made and sent in one step;
 *   - ps_pool_next_event_delivered(): the pool's next event, a plain reply to
 *     a call read and delivered to its task here;
 *   - ps_task_value_plain(): shm_value()'s case of a call whose reply says
 *     "ok", also while it waits for it;
 *   - ps_pool_worker_serve(): a worker's loop over plain calls.
 * Anything else goes the general way, in R (R/pool*.R), from where these
 * leave off.
 *
 * C, not Rust, for the same reason as pool_messages.c: R code runs here (the
 * task's own, and R_Unserialize), and its errors unwind through these frames
 * to the caller's handler; every object here is an R object. */
#include <Rinternals.h>
#include <Rversion.h>
#include <string.h>
#include "pool_messages.h"

/* The Rust bodies of the entry points called here (entry_pool*.rs,
 * entry_process.rs, entry_tasks.rs). */
SEXP ps_pool_submit_rs(SEXP slot, SEXP payload, SEXP plain, SEXP what, SEXP resend);
SEXP ps_pool_next_event_rs(SEXP timeout, SEXP idle);
SEXP ps_pool_worker_next_rs(void);
SEXP ps_pool_worker_reply_rs(SEXP tag, SEXP payload, SEXP plain, SEXP condition);
SEXP ps_mapped_stale_rs(void);
SEXP ps_release_handoffs_rs(void);
SEXP ps_pool_delivered_event_rs(void);

/* The pool's events and a worker's tasks are named lists, their names those
 * of the wire (src/rust/pageshare-pool/src/wire.rs, made into R lists by
 * src/rust/pageshare-r/src/wire_r.rs): read here by name, never by position.
 * The index of the element `name` of `x`, or -1. */
static R_xlen_t field_index(SEXP x, const char *name) {
  SEXP names = Rf_getAttrib(x, R_NamesSymbol);
  if (TYPEOF(x) != VECSXP || TYPEOF(names) != STRSXP) return -1;
  for (R_xlen_t i = 0; i < XLENGTH(names); i++) {
    if (strcmp(CHAR(STRING_ELT(names, i)), name) == 0) return i;
  }
  return -1;
}

/* The element `name` of `x` (NULL if it has none). */
static SEXP field(SEXP x, const char *name) {
  R_xlen_t i = field_index(x, name);
  return i < 0 ? R_NilValue : VECTOR_ELT(x, i);
}

/* Is `ev` the pool's event called `name`? */
static int is_event(SEXP ev, const char *name) {
  SEXP e = field(ev, "event");
  return TYPEOF(e) == STRSXP && XLENGTH(e) == 1 && strcmp(CHAR(STRING_ELT(e, 0)), name) == 0;
}

/* Is the logical field `name` of `x` TRUE? */
static int field_true(SEXP x, const char *name) {
  return Rf_asLogical(field(x, name)) == TRUE;
}

/* Is `x` a number as the option pageshare.threshold must be (one number,
 * not NA, >= 0)? Anything else (also a valid value of another form) is
 * left to the general path, which reads the option by its rule. */
static int plain_threshold(SEXP x) {
  if (Rf_isObject(x) || XLENGTH(x) != 1) return 0;
  if (TYPEOF(x) == REALSXP) return !ISNAN(REAL(x)[0]) && REAL(x)[0] >= 0;
  if (TYPEOF(x) == INTSXP) return INTEGER(x)[0] != NA_INTEGER && INTEGER(x)[0] >= 0;
  return 0;
}

/* Objects every plain call uses, made once (and kept from the collector). */
static SEXP sym_generation, sym_tag, sym_reply, sym_keep, sym_threshold_option, task_class;

static void make_constants(void) {
  if (task_class != NULL) return;
  sym_generation = Rf_install("generation");
  sym_tag = Rf_install("tag");
  sym_reply = Rf_install("reply");
  sym_keep = Rf_install("keep");
  sym_threshold_option = Rf_install("pageshare.threshold");
  task_class = Rf_mkString("pageshare_task");
  R_PreserveObject(task_class);
  MARK_NOT_MUTABLE(task_class);
}

static SEXP closure_env(SEXP fun) {
#if R_VERSION >= R_Version(4, 5, 0)
  return R_ClosureEnv(fun);
#else
  return CLOENV(fun);
#endif
}

/* Has the pool a worker in every slot? (`pids` is NULL while no pool runs;
 * else pool_ensure() in R/pool-state.R starts the pool or fills the slot.) */
static int pool_ready(SEXP pids) {
  if (TYPEOF(pids) != INTSXP && TYPEOF(pids) != REALSXP) return 0;
  R_xlen_t n = XLENGTH(pids);
  if (n == 0) return 0;
  for (R_xlen_t i = 0; i < n; i++) {
    if (TYPEOF(pids) == INTSXP ? INTEGER(pids)[i] == NA_INTEGER : TYPEOF(pids) != REALSXP || ISNAN(REAL(pids)[i])) return 0;
  }
  return 1;
}

/* shm_call(FUN, ...) with `args` = list(...), when it is a plain call to a
 * pool whose workers (`pids`) all run: its message (ps_plain_message())
 * sent to the least busy worker (or queued for one), and the
 * task returned, as R/pool.R makes it. NULL when the call is not plain
 * (nothing is sent: R takes the general path); a negative number when the
 * send did not happen (-2: the user interrupted it). */
SEXP ps_pool_call_plain(SEXP fun, SEXP args, SEXP pids, SEXP generation) {
  if (!Rf_isFunction(fun) || TYPEOF(args) != VECSXP || !pool_ready(pids)) return R_NilValue;
  make_constants();
  SEXP env = TYPEOF(fun) == CLOSXP ? closure_env(fun) : R_NilValue;
  SEXP threshold = Rf_GetOption1(sym_threshold_option);
  if (!plain_threshold(threshold) || !ps_is_plain_call(env, args, threshold)) return R_NilValue;
  SEXP payload = PROTECT(ps_plain_message(fun, args, threshold));
  SEXP task = PROTECT(R_NewEnv(R_EmptyEnv, FALSE, 0));
  Rf_defineVar(sym_generation, generation, task);
  Rf_setAttrib(task, R_ClassSymbol, task_class);
  SEXP slot = PROTECT(Rf_ScalarInteger(NA_INTEGER));
  SEXP tag = PROTECT(ps_rust(ps_pool_submit_rs(slot, payload, Rf_ScalarLogical(TRUE), task, Rf_ScalarLogical(FALSE))));
  if (Rf_asReal(tag) < 0) {
    UNPROTECT(4);
    return tag;
  }
  Rf_defineVar(sym_tag, tag, task);
  UNPROTECT(4);
  return task;
}

/* The reply a call gets when its reply cannot be read (pool_unreadable_reply
 * in R/pool-state.R). */
static SEXP unreadable_reply(void) {
  static SEXP reply = NULL;
  if (reply == NULL) {
    SEXP ns = PROTECT(R_FindNamespace(Rf_mkString("pageshare")));
    reply = Rf_eval(Rf_install("pool_unreadable_reply"), ns);
    R_PreserveObject(reply);
    UNPROTECT(1);
  }
  return reply;
}

/* The pool's next event as ps_pool_next_event gives it (see
 * entry_pool_messages.rs), except a plain reply to a call (its `what` the
 * task, an environment): that is read and delivered here, as `reply` in the
 * task, and the event is "delivered". Until the reply is read the task
 * holds the unreadable reply: an error in reading (no memory) goes on to the
 * caller, and the task fails. */
SEXP ps_pool_next_event_delivered(SEXP timeout, SEXP idle) {
  SEXP ev = PROTECT(ps_rust(ps_pool_next_event_rs(timeout, idle)));
  SEXP task = field(ev, "what");
  if (!is_event(ev, "reply") || !field_true(ev, "plain") || TYPEOF(task) != ENVSXP) {
    UNPROTECT(1);
    return ev;
  }
  make_constants();
  Rf_defineVar(sym_reply, unreadable_reply(), task);
  Rf_defineVar(sym_reply, ps_unserialize(field(ev, "payload")), task);
  UNPROTECT(1);
  return ps_rust(ps_pool_delivered_event_rs());
}

/* Is `reply` a call's reply that says "ok" (list(status = "ok", value))? */
static int reply_ok(SEXP reply) {
  if (TYPEOF(reply) != VECSXP || XLENGTH(reply) != 2) return 0;
  SEXP status = VECTOR_ELT(reply, 0);
  return TYPEOF(status) == STRSXP && XLENGTH(status) == 1 && strcmp(CHAR(STRING_ELT(status, 0)), "ok") == 0;
}

/* shm_value(task) while it is plain: the task's value as list(value) once
 * its reply says "ok" (read here too when it arrives while this waits, as
 * the event "delivered" of ps_pool_next_event_delivered()). Anything else is left to
 * shm_value() in R: NULL when the task is not one, has failed or belongs to
 * a pool stopped since; list(NULL, event) when the pool had another event
 * for R to handle first. */
SEXP ps_task_value_plain(SEXP task, SEXP generation) {
  if (TYPEOF(task) != ENVSXP || !Rf_inherits(task, "pageshare_task")) return R_NilValue;
  make_constants();
  SEXP forever = PROTECT(Rf_ScalarReal(NA_REAL));
  for (;;) {
    SEXP reply = R_existsVarInFrame(task, sym_reply) ? Rf_eval(sym_reply, task) : R_NilValue;
    if (reply != R_NilValue) {
      UNPROTECT(1);
      if (!reply_ok(reply)) return R_NilValue;
      PROTECT(reply);
      /* (the task no longer keeps the shared arguments: its worker is done) */
      if (R_existsVarInFrame(task, sym_keep)) Rf_defineVar(sym_keep, R_NilValue, task);
      SEXP got = Rf_allocVector(VECSXP, 1);
      SET_VECTOR_ELT(got, 0, VECTOR_ELT(reply, 1));
      UNPROTECT(1);
      return got;
    }
    SEXP own = R_existsVarInFrame(task, sym_generation) ? Rf_eval(sym_generation, task) : R_NilValue;
    if (!R_compute_identical(own, generation, 16)) {
      UNPROTECT(1);
      return R_NilValue;
    }
    SEXP ev = PROTECT(ps_pool_next_event_delivered(forever, Rf_ScalarLogical(FALSE)));
    if (is_event(ev, "delivered")) {
      UNPROTECT(1);
      continue;
    }
    SEXP got = Rf_allocVector(VECSXP, 2);
    SET_VECTOR_ELT(got, 1, ev);
    UNPROTECT(2);
    return got;
  }
}

/* A worker runs the plain calls it receives, and replies, as long as it may:
 * `clean` says that no earlier message left state to let go of first (see
 * pool_worker_clean() in R/pool-worker.R), and a message that says views may
 * be stale (`scan`) finds none. Returns the first message it leaves to R, as
 * ps_pool_worker_next gives it (a named list: `tag`, `payload`, `release`,
 * `plain`, `scan`, `shared`), with `shared` set when it ran the call and its
 * value holds data worth sharing (ps_pool_run_plain's list(value,
 * threshold); the segments handed over before were let go, so `release` is
 * then FALSE); NULL when the pool stops. */
SEXP ps_pool_worker_serve(SEXP clean) {
  int may = Rf_asLogical(clean) == TRUE;
  make_constants();
  for (;;) {
    SEXP msg = PROTECT(ps_rust(ps_pool_worker_next_rs()));
    /* (views of released segments are collected by R first, with a gc()) */
    if (msg == R_NilValue || !may || !field_true(msg, "plain") ||
        (field_true(msg, "scan") && Rf_asInteger(ps_rust(ps_mapped_stale_rs())) > 0)) {
      UNPROTECT(1);
      return msg;
    }
    if (field_true(msg, "release")) ps_rust(ps_release_handoffs_rs());
    SEXP out = PROTECT(ps_pool_run_plain(field(msg, "payload")));
    if (TYPEOF(out) != RAWSXP) {
      /* (a fresh list, made for this call: set in place) */
      R_xlen_t release = field_index(msg, "release"), shared = field_index(msg, "shared");
      if (release < 0 || shared < 0) Rf_error("a task of pageshare's pool without its fields");
      SET_VECTOR_ELT(msg, release, Rf_ScalarLogical(FALSE));
      SET_VECTOR_ELT(msg, shared, out);
      UNPROTECT(2);
      return msg;
    }
    SEXP sent = ps_rust(ps_pool_worker_reply_rs(field(msg, "tag"), out, Rf_ScalarLogical(TRUE), Rf_ScalarLogical(FALSE)));
    UNPROTECT(2);
    if (Rf_asLogical(sent) != TRUE) return R_NilValue;
  }
}
