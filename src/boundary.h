/* The boundary between the C shells and Rust (see boundary.c). */
#ifndef PAGESHARE_BOUNDARY_H
#define PAGESHARE_BOUNDARY_H
#include <Rinternals.h>

/* Raise the error a Rust function left pending; never returns. */
void ps_raise_pending(void) __attribute__((noreturn));
void ps_boundary_init(void);
/* Raise an error of class c(kind, "pageshare_error", "error", "condition")
 * from an entry point written in C (kind e.g. "pageshare_bad_argument"). */
void ps_raise_error(const char *kind, const char *message) __attribute__((noreturn));
/* The symbol a single-string argument `what` names; a classed error for NA
 * or a "bytes"-encoded string. */
SEXP ps_symbol_arg(SEXP name, const char *what);

#endif
