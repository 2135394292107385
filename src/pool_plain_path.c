/* The plain path of pageshare's pool: a call with nothing to share (see
 * plain_call() in R/pool.R) and its reply go from shm_call() to the worker
 * and back without R code on the way, which would cost more than the trip:
 *   - ps_pool_call_plain(): shm_call()'s plain case, made and sent in one step;
 *   - ps_pool_next_event_delivered(): the pool's next event, a plain reply to
 *     a call read and delivered to its task here;
 *   - ps_pool_worker_serve(): a worker's loop over plain calls.
 * Anything else goes the general way, in R (R/pool*.R), from where these
 * leave off.
 *
 * C, not Rust, for the same reason as pool_messages.c: R code runs here (the
 * task's own, and R_Unserialize), and its errors unwind through these frames
 * to the caller's handler; every object here is an R object. */
#include <Rinternals.h>
#include "pool_messages.h"

/* The Rust bodies of the entry points called here (entry_pool*.rs,
 * entry_process.rs, entry_tasks.rs). */
SEXP ps_pool_submit_rs(SEXP slot, SEXP payload, SEXP plain, SEXP what, SEXP resend);
SEXP ps_pool_next_event_rs(SEXP timeout, SEXP idle);
SEXP ps_pool_worker_next_rs(void);
SEXP ps_pool_worker_reply_rs(SEXP tag, SEXP payload, SEXP plain, SEXP condition);
SEXP ps_mapped_stale_rs(void);
SEXP ps_release_handoffs_rs(void);

/* Is `x` a number as the option pageshare.threshold must be (one number,
 * not NA, >= 0)? Anything else (also a valid value of another form) is
 * left to the general path, which reads the option by its rule. */
static int plain_threshold(SEXP x) {
  if (Rf_isObject(x) || XLENGTH(x) != 1) return 0;
  if (TYPEOF(x) == REALSXP) return !ISNAN(REAL(x)[0]) && REAL(x)[0] >= 0;
  if (TYPEOF(x) == INTSXP) return INTEGER(x)[0] != NA_INTEGER && INTEGER(x)[0] >= 0;
  return 0;
}

/* shm_call(FUN, ...) with `args` = list(...), when it is a plain call: its
 * message list(op = "call", FUN, args, threshold) sent to the least busy
 * worker (or queued for one), and the task returned, as R/pool.R makes it.
 * `env` is environment(FUN). NULL when the call is not plain (nothing is
 * sent: R takes the general path); a negative number when the send did not
 * happen (-2: the user interrupted it). */
