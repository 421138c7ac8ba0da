/* Allocation trace for the alignment analyser (locus align): LOCUS_TRACE_FILE
 * names a file that receives one text line per large allocation, resize and
 * free. Off by default; when off it costs one predictable branch on the large
 * paths only (callers test locus_trace_on first). */
#ifndef LOCUS_TRACE_H
#define LOCUS_TRACE_H

#include <stdbool.h>
#include <stddef.h>

extern bool locus_trace_on;           /* set once at start-up, never changed */

/* Start-up (options_init): trace to path; the file opens at the first record. */
void trace_start(const char *path);
void trace_alloc(const void *p, size_t size);
void trace_realloc(const void *old, const void *p, size_t size);
void trace_free(const void *p);

#endif /* LOCUS_TRACE_H */
