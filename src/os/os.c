/* The OS layer: every system call locus makes goes through here, so the
 * statistics count them and nothing else needs <sys/mman.h>. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "arch/arch.h"
#include "internal.h"

extern char **environ;

void *os_map(size_t size) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  stat_add(&locus_stats.mmaps, 1);
  return p == MAP_FAILED ? NULL : p;
}

bool os_unmap(void *p, size_t size) {
  stat_add(&locus_stats.munmaps, 1);
  stat_add(&locus_stats.returned, size);
  return munmap(p, size) == 0;
}

void *os_remap(void *p, size_t old_size, size_t new_size, bool may_move) {
  stat_add(&locus_stats.mremaps, 1);
  void *q = mremap(p, old_size, new_size, may_move ? MREMAP_MAYMOVE : 0);
  return q == MAP_FAILED ? NULL : q;
}

bool os_free_lazily(void *p, size_t size) {
  stat_add(&locus_stats.madvises, 1);
  if (madvise(p, size, MADV_FREE) == 0) return true;
  return madvise(p, size, MADV_DONTNEED) == 0;  /* kernels without MADV_FREE */
}

/* Clears only the resident pages of a recycled range: a page that is not
 * resident reads as zero on its next fault anyway (anonymous private memory),
 * so clearing it would fault it in for nothing (SPEC §2, calloc). Runs of
 * resident pages longer than a threshold are dropped with MADV_DONTNEED
 * instead, which is cheaper than writing them. */
void os_zero_resident(void *p, size_t size) {
  enum { BATCH = 4096, DROP_MIN = 64 };   /* pages per mincore call; pages worth dropping */
  unsigned char vec[BATCH];
  char *base = p;
  size_t pages = size / PAGE_SIZE;
  for (size_t first = 0; first < pages; first += BATCH) {
    size_t n = pages - first < BATCH ? pages - first : BATCH;
    if (mincore(base + first * PAGE_SIZE, n * PAGE_SIZE, vec) != 0) {
      memset(base + first * PAGE_SIZE, 0, n * PAGE_SIZE);
      continue;
    }
    for (size_t i = 0; i < n;) {
      if (!(vec[i] & 1)) { i++; continue; }
      size_t j = i;
      while (j < n && (vec[j] & 1)) j++;
      char *q = base + (first + i) * PAGE_SIZE;
      size_t len = (j - i) * PAGE_SIZE;
      if (j - i >= DROP_MIN && madvise(q, len, MADV_DONTNEED) == 0) stat_add(&locus_stats.madvises, 1);
      else memset(q, 0, len);
      i = j;
    }
  }
}

uint64_t os_random(void) {
  uint64_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r) {
    r = arch_cycles() ^ (uintptr_t)&r;
  }
  /* splitmix64 finaliser: spreads weak entropy over every bit */
  r += 0x9e3779b97f4a7c15ull;
  r = (r ^ (r >> 30)) * 0xbf58476d1ce4e5b9ull;
  r = (r ^ (r >> 27)) * 0x94d049bb133111ebull;
  return r ^ (r >> 31);
}

long os_gettid(void) { return syscall(SYS_gettid); }

int os_read_file(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t n = 0;
  while (n + 1 < len) {
    ssize_t r = read(fd, buf + n, len - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = 0;
  return (int)n;
}

/* Before libc has set `environ` (the dynamic loader may call malloc that
 * early), read the environment from /proc; the copy lives in a static buffer. */
const char *os_getenv(const char *name) {
  static char env_copy[32768];
  static size_t env_len;
  size_t nl = strlen(name);
  if (environ) {
    for (char **e = environ; *e; e++)
      if (!strncmp(*e, name, nl) && (*e)[nl] == '=') return *e + nl + 1;
    return NULL;
  }
  if (!env_len) {
    int n = os_read_file("/proc/self/environ", env_copy, sizeof env_copy);
    env_len = n > 0 ? (size_t)n : 1;
  }
  for (size_t i = 0; i < env_len; i += strlen(env_copy + i) + 1)
    if (!strncmp(env_copy + i, name, nl) && env_copy[i + nl] == '=') return env_copy + i + nl + 1;
  return NULL;
}