SEXP ps_pool_call_plain(SEXP env, SEXP fun, SEXP args, SEXP generation) {
  SEXP threshold = Rf_GetOption1(Rf_install("pageshare.threshold"));
  if (!plain_threshold(threshold) || !ps_is_plain_call(env, args, threshold)) return R_NilValue;
  SEXP msg = PROTECT(Rf_allocVector(VECSXP, 4));
  SEXP names = Rf_allocVector(STRSXP, 4);
  Rf_setAttrib(msg, R_NamesSymbol, names);
  const char *fields[] = {"op", "FUN", "args", "threshold"};
  for (int i = 0; i < 4; i++) SET_STRING_ELT(names, i, Rf_mkChar(fields[i]));
  SET_VECTOR_ELT(msg, 0, Rf_mkString("call"));
  SET_VECTOR_ELT(msg, 1, fun);
  SET_VECTOR_ELT(msg, 2, args);
  SET_VECTOR_ELT(msg, 3, threshold);
  SEXP payload = PROTECT(ps_serialize_native(msg));
  SEXP task = PROTECT(R_NewEnv(R_EmptyEnv, FALSE, 0));
  Rf_defineVar(Rf_install("generation"), generation, task);
  Rf_setAttrib(task, R_ClassSymbol, Rf_mkString("pageshare_task"));
  SEXP slot = PROTECT(Rf_ScalarInteger(NA_INTEGER));
  SEXP yes = PROTECT(Rf_ScalarLogical(TRUE)), no = PROTECT(Rf_ScalarLogical(FALSE));
  SEXP tag = PROTECT(ps_rust(ps_pool_submit_rs(slot, payload, yes, task, no)));
  if (Rf_asReal(tag) < 0) {
    UNPROTECT(7);
    return tag;
  }
  Rf_defineVar(Rf_install("tag"), tag, task);
  UNPROTECT(7);
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
 * task, and the event is list(7). Until the reply is read the task holds
 * the unreadable reply: an error in reading (no memory) goes on to the
 * caller, and the task fails. */
SEXP ps_pool_next_event_delivered(SEXP timeout, SEXP idle) {
  SEXP ev = PROTECT(ps_rust(ps_pool_next_event_rs(timeout, idle)));
  if (Rf_asInteger(VECTOR_ELT(ev, 0)) != 0 || !Rf_asLogical(VECTOR_ELT(ev, 3)) ||
      TYPEOF(VECTOR_ELT(ev, 1)) != ENVSXP) {
    UNPROTECT(1);
    return ev;
  }
  SEXP task = VECTOR_ELT(ev, 1), symbol = Rf_install("reply");
  Rf_defineVar(symbol, unreadable_reply(), task);
  Rf_defineVar(symbol, ps_unserialize(VECTOR_ELT(ev, 2)), task);
  SEXP delivered = Rf_allocVector(VECSXP, 1);
  SET_VECTOR_ELT(delivered, 0, Rf_ScalarInteger(7));
  UNPROTECT(1);
  return delivered;
}

/* A worker runs the plain calls it receives, and replies, as long as it may:
 * `clean` says that no earlier message left state to let go of first (see
 * pool_worker_clean() in R/pool-worker.R), and a message that says views may
 * be stale (`scan`) finds none. Returns the first message it leaves to R, as
 * ps_pool_worker_next gives it (`list(tag, payload, release, plain, scan)`),
 * with a sixth element when it ran the call and its value holds data worth
 * sharing (ps_pool_run_plain's list(value, threshold); the segments handed
 * over before were let go); NULL when the pool stops. */
SEXP ps_pool_worker_serve(SEXP clean) {
  int may = Rf_asLogical(clean) == TRUE;
  SEXP yes = PROTECT(Rf_ScalarLogical(TRUE)), no = PROTECT(Rf_ScalarLogical(FALSE));
  for (;;) {
    SEXP msg = PROTECT(ps_rust(ps_pool_worker_next_rs()));
    /* (views of released segments are collected by R first, with a gc()) */
    if (msg == R_NilValue || !may || !Rf_asLogical(VECTOR_ELT(msg, 3)) ||
        (Rf_asLogical(VECTOR_ELT(msg, 4)) && Rf_asInteger(ps_rust(ps_mapped_stale_rs())) > 0)) {
      UNPROTECT(3);
      return msg;
    }
    if (Rf_asLogical(VECTOR_ELT(msg, 2))) ps_rust(ps_release_handoffs_rs());
    SEXP out = PROTECT(ps_pool_run_plain(VECTOR_ELT(msg, 1)));
    if (TYPEOF(out) != RAWSXP) {
      SEXP left = PROTECT(Rf_allocVector(VECSXP, 6));
      for (int i = 0; i < 5; i++) SET_VECTOR_ELT(left, i, VECTOR_ELT(msg, i));
      SET_VECTOR_ELT(left, 2, no);
      SET_VECTOR_ELT(left, 5, out);
      UNPROTECT(5);
      return left;
    }
    SEXP sent = ps_rust(ps_pool_worker_reply_rs(VECTOR_ELT(msg, 0), out, yes, no));
    UNPROTECT(2);
    if (Rf_asLogical(sent) != TRUE) {
      UNPROTECT(2);
      return R_NilValue;
    }
  }
}
