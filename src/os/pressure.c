/* Memory pressure as the kernel reports it: the pressure-stall figure
 * (/proc/pressure/memory, and the cgroup's memory.pressure on v2),
 * MemAvailable (/proc/meminfo) and, when the process runs in a memory cgroup,
 * its limit, usage and limit hits (cgroup v2 memory.max, memory.high,
 * memory.current and memory.events of the cgroup and its ancestors; v1
 * memory.limit_in_bytes, memory.usage_in_bytes and memory.failcnt). Only
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
static int psi_some_avg10(const char *path) {
  char buf[256];
  if (os_read_file(path, buf, sizeof buf) <= 0) return -1;
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

/* The process's memory cgroup, found once: the directories holding its
 * limit and usage files, and the version. A process moved to another cgroup
 * later keeps the first answer (a program that does that can call nothing to
 * refresh it; an acceptable blind spot for an allocator).
 *
 * v2: the cgroup and each ancestor up to the root of the cgroup2 mount (found
 * in /proc/self/mountinfo: /sys/fs/cgroup on a v2 machine, elsewhere or with
 * no memory controller on a hybrid one) can each carry a memory.max and a
 * memory.high; the limit that binds is the one with the least room left, so
 * every level is kept (at most CG_LEVELS, the deepest ones). v1: the memory
 * controller's own hierarchy, one level. */
#define CG_LEVELS 4
#define CG_PATH 256
static char cg_dir[CG_LEVELS][CG_PATH];   /* [0] the process's own cgroup */
static int cg_levels;
static int cg_version = -1;

/* The cgroup2 mount: its mount point and the cgroup path it shows as its
 * root (not "/" inside a cgroup namespace mounted from the host's view). */
static bool cg2_mount(char *point, char *root, size_t len) {
  static char buf[16384];                  /* once, by the one sampling thread */
  if (os_read_file("/proc/self/mountinfo", buf, sizeof buf) <= 0) return false;
  for (char *line = buf; *line;) {
    char *end = strchr(line, '\n');
    if (end) *end = 0;
    char *dash = strstr(line, " - cgroup2 ");
    if (dash) {
      /* "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - cgroup2 SRC OPTS" */
      char *f = line;
      for (int i = 0; i < 3 && f; i++) f = strchr(f, ' '), f = f ? f + 1 : NULL;
      char *sp = f ? strchr(f, ' ') : NULL;
      char *mp = sp ? sp + 1 : NULL, *mpe = mp ? strchr(mp, ' ') : NULL;
      if (mpe && (size_t)(sp - f) < len && (size_t)(mpe - mp) < len) {
        memcpy(root, f, (size_t)(sp - f));
        root[sp - f] = 0;
        memcpy(point, mp, (size_t)(mpe - mp));
        point[mpe - mp] = 0;
        return true;
      }
    }
    if (!end) break;
    line = end + 1;
  }
  return false;
}

static void cg_find(void) {
  char buf[2048];
  cg_version = 0;
  if (os_read_file("/proc/self/cgroup", buf, sizeof buf) <= 0) return;
  /* v1 first: on a hybrid machine the unified ("0::") hierarchy has no memory controller. */
  const char *v1 = strstr(buf, ":memory:");
  const char *v2 = !strncmp(buf, "0::", 3) ? buf : strstr(buf, "\n0::");
  char path[CG_PATH];
  const char *start = v1 ? v1 + 8 : v2 ? strstr(v2, "::") + 2 : NULL;
  if (!start) return;
  size_t n = 0;
  while (start[n] && start[n] != '\n' && n + 1 < sizeof path) n++;
  memcpy(path, start, n);
  path[n] = 0;
  if (!strcmp(path, "/")) path[0] = 0;
  char probe[64], f[CG_PATH + 32];
  if (v1) {
    fmt_buf(cg_dir[0], CG_PATH, "/sys/fs/cgroup/memory%s", path);
    fmt_buf(f, sizeof f, "%s/memory.limit_in_bytes", cg_dir[0]);
    if (os_read_file(f, probe, sizeof probe) > 0) cg_version = 1, cg_levels = 1;
    return;
  }
  char point[CG_PATH], root[CG_PATH];
  if (!cg2_mount(point, root, sizeof point)) return;
  const char *rel = path;                  /* the path below the mount's root */
  size_t rl = strcmp(root, "/") ? strlen(root) : 0;
  if (rl && !strncmp(path, root, rl) && (path[rl] == '/' || !path[rl])) rel = path + rl;
  /* From the process's cgroup up to the mount's root (whose files, on the
   * machine's real root, do not exist: no limit there). */
  char dir[CG_PATH];
  fmt_buf(dir, sizeof dir, "%s%s", point, rel);
  size_t base = strlen(point);
  for (;;) {
    fmt_buf(f, sizeof f, "%s/memory.max", dir);
    if (os_read_file(f, probe, sizeof probe) > 0) {
      if (cg_levels < CG_LEVELS) memcpy(cg_dir[cg_levels++], dir, CG_PATH);
      cg_version = 2;
    }
    char *slash = strrchr(dir, '/');
    if (!slash || (size_t)(slash - dir) < base) break;
    *slash = 0;
  }
}

