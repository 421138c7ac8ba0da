/*
 * Which allocator the test harnesses call.
 *
 *   default            the standard names (malloc, free, ...). Linked with
 *                      liblocus (override build) they resolve to locus.
 *   LOCUS_TEST_PREFIX  the locus_* names; for builds where locus lives beside
 *                      another allocator (-DLOCUS_NO_OVERRIDE=ON, sanitizers,
 *                      libFuzzer).
 *   LOCUS_TEST_SYSTEM  the standard names and no locus at all: the harness runs
 *                      against the C library's allocator, to prove the harness.
 *
 * LOCUS_API(malloc) expands to malloc or locus_malloc. The few functions whose
 * names differ have their own macros: T_USABLE_SIZE, T_FREE_SIZED.
 */
#ifndef LOCUS_TEST_API_H
#define LOCUS_TEST_API_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <malloc.h>
#include <stddef.h>
#include <stdlib.h>

#if defined(LOCUS_TEST_SYSTEM) && defined(LOCUS_TEST_PREFIX)
#error "LOCUS_TEST_SYSTEM and LOCUS_TEST_PREFIX are exclusive"
#endif

#if defined(LOCUS_TEST_SYSTEM)
#define LOCUS_API(name) name
#define T_USABLE_SIZE(p) malloc_usable_size(p)
#define T_FREE_SIZED(p, n) free(p) /* glibc 2.36 has no free_sized */
#define T_ALLOCATOR_NAME "system"
#else
#include "locus.h"
#if defined(LOCUS_TEST_PREFIX)
#define LOCUS_API(name) locus_##name
#define T_ALLOCATOR_NAME "locus (locus_* names)"
#else
#define LOCUS_API(name) name
#define T_ALLOCATOR_NAME "locus (standard names)"
#endif
#define T_USABLE_SIZE(p) locus_usable_size(p)
#define T_FREE_SIZED(p, n) locus_free_sized((p), (n))
#endif

#endif /* LOCUS_TEST_API_H */
