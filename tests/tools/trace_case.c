/* A known sequence of large-block events for the LOCUS_TRACE_FILE test
 * (tests/tools/check.py trace): malloc 2 MiB, realloc to 64 MiB, free, calloc
 * 3 MiB, a small malloc (not traced), free both. Prints the addresses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char *a = malloc(2u << 20);
  if (!a) return 1;
  memset(a, 1, 2u << 20);
  printf("a %p\n", (void *)a);
  char *b = realloc(a, 64u << 20);
  if (!b) return 1;
  printf("b %p\n", (void *)b);
  free(b);
  char *c = calloc(1, 3u << 20);
  char *d = malloc(100);
  if (!c || !d) return 1;
  printf("c %p\n", (void *)c);
  free(d);
  free(c);
  return 0;
}
