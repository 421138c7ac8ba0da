/* Entry points shared by the files of api/. */
#ifndef LOCUS_API_H
#define LOCUS_API_H

#include <stddef.h>

#include "locus.h"

void *locus_alloc_aligned(size_t size, size_t align);
void locus_free_checked(void *p, const char *fn);
struct region_s;
struct uheap_s;
/* realloc of a shareable block (api/share.c): stays shareable. */
void *locus_shareable_realloc(void *p, size_t usable, size_t size);
/* realloc of a block of user heap u (api/heaps.c): p is in region r, usable bytes. */
void *locus_heap_realloc_in(struct uheap_s *u, void *p, struct region_s *r, size_t usable, size_t size);

#endif /* LOCUS_API_H */
