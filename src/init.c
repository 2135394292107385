/* What R runs when it loads pageshare.so. */
#include <R_ext/Rdynload.h>
#include "boundary.h"

void ps_register_entry_points(DllInfo *dll); /* entry_points.c */
void ps_register_view_classes(DllInfo *dll); /* view_methods.c */
void ps_init_rust(void);                     /* src/rust/pageshare-r/src/lib.rs */

void R_init_pageshare(DllInfo *dll) {
  ps_boundary_init();
  ps_register_entry_points(dll);
  ps_register_view_classes(dll);
  ps_init_rust();
}
