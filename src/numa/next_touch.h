/* Migrate-on-next-touch of ranges of large blocks (numa/next_touch.c). */
#ifndef LOCUS_NEXT_TOUCH_H
#define LOCUS_NEXT_TOUCH_H

#include "types.h"

/* Marks [a, b) of the live large block `owner` (whole pages, checked by the
 * caller, api/numa.c) for migration on next touch: 0, or -1 and errno. */
int next_touch_range(region_t *owner, uintptr_t a, uintptr_t b);
/* Migrates now the pages of [a, b) still pending. */
void next_touch_resolve(uintptr_t a, uintptr_t b);
/* Cancels the pending ranges of a block about to be freed or resized: they
 * become accessible where they are (after handlers moving one of its groups
 * have finished). */
void next_touch_cancel(region_t *owner);
size_t next_touch_moved_pages(void);
size_t next_touch_faults(void);
/* Test hook: run the engine (protection, faults, protocol) even when the
 * kernel has no NUMA system calls, where it would do nothing. */
void next_touch_force(bool on);
/* Test hooks: `fault` runs in the SIGSEGV handler before it reads the table
 * (async-signal-safe code only), `mark` in a protection mark between
 * publishing the range and protecting it (nt_lock held). NULL: none. */
void next_touch_test_hooks(void (*fault)(void *addr), void (*mark)(void));
/* The engine chosen at the first mark: "uffd", "protect", or "none" yet. */
const char *next_touch_engine(void);

#endif /* LOCUS_NEXT_TOUCH_H */
