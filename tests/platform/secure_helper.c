/* secure_helper: linked with locus (liblocus.a or liblocus.so), run setuid
 * root by secure_exec.sh. Prints on stdout, never on stderr (the test checks
 * that locus prints nothing there):
 *   secure_helper: euid=<n> ruid=<n> profile=<locus_get_profile()> secure=<0|1>
 * and allocates a little (so that there are statistics to report). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "locus.h"

int main(void) {
  for (size_t n = 16; n <= (8u << 20); n *= 4) {
    char *p = locus_malloc(n);
    if (!p) return 1;
    memset(p, 1, n);
    locus_free(p);
  }
  char *q = malloc(1000);
  if (q) q[999] = 1;
  free(q);
  printf("secure_helper: euid=%d ruid=%d profile=%s secure=%d\n", (int)geteuid(), (int)getuid(),
         locus_get_profile(), getauxval(AT_SECURE) != 0);
  return 0;
}
