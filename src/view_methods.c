/* The ALTREP classes of views, one per element type, and the C shells of
 * their methods. Each method's work is done in Rust (altrep.rs,
 * `ps_view_<method>`), which returns 0 with its answer in `out`, or 1 when it
 * failed (every Rust value dropped, the error pending); the shell then raises
 * the error from this C frame (boundary.c). Methods left unset fall back to
 * R's defaults. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <Rinternals.h>
#include <R_ext/Rdynload.h>
#include <R_ext/Altrep.h>
#include "boundary.h"
#include "rust/pageshare-r/src/view_layout.h"

int ps_view_length(SEXP x, R_xlen_t *out);
int ps_view_dataptr(SEXP x, Rboolean writeable, void **out);
int ps_view_dataptr_or_null(SEXP x, const void **out);
int ps_view_extract_subset(SEXP x, SEXP indx, SEXP *out);
int ps_view_duplicate(SEXP x, SEXP *out);
int ps_view_serialized_state(SEXP x, SEXP *out);
int ps_view_unserialize(SEXP class_, SEXP state, SEXP *out);
int ps_view_inspect(SEXP x);
int ps_view_string_elt(SEXP x, R_xlen_t i, SEXP *out);
int ps_view_string_set_elt(SEXP x, R_xlen_t i, SEXP v);
int ps_view_real_elt(SEXP x, R_xlen_t i, double *out);
int ps_view_int_elt(SEXP x, R_xlen_t i, int *out);
int ps_view_raw_elt(SEXP x, R_xlen_t i, Rbyte *out);
int ps_view_complex_elt(SEXP x, R_xlen_t i, Rcomplex *out);
int ps_view_real_region(SEXP x, R_xlen_t i, R_xlen_t n, double *buf, R_xlen_t *out);
int ps_view_int_region(SEXP x, R_xlen_t i, R_xlen_t n, int *buf, R_xlen_t *out);
int ps_view_raw_region(SEXP x, R_xlen_t i, R_xlen_t n, Rbyte *buf, R_xlen_t *out);
int ps_view_complex_region(SEXP x, R_xlen_t i, R_xlen_t n, Rcomplex *buf, R_xlen_t *out);
void ps_set_view_classes(const R_altrep_class_t *classes);

/* The first fields of the View of the last view a hot method was called on
 * (view.rs: `View` is repr(C) with these first, at the offsets of
 * view_layout.h, asserted there and here; `ps_last_view` is the one-entry
 * cache), and the armed test fault, if any (faults.rs). R calls Length,
 * Dataptr, Dataptr_or_null and Elt once per element in range(), t(),
 * split(): for the view just used, and no fault armed, these shells answer
 * from these fields without calling into Rust; everything else goes to the
 * Rust method, which also fills the cache.
 *
 * Both globals are Rust atomics (AtomicPtr, AtomicU32: the size and
 * alignment of the plain type), read here as C11 atomics with the orderings
 * Rust uses: the cache is published with Release and read with Acquire, the
 * fault flag is Relaxed. On a target whose layout view_layout.h does not
 * describe (not 64-bit) the mirror is left out. */
#if UINTPTR_MAX == UINT64_MAX
typedef struct {
  SEXP object;
  uint64_t len;
  const void *read_at;
  void *write_at;
  int numeric;
} ps_hot_view;
_Static_assert(offsetof(ps_hot_view, object) == PS_VIEW_OBJECT_OFFSET, "ps_hot_view.object: see view_layout.h");
_Static_assert(offsetof(ps_hot_view, len) == PS_VIEW_LEN_OFFSET, "ps_hot_view.len: see view_layout.h");
_Static_assert(offsetof(ps_hot_view, read_at) == PS_VIEW_READ_AT_OFFSET, "ps_hot_view.read_at: see view_layout.h");
_Static_assert(offsetof(ps_hot_view, write_at) == PS_VIEW_WRITE_AT_OFFSET, "ps_hot_view.write_at: see view_layout.h");
_Static_assert(offsetof(ps_hot_view, numeric) == PS_VIEW_NUMERIC_OFFSET, "ps_hot_view.numeric: see view_layout.h");
extern ps_hot_view *_Atomic ps_last_view;
extern _Atomic uint32_t ps_faults_armed;
_Static_assert(sizeof(ps_last_view) == sizeof(void *) && _Alignof(ps_hot_view *_Atomic) == _Alignof(void *),
               "Rust's AtomicPtr has the size and alignment of a pointer");
_Static_assert(sizeof(ps_faults_armed) == 4 && _Alignof(_Atomic uint32_t) == 4,
               "Rust's AtomicU32 has the size and alignment of a uint32_t");

static inline const ps_hot_view *hot_view(SEXP x) {
  if (atomic_load_explicit(&ps_faults_armed, memory_order_relaxed) != 0) return NULL;
  const ps_hot_view *h = atomic_load_explicit(&ps_last_view, memory_order_acquire);
  return (h != NULL && h->object == x && h->numeric) ? h : NULL;
}
#else
typedef struct {
  uint64_t len;
  const void *read_at;
  void *write_at;
} ps_hot_view;
static inline const ps_hot_view *hot_view(SEXP x) {
  (void)x;
  return NULL;
}
#endif

/* The answer of a Rust method, or its error raised. */
#define ANSWER(type, call)                                                                         \
  type out;                                                                                        \
  if (call) ps_raise_pending();                                                                    \
  return out

