/* Memory pressure as the kernel reports it: the pressure-stall figure
 * (/proc/pressure/memory), MemAvailable (/proc/meminfo) and, when the process
 * runs in a memory cgroup, its limit and usage (cgroup v2 memory.max and
 * memory.current; v1 memory.limit_in_bytes and memory.usage_in_bytes). Only
 * file reads; the adaptive controller (source/adapt.c) calls this a few times
 * per second at most. */
#define _GNU_SOURCE
#include <string.h>

#include "os/os.h"

#include "types.h"

/* The decimal number after `key` in buf, or SIZE_MAX. */
static size_t number_after(const char *buf, const char *key) {
  const char *p = key ? strstr(buf, key) : buf;
  if (!p) return SIZE_MAX;
  if (key) p += strlen(key);
  while (*p == ' ' || *p == '\t') p++;
  if (*p < '0' || *p > '9') return SIZE_MAX;
  size_t v = 0;
  for (; *p >= '0' && *p <= '9'; p++) v = v > SIZE_MAX / 10 - 1 ? SIZE_MAX / 2 : v * 10 + (size_t)(*p - '0');
  return v;
}

/* "some avg10=1.25 ..." -> 125. */
static int psi_some_avg10(void) {
  char buf[256];
  if (os_read_file("/proc/pressure/memory", buf, sizeof buf) <= 0) return -1;
  const char *p = strstr(buf, "some avg10=");
  if (!p) return -1;
  p += 11;
  int whole = 0, frac = 0, digits = 0;
  for (; *p >= '0' && *p <= '9'; p++) whole = whole * 10 + (*p - '0');
  if (*p == '.')
    for (p++; *p >= '0' && *p <= '9' && digits < 2; p++, digits++) frac = frac * 10 + (*p - '0');
  if (digits == 1) frac *= 10;
  return whole * 100 + frac;
}

/* The process's memory cgroup, found once: the directory holding its
 * limit and usage files, and the version. A process moved to another cgroup
 * later keeps the first answer (a program that does that can call nothing to
 * refresh it; an acceptable blind spot for an allocator). */
static char cg_limit_path[320], cg_usage_path[320];
static int cg_version = -1;

static void cg_find(void) {
  char buf[2048];
  cg_version = 0;
  if (os_read_file("/proc/self/cgroup", buf, sizeof buf) <= 0) return;
  /* v1 first: on a hybrid machine the unified ("0::") hierarchy has no memory controller. */
  const char *v1 = strstr(buf, ":memory:");
  const char *v2 = !strncmp(buf, "0::", 3) ? buf : strstr(buf, "\n0::");
  char path[256];
  const char *start = v1 ? v1 + 8 : v2 ? strstr(v2, "::") + 2 : NULL;
  if (!start) return;
  size_t n = 0;
  while (start[n] && start[n] != '\n' && n + 1 < sizeof path) n++;
  memcpy(path, start, n);
  path[n] = 0;
  if (!strcmp(path, "/")) path[0] = 0;
  char probe[64];
  if (v1) {
    fmt_buf(cg_limit_path, sizeof cg_limit_path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", path);
    fmt_buf(cg_usage_path, sizeof cg_usage_path, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", path);
    if (os_read_file(cg_limit_path, probe, sizeof probe) > 0) cg_version = 1;
    return;
  }
  fmt_buf(cg_limit_path, sizeof cg_limit_path, "/sys/fs/cgroup%s/memory.max", path);
  fmt_buf(cg_usage_path, sizeof cg_usage_path, "/sys/fs/cgroup%s/memory.current", path);
  if (os_read_file(cg_limit_path, probe, sizeof probe) > 0) cg_version = 2;
}

void os_memory_pressure(os_pressure_t *out) {
  char buf[4096];
  out->psi_some_avg10 = psi_some_avg10();
  out->mem_available = SIZE_MAX;
  if (os_read_file("/proc/meminfo", buf, sizeof buf) > 0) {
    size_t kb = number_after(buf, "MemAvailable:");
    if (kb != SIZE_MAX) out->mem_available = kb * 1024;
  }
  if (cg_version < 0) cg_find();
  out->cg_version = cg_version;
  out->cg_limit = out->cg_usage = SIZE_MAX;
  if (cg_version <= 0) return;
  char v[64];
  if (os_read_file(cg_limit_path, v, sizeof v) > 0) {
    size_t lim = number_after(v, NULL);         /* "max" (v2) reads as no number: no limit */
    /* v1 says "no limit" with a huge page-rounded number (2^63 - 4096). */
    out->cg_limit = lim >= ((size_t)1 << 62) ? SIZE_MAX : lim;
  }
  if (out->cg_limit != SIZE_MAX && os_read_file(cg_usage_path, v, sizeof v) > 0) out->cg_usage = number_after(v, NULL);
}
