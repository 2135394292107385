/* Messages of pageshare's pool in C (pool_messages.c), for the pool's plain
 * path (pool_plain_path.c). */
#ifndef PAGESHARE_POOL_MESSAGES_H
#define PAGESHARE_POOL_MESSAGES_H
#include <Rinternals.h>

SEXP ps_serialize_native(SEXP x);
SEXP ps_unserialize(SEXP raw);
SEXP ps_pool_run_plain(SEXP payload);
/* The message of a plain call of `fun` with `args` (a list). */
SEXP ps_plain_message(SEXP fun, SEXP args, SEXP threshold);
/* Is a call of a function whose environment is `env` with `args` plain? */
int ps_is_plain_call(SEXP env, SEXP args, SEXP threshold);
/* A Rust body's result, or its pending error raised. */
SEXP ps_rust(SEXP out);

#endif