static size_t read_number(const char *dir, const char *name) {
  char f[CG_PATH + 32], v[64];
  fmt_buf(f, sizeof f, "%s/%s", dir, name);
  return os_read_file(f, v, sizeof v) > 0 ? number_after(v, NULL) : SIZE_MAX;
}

/* The value of `key` at the start of a line of dir/name ("key value" lines). */
static size_t keyed(const char *dir, const char *name, const char *key) {
  char f[CG_PATH + 32], v[4096], k[48];
  fmt_buf(f, sizeof f, "%s/%s", dir, name);
  if (os_read_file(f, v, sizeof v) <= 0) return SIZE_MAX;
  fmt_buf(k, sizeof k, "\n%s ", key);
  size_t kl = strlen(key);
  const char *p = !strncmp(v, key, kl) && v[kl] == ' ' ? v : strstr(v, k);
  return p ? number_after(p + (p != v), key) : SIZE_MAX;
}

/* Usage as the limit sees it, less the inactive file pages the kernel
 * reclaims first when the cgroup nears its limit (as container runtimes
 * count it): a cgroup whose page cache filled it still has that room. */
static size_t usage_less_cache(const char *dir, const char *usage_file, const char *inactive_key) {
  size_t use = read_number(dir, usage_file);
  if (use == SIZE_MAX) return use;
  size_t cache = keyed(dir, "memory.stat", inactive_key);
  return cache != SIZE_MAX && cache < use ? use - cache : use;
}

void os_memory_pressure(os_pressure_t *out) {
  char buf[4096];
  out->psi_some_avg10 = psi_some_avg10("/proc/pressure/memory");
  out->mem_available = SIZE_MAX;
  if (os_read_file("/proc/meminfo", buf, sizeof buf) > 0) {
    size_t kb = number_after(buf, "MemAvailable:");
    if (kb != SIZE_MAX) out->mem_available = kb * 1024;
  }
  if (cg_version < 0) cg_find();
  out->cg_version = cg_version;
  out->cg_limit = out->cg_usage = out->cg_events = SIZE_MAX;
  if (cg_version == 1) {
    size_t lim = read_number(cg_dir[0], "memory.limit_in_bytes");
    /* v1 says "no limit" with a huge page-rounded number (2^63 - 4096). */
    out->cg_limit = lim >= ((size_t)1 << 62) ? SIZE_MAX : lim;
    if (out->cg_limit != SIZE_MAX)
      out->cg_usage = usage_less_cache(cg_dir[0], "memory.usage_in_bytes", "total_inactive_file");
    return;
  }
  if (cg_version != 2) return;
  /* The level with the least room binds. "max" reads as no number: no limit. */
  size_t room = SIZE_MAX, events = 0;
  for (int i = 0; i < cg_levels; i++) {
    size_t lim = read_number(cg_dir[i], "memory.max"), high = read_number(cg_dir[i], "memory.high");
    if (high < lim) lim = high;
    if (lim != SIZE_MAX) {
      size_t use = usage_less_cache(cg_dir[i], "memory.current", "inactive_file");
      if (use == SIZE_MAX) use = 0;
      size_t r = lim > use ? lim - use : 0;
      if (r < room) room = r, out->cg_limit = lim, out->cg_usage = use;
    }
    size_t e = keyed(cg_dir[i], "memory.events", "oom");
    if (e != SIZE_MAX) events += e;
  }
  out->cg_events = events;
  /* The cgroup's own stall figure: a limited cgroup stalls while the machine does not. */
  fmt_buf(buf, sizeof buf, "%s/memory.pressure", cg_dir[0]);
  int psi = psi_some_avg10(buf);
  if (psi > out->psi_some_avg10) out->psi_some_avg10 = psi;
}
