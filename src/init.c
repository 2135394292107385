/* R looks for R_init_pageshare in the shared library; the work (routine and
 * ALTREP class registration) is done in Rust (src/rust/pageshare-r/src/lib.rs). */
#include <R_ext/Rdynload.h>

void R_init_pageshare_rust(DllInfo *dll);

void R_init_pageshare(DllInfo *dll) { R_init_pageshare_rust(dll); }
