/* Entry points shared by the files of api/. */
#ifndef LOCUS_API_H
#define LOCUS_API_H

#include <stddef.h>

void *locus_alloc_aligned(size_t size, size_t align);
void locus_free_checked(void *p, const char *fn);

#endif /* LOCUS_API_H */
