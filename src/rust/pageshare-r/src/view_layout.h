/* Where the first fields of Rust's `View` (view.rs) lie, for the C shells of
 * the hottest view methods (src/view_methods.c, `ps_hot_view`), which read
 * them without calling into Rust. One list for both languages: view.rs reads
 * this file at compile time (include_str!) and asserts `View`'s offsets
 * against it; view_methods.c includes it and asserts its mirror's. A change
 * on either side that the other does not follow fails the build.
 *
 * The numbers are those of a 64-bit target (pointers and uint64_t 8 bytes,
 * int 4); elsewhere the shells do without the mirror and always call Rust.
 * Only `#define NAME number` lines: view.rs's reader understands no more. */
#ifndef PAGESHARE_VIEW_LAYOUT_H
#define PAGESHARE_VIEW_LAYOUT_H

#define PS_VIEW_OBJECT_OFFSET 0
#define PS_VIEW_LEN_OFFSET 8
#define PS_VIEW_READ_AT_OFFSET 16
#define PS_VIEW_WRITE_AT_OFFSET 24
#define PS_VIEW_NUMERIC_OFFSET 32

#endif
