/* The boundary between the C shells and Rust (see boundary.c). */
#ifndef PAGESHARE_BOUNDARY_H
#define PAGESHARE_BOUNDARY_H
#include <Rinternals.h>

/* Raise the error a Rust function left pending; never returns. */
void ps_raise_pending(void) __attribute__((noreturn));
void ps_boundary_init(void);

#endif
