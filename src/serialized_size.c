/* The number of bytes serialize() would write for an object, counted without
 * building them (future >= 1.40 sizes globals the same way). Views write
 * themselves as handles inside a handle scope, so a shared global counts at a
 * handle's size there. C, not Rust: R_Serialize may raise an R error, which
 * must not unwind through Rust frames. */
#include <Rinternals.h>

static void count_char(R_outpstream_t stream, int c) {
  (void)c;
  *(double *)stream->data += 1;
}

static void count_bytes(R_outpstream_t stream, void *buf, int n) {
  (void)buf;
  *(double *)stream->data += n;
}

SEXP ps_serialized_size(SEXP x) {
  double n = 0;
  struct R_outpstream_st out;
  R_InitOutPStream(&out, (R_pstream_data_t)&n, R_pstream_xdr_format, 3, count_char, count_bytes,
                   NULL, R_NilValue);
  R_Serialize(x, &out);
  return Rf_ScalarReal(n);
}