static R_xlen_t view_length(SEXP x) {
  const ps_hot_view *h = hot_view(x);
  if (h) return (R_xlen_t)h->len;
  ANSWER(R_xlen_t, ps_view_length(x, &out));
}
static void *view_dataptr(SEXP x, Rboolean writeable) {
  const ps_hot_view *h = hot_view(x);
  if (h && !writeable) return (void *)h->read_at;
  if (h && h->write_at) return h->write_at;
  ANSWER(void *, ps_view_dataptr(x, writeable, &out));
}
static const void *view_dataptr_or_null(SEXP x) {
  const ps_hot_view *h = hot_view(x);
  if (h) return h->read_at;
  ANSWER(const void *, ps_view_dataptr_or_null(x, &out));
}
static SEXP view_extract_subset(SEXP x, SEXP indx, SEXP call) {
  (void)call;
  ANSWER(SEXP, ps_view_extract_subset(x, indx, &out));
}
static SEXP view_duplicate(SEXP x, Rboolean deep) {
  (void)deep;
  ANSWER(SEXP, ps_view_duplicate(x, &out));
}
static SEXP view_serialized_state(SEXP x) { ANSWER(SEXP, ps_view_serialized_state(x, &out)); }
static SEXP view_unserialize(SEXP class_, SEXP state) {
  ANSWER(SEXP, ps_view_unserialize(class_, state, &out));
}
static Rboolean view_inspect(SEXP x, int pre, int deep, int pvec,
                             void (*inspect_subtree)(SEXP, int, int, int)) {
  (void)pre, (void)deep, (void)pvec, (void)inspect_subtree;
  if (ps_view_inspect(x)) ps_raise_pending();
  return TRUE;
}
static SEXP view_string_elt(SEXP x, R_xlen_t i) { ANSWER(SEXP, ps_view_string_elt(x, i, &out)); }
static void view_string_set_elt(SEXP x, R_xlen_t i, SEXP v) {
  if (ps_view_string_set_elt(x, i, v)) ps_raise_pending();
}
#define ELT_SHELL(name, type, rust)                                                                 \
  static type name(SEXP x, R_xlen_t i) {                                                           \
    const ps_hot_view *h = hot_view(x);                                                            \
    if (h) return ((const type *)h->read_at)[i];                                                   \
    ANSWER(type, rust(x, i, &out));                                                                \
  }
ELT_SHELL(view_real_elt, double, ps_view_real_elt)
ELT_SHELL(view_int_elt, int, ps_view_int_elt)
ELT_SHELL(view_raw_elt, Rbyte, ps_view_raw_elt)
ELT_SHELL(view_complex_elt, Rcomplex, ps_view_complex_elt)
static R_xlen_t view_real_region(SEXP x, R_xlen_t i, R_xlen_t n, double *buf) {
  ANSWER(R_xlen_t, ps_view_real_region(x, i, n, buf, &out));
}
static R_xlen_t view_int_region(SEXP x, R_xlen_t i, R_xlen_t n, int *buf) {
  ANSWER(R_xlen_t, ps_view_int_region(x, i, n, buf, &out));
}
static R_xlen_t view_raw_region(SEXP x, R_xlen_t i, R_xlen_t n, Rbyte *buf) {
  ANSWER(R_xlen_t, ps_view_raw_region(x, i, n, buf, &out));
}
static R_xlen_t view_complex_region(SEXP x, R_xlen_t i, R_xlen_t n, Rcomplex *buf) {
  ANSWER(R_xlen_t, ps_view_complex_region(x, i, n, buf, &out));
}

static void set_common_methods(R_altrep_class_t cls) {
  R_set_altrep_Length_method(cls, view_length);
  R_set_altrep_Duplicate_method(cls, view_duplicate);
  R_set_altrep_Serialized_state_method(cls, view_serialized_state);
  R_set_altrep_Unserialize_method(cls, view_unserialize);
  R_set_altrep_Inspect_method(cls, view_inspect);
  R_set_altvec_Dataptr_method(cls, view_dataptr);
  R_set_altvec_Dataptr_or_null_method(cls, view_dataptr_or_null);
  R_set_altvec_Extract_subset_method(cls, view_extract_subset);
}

/* In the order of altrep.rs's KINDS: double, integer, logical, raw, complex,
 * character. Raw and complex get Elt and Get_region too: R's defaults would
 * read an element through a writeable Dataptr, giving the view a private
 * mapping. */
#define NUMERIC_CLASS(k, alt, name, elt, region)                                                   \
  c[k] = R_make_##alt##_class(name, "pageshare", dll);                                             \
  R_set_##alt##_Elt_method(c[k], elt);                                                             \
  R_set_##alt##_Get_region_method(c[k], region)

void ps_register_view_classes(DllInfo *dll) {
  R_altrep_class_t c[6];
  NUMERIC_CLASS(0, altreal, "pageshare_double", view_real_elt, view_real_region);
  NUMERIC_CLASS(1, altinteger, "pageshare_integer", view_int_elt, view_int_region);
  NUMERIC_CLASS(2, altlogical, "pageshare_logical", view_int_elt, view_int_region);
  NUMERIC_CLASS(3, altraw, "pageshare_raw", view_raw_elt, view_raw_region);
  NUMERIC_CLASS(4, altcomplex, "pageshare_complex", view_complex_elt, view_complex_region);
  c[5] = R_make_altstring_class("pageshare_character", "pageshare", dll);
  R_set_altstring_Elt_method(c[5], view_string_elt);
  R_set_altstring_Set_elt_method(c[5], view_string_set_elt);
  for (int k = 0; k < 6; k++) set_common_methods(c[k]);
  ps_set_view_classes(c);
}
