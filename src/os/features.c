/* The kernel-feature record: what this kernel offers, probed once at start
 * (before any allocation is served) and read without locks afterwards. The
 * probes cost a few system calls on one private page, a few microseconds. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "os/os.h"

#include "types.h"

#ifndef MADV_FREE
#define MADV_FREE 8
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

os_features_t os_features = {.page_size = 4096, .numa_balancing = -1};

static const char *const thp_names[] = {"unsupported", "never", "madvise", "always"};
const char *os_thp_name(thp_mode_t m) { return thp_names[m]; }

/* "always [madvise] never": the bracketed word is the mode. */
static thp_mode_t read_thp_mode(void) {
  char buf[128];
  if (os_read_file("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf) <= 0)
    return THP_UNSUPPORTED;
  if (strstr(buf, "[always]")) return THP_ALWAYS;
  if (strstr(buf, "[madvise]")) return THP_MADVISE;
  if (strstr(buf, "[never]")) return THP_NEVER;
  return THP_UNSUPPORTED;
}

static size_t read_number(const char *path, long fallback) {
  char buf[64];
  if (os_read_file(path, buf, sizeof buf) <= 0 || buf[0] < '0' || buf[0] > '9') return (size_t)fallback;
  size_t v = 0;
  for (const char *p = buf; *p >= '0' && *p <= '9'; p++) v = v * 10 + (size_t)(*p - '0');
  return v;
}

/* An advice the kernel does not know fails with EINVAL; one it knows succeeds
 * on a private anonymous page. */
static bool advice_works(void *page, size_t len, int advice) {
  return madvise(page, len, advice) == 0;
}

void os_features_probe(void) {
  os_features_t f = {.numa_balancing = -1};
  int saved = errno;
  unsigned long ps = getauxval(AT_PAGESZ);
  f.page_size = ps ? ps : 4096;
  if (f.page_size > PAGE_SIZE)
    locus_fatal("the kernel's page size (%zu) is larger than this build's mapping granule (%u)",
                f.page_size, (unsigned)PAGE_SIZE);
  f.secure = getauxval(AT_SECURE) != 0;
  f.thp = read_thp_mode();
  if (f.thp != THP_UNSUPPORTED)
    f.huge_page_size = read_number("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", 0);
  f.numa_balancing = (int)read_number("/proc/sys/kernel/numa_balancing", -1);
  {
    int mode;                            /* ENOSYS on a kernel built without NUMA */
    f.numa = syscall(SYS_get_mempolicy, &mode, NULL, 0UL, NULL, 0UL) == 0;
  }
  struct utsname u;
  if (uname(&u) == 0) fmt_buf(f.kernel, sizeof f.kernel, "%s", u.release);
  void *page = mmap(NULL, f.page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page != MAP_FAILED) {
    f.madv_populate_write = advice_works(page, f.page_size, MADV_POPULATE_WRITE);
    f.madv_free = advice_works(page, f.page_size, MADV_FREE);
    /* An emulator (qemu-user) may accept any advice: a value no kernel
     * defines must fail for the answer to mean anything. */
    bool validates = !advice_works(page, f.page_size, 0x4c50);
    f.page_reuse = validates && advice_works(page, f.page_size, OS_MADV_PAGE_REUSE);
    munmap(page, f.page_size);
  }
  os_features = f;
  errno = saved;
}
