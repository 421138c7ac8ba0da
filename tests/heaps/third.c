/* libthird.so: a stand-in for a third-party library that allocates inside
 * (malloc, strdup, calloc), built by the test and not linked with locus: its
 * malloc is whatever the program's is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct third_record {
  char *label;                        /* strdup */
  double *values;                     /* calloc */
  size_t n;
};

struct third_record *third_record_new(const char *label, size_t n) {
  struct third_record *r = malloc(sizeof *r);
  if (!r) return NULL;
  r->label = strdup(label);
  r->values = calloc(n, sizeof *r->values);
  r->n = n;
  return r;
}

void third_record_free(struct third_record *r) {
  free(r->label);
  free(r->values);
  free(r);
}
