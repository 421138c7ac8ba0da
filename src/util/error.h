/* Messages, fatal errors, assertions and the allocation-free formatter. */
#ifndef LOCUS_ERROR_H
#define LOCUS_ERROR_H

#include <stdarg.h>
#include <stddef.h>

__attribute__((noreturn, format(printf, 1, 2))) void locus_fatal(const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void locus_warn(const char *fmt, ...);
/* A line on locus's stderr, prefixed "locus: ", for LOCUS_VERBOSE. */
__attribute__((format(printf, 1, 2))) void locus_note(const char *fmt, ...);

/* Formats into buf like a tiny snprintf (%s %c %d %u %x %p %%, with the l and
 * z length modifiers); never allocates. Returns the length the whole text
 * needs; buf is NUL-terminated when len > 0. */
__attribute__((format(printf, 3, 4))) size_t fmt_buf(char *buf, size_t len, const char *fmt, ...);
size_t fmt_vbuf(char *buf, size_t len, const char *fmt, va_list ap);

/* Invariants: checked in the LOCUS_DEBUG build (and its test run), compiled
 * out otherwise. A failed check names the condition and its place. */
#ifdef LOCUS_DEBUG
#define LOCUS_ASSERT(c)                                                                       \
  ((c) ? (void)0 : locus_fatal("internal error: assertion '%s' failed at %s:%d", #c, __FILE__, __LINE__))
#define LOCUS_DEBUG_ONLY(x) x
#else
#define LOCUS_ASSERT(c) ((void)0)
#define LOCUS_DEBUG_ONLY(x)
#endif

#endif /* LOCUS_ERROR_H */
