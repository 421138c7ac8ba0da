/* Helpers shared by the lifecycle tests (header only). */
#ifndef LC_COMMON_H
#define LC_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The locus API, declared weak: the tests link liblocus, but stay runnable
 * on another allocator (preloaded, or glibc) to check the harness itself. */
#include "locus.h"
#pragma weak locus_cached_bytes
#pragma weak locus_get_profile
#pragma weak locus_release
#pragma weak locus_stats_get
#pragma weak locus_collect
#pragma weak locus_malloc_on_node

static inline int lc_have_locus(void) { return locus_cached_bytes != NULL; }

/* Messages through write(2): usable at exit time, after fork, in handlers. */
static inline void lc_say(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > (int)sizeof buf - 1) n = (int)sizeof buf - 1;
  ssize_t w = write(2, buf, (size_t)n);
  (void)w;
}

#define LC_CHECK(cond, ...)                                                    \
  do {                                                                         \
    if (!(cond)) {                                                             \
      lc_say("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                   \
      lc_say(__VA_ARGS__);                                                     \
      lc_say("\n");                                                            \
      _exit(1);                                                                \
    }                                                                          \
  } while (0)

/* A field of /proc/self/status in KiB ("VmRSS", "VmSize", ...), -1 if absent.
 * Reads with open/read: no stdio, no malloc. */
#include <fcntl.h>
static inline long lc_status_kb(const char *field) {
  char buf[8192];
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  size_t fl = strlen(field);
  for (char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p) {
    if (strncmp(p, field, fl) == 0 && p[fl] == ':') return strtol(p + fl + 1, NULL, 10);
  }
  return -1;
}

/* xorshift: cheap deterministic randomness per thread. */
static inline uint64_t lc_rand(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13; x ^= x >> 7; x ^= x << 17;
  return *s = x;
}

/* Stamp a block with a pattern derived from its size and a tag; check it. */
static inline void lc_stamp(void *p, size_t n, uint64_t tag) {
  unsigned char *c = p;
  if (n == 0) return;
  c[0] = (unsigned char)tag;
  if (n < 3) return;
  c[n - 1] = (unsigned char)(tag >> 8);
  c[n / 2] = (unsigned char)(tag ^ n);
}
static inline int lc_stamp_ok(const void *p, size_t n, uint64_t tag) {
  const unsigned char *c = p;
  if (n == 0) return 1;
  if (n < 3) return c[0] == (unsigned char)tag;
  return c[0] == (unsigned char)tag && c[n - 1] == (unsigned char)(tag >> 8) &&
         c[n / 2] == (unsigned char)(tag ^ n);
}

#endif
