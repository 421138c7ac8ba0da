/* Minimal test helpers: CHECK aborts the test with file:line and a message. */
#ifndef LOCUS_TEST_CHECK_H
#define LOCUS_TEST_CHECK_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_count;
#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    check_count++;                                                           \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                          \
      fprintf(stderr, "\n");                                                 \
      exit(1);                                                               \
    }                                                                        \
  } while (0)
#define TEST_DONE() (printf("%s: %d checks passed\n", __FILE__, check_count), 0)

/* Pattern derived from address and size, so a block mixed up with another is caught. */
static inline unsigned char pat(const void *p, size_t size, size_t i) {
  return (unsigned char)(((uintptr_t)p >> 4) * 31 + size * 7 + i);
}
static inline void fill(void *p, size_t size) {
  for (size_t i = 0; i < size; i++) ((unsigned char *)p)[i] = pat(p, size, i);
}
static inline int verify(const void *p, size_t size) {
  for (size_t i = 0; i < size; i++)
    if (((const unsigned char *)p)[i] != pat(p, size, i)) return 0;
  return 1;
}
/* The next of a sequence of sizes in [64, 1024] (LCG on *s): the 17
 * classes of the OpenMP pattern. */
static inline size_t size_64_1024(uint64_t *s) {
  *s = *s * 6364136223846793005u + 1442695040888963407u;
  return 64 + (*s >> 33) % 961;
}
/* Resident set size of this process, from /proc/self/status. */
static inline size_t rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t v = 0;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) v = strtoul(line + 6, NULL, 10);
  if (f) fclose(f);
  return v;
}
#endif
