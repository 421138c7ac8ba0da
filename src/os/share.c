/* Page sharing (S. Valat, PhD thesis, 2014, Ch.6): the kernel's same-page
 * merging (KSM) and memory files whose pages two mappings share copy-on-write.
 * The system calls of the sharing features; the policy is in source/ (what
 * locus advises) and api/share.c (copy-on-write copies). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "os/os.h"
#include "util/stats.h"

#ifndef MADV_MERGEABLE
#define MADV_MERGEABLE 12
#define MADV_UNMERGEABLE 13
#endif

int os_merge(void *p, size_t size, bool on) {
  stat_add(&locus_stats.madvises, 1);
  if (madvise(p, size, on ? MADV_MERGEABLE : MADV_UNMERGEABLE) == 0) return 0;
  return errno == EINVAL && !os_ksm_present() ? ENOSYS : errno;
}

bool os_ksm_present(void) {
  char buf[16];
  return os_read_file("/sys/kernel/mm/ksm/run", buf, sizeof buf) > 0;
}

/* "name value" lines of /proc/self/ksm_stat (Linux 6.1+), and the count in
 * /proc/self/ksm_merging_pages (5.19+). */
static uint64_t field(const char *text, const char *name) {
  size_t n = 0;
  while (name[n]) n++;
  for (const char *p = text; *p;) {
    size_t i = 0;
    while (i < n && p[i] == name[i]) i++;
    if (i == n && p[i] == ' ') {
      uint64_t v = 0;
      bool neg = p[i + 1] == '-';
      for (const char *q = p + i + 1 + neg; *q >= '0' && *q <= '9'; q++) v = v * 10 + (uint64_t)(*q - '0');
      return neg ? 0 : v;
    }
    while (*p && *p != '\n') p++;
    if (*p) p++;
  }
  return 0;
}

bool os_ksm_self(os_ksm_t *k) {
  char buf[512];
  *k = (os_ksm_t){0};
  int n = os_read_file("/proc/self/ksm_stat", buf, sizeof buf - 1);
  if (n <= 0) return false;
  buf[n] = 0;
  k->merging_pages = field(buf, "ksm_merging_pages");
  k->zero_pages = field(buf, "ksm_zero_pages");
  k->rmap_items = field(buf, "ksm_rmap_items");
  k->process_profit = field(buf, "ksm_process_profit");
  return true;
}

int os_memfd(size_t size) {
  int fd = (int)syscall(SYS_memfd_create, "locus-shareable", MFD_CLOEXEC);
  if (fd < 0) return errno == ENOSYS ? -ENOSYS : -errno;
  if (ftruncate(fd, (off_t)size) != 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

void os_memfd_close(int fd) { close(fd); }

void *os_map_file(void *at, size_t size, int fd, size_t off, bool shared) {
  stat_add(&locus_stats.mmaps, 1);
  void *p = mmap(at, size, PROT_READ | PROT_WRITE, (shared ? MAP_SHARED : MAP_PRIVATE) | (at ? MAP_FIXED : 0), fd,
                 (off_t)off);
  return p == MAP_FAILED ? NULL : p;
}

void *os_map_fixed(void *at, size_t size) {
  stat_add(&locus_stats.mmaps, 1);
  void *p = mmap(at, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}
