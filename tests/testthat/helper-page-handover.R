# Skips for tests that assert what only glibc's malloc() gives (the page
# handover; large blocks unmapped when freed). Under another allocator
# (LD_PRELOAD of jemalloc or tcmalloc) they skip, saying why.

# The page handover is on in this process (its self-test at load passed).
skip_unless_handover <- function() {
  on <- pageshare:::page_handover_enabled()
  testthat::skip_if_not(isTRUE(on), paste("page handover off in this process:", attr(on, "reason")))
}

# free() of a large block unmaps it (glibc's malloc): how the identity cache
# sees that a large source died. Other allocators keep freed memory mapped;
# there dead sources go by pageshare.cache_limit only.
skip_unless_glibc_malloc <- function() {
  why <- attr(pageshare:::page_handover_enabled(), "reason")
  testthat::skip_if(!is.null(why) && grepl("malloc", why),
                    paste("freed memory may stay mapped under this allocator:", why))
}
