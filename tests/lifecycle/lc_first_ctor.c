/* A library whose constructor allocates (lc_first_alloc.c): as a library the
 * program needs, it is initialised before a preloaded locus, so its
 * allocation is the first of the process, before locus's own constructor
 * (redis's first allocation comes so, from libgpg-error). The form is named
 * by LC_FIRST_FORM (getenv does not allocate). */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#define LC_FIRST_REQ 1000
void *lc_first_ptr;
size_t lc_first_usable;

__attribute__((constructor)) static void lc_first_ctor(void) {
  const char *form = getenv("LC_FIRST_FORM");
  void *p = NULL;
  if (!form) return;
  if (!strcmp(form, "malloc")) p = malloc(LC_FIRST_REQ);
  else if (!strcmp(form, "calloc")) p = calloc(1, LC_FIRST_REQ);
  else if (!strcmp(form, "realloc")) p = realloc(NULL, LC_FIRST_REQ);
  else if (!strcmp(form, "memalign")) p = memalign(64, LC_FIRST_REQ);
  else if (!strcmp(form, "aligned_alloc")) p = aligned_alloc(64, LC_FIRST_REQ);
  else if (!strcmp(form, "posix_memalign") && posix_memalign(&p, 64, LC_FIRST_REQ)) p = NULL;
  lc_first_ptr = p;
  lc_first_usable = p ? malloc_usable_size(p) : 0;
}
