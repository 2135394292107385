/* serialize() of simple values without R_Serialize (simple_serialize.c). */
#ifndef PAGESHARE_SIMPLE_SERIALIZE_H
#define PAGESHARE_SIMPLE_SERIALIZE_H
#include <Rinternals.h>

/* The size of serialize(x)'s bytes, or -1 when x is not simple (or the
 * writer is off in this process). */
R_xlen_t ps_serialize_simple_size(SEXP x);
/* Writes serialize(x)'s bytes (x simple) at `at`; returns their end. */
unsigned char *ps_serialize_simple_into(SEXP x, unsigned char *at);
/* serialize(x)'s bytes as a raw vector, or NULL when x is not simple. */
SEXP ps_serialize_simple(SEXP x);
/* The same for x's item alone, without the stream's header (which
 * ps_serialize_header() gives). */
R_xlen_t ps_simple_item_size(SEXP x);
unsigned char *ps_simple_item_into(SEXP x, unsigned char *at);
SEXP ps_serialize_header(void);

#endif
