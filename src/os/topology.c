/* NUMA topology from sysfs, read with raw file I/O so that discovery never
 * calls malloc (the thesis hit infinite recursion through hwloc/libnuma at
 * this point: Valat, PhD thesis, 2014, §4.11).
 *
 * What is read: the online nodes and those with memory, each node's CPUs and
 * distances, and the nodes the cpuset allows. Without sysfs (a container
 * without /sys) there is one node, 0, and no thread is bound. */
#include "os/topology.h"

#include <string.h>

#include "os/os.h"
#include "types.h"

static int nnodes = 1, node_limit = 1;
static uint64_t online = 1, with_memory = 1, allowed = 1;
static int home[TOPO_MAX_NODES];      /* node whose memory serves a CPU of this node */
static uint64_t node_cpus[TOPO_MAX_NODES][TOPO_MAX_CPUS / 64];

/* Parses a sysfs list such as "0-3,8,10-11" into a bitmap of `max` bits;
 * returns the highest listed index, or -1 for an empty or malformed list. */
static int parse_list(const char *s, uint64_t *bits, int max) {
  int hi = -1;
  while (*s && *s != '\n') {
    int a = 0, b;
    if (*s < '0' || *s > '9') return hi;
    while (*s >= '0' && *s <= '9') a = a * 10 + (*s++ - '0');
    b = a;
    if (*s == '-') {
      s++;
      b = 0;
      while (*s >= '0' && *s <= '9') b = b * 10 + (*s++ - '0');
    }
    for (int i = a; i <= b && i < max; i++) {
      if (bits) bits[i / 64] |= 1ull << (i % 64);
      if (i > hi) hi = i;
    }
    if (*s == ',') s++;
  }
  return hi;
}

static bool read_mask(const char *path, uint64_t *mask) {
  char buf[1024];
  uint64_t m = 0;
  if (os_read_file(path, buf, sizeof buf) <= 0 || parse_list(buf, &m, TOPO_MAX_NODES) < 0) return false;
  *mask = m;
  return true;
}

static inline bool has(uint64_t mask, int n) { return n >= 0 && n < TOPO_MAX_NODES && (mask >> n & 1); }

/* For a node without memory, the nearest node with memory (sysfs distances
 * list one value per online node, in node order). */
static int nearest_memory_node(int n) {
  char path[96], buf[1024];
  fmt_buf(path, sizeof path, "/sys/devices/system/node/node%d/distance", n);
  if (os_read_file(path, buf, sizeof buf) <= 0) return -1;
  const char *s = buf;
  int best = -1, best_d = 0;
  for (int m = 0; m < TOPO_MAX_NODES && *s; m++) {
    if (!has(online, m)) continue;
    while (*s == ' ') s++;
    int d = 0;
    while (*s >= '0' && *s <= '9') d = d * 10 + (*s++ - '0');
    if (has(with_memory & allowed, m) && (best < 0 || d < best_d)) best = m, best_d = d;
  }
  return best;
}

void topology_init(void) {
  if (!read_mask("/sys/devices/system/node/online", &online)) return;   /* one node */
  if (!read_mask("/sys/devices/system/node/has_memory", &with_memory)) with_memory = online;
  uint64_t mems;
  allowed = online & with_memory;
  if (os_allowed_nodes(&mems) && (allowed & mems)) allowed &= mems;
  if (!allowed) allowed = online;    /* never no node at all */
  nnodes = __builtin_popcountll(online);
  node_limit = 64 - __builtin_clzll(online);
  for (int n = 0; n < node_limit; n++) {
    if (!has(online, n)) continue;
    char path[96], buf[4096];
    fmt_buf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", n);
    if (os_read_file(path, buf, sizeof buf) > 0) parse_list(buf, node_cpus[n], TOPO_MAX_CPUS);
    home[n] = has(allowed, n) ? n : nearest_memory_node(n);
  }
}

int topology_nodes(void) { return nnodes; }
int topology_node_limit(void) { return node_limit; }
bool topology_node_allowed(int node) { return has(allowed, node); }
uint64_t topology_allowed_mask(void) { return allowed; }
int topology_allowed_count(void) { return __builtin_popcountll(allowed); }

int topology_thread_node(void) {
  uint64_t set[TOPO_MAX_CPUS / 64];
  int words = os_thread_cpus(set, TOPO_MAX_CPUS / 64);
  if (words <= 0) return -1;
  if (nnodes == 1) return __builtin_ctzll(allowed);
  int found = -1;
  for (int w = 0; w < words; w++) {
    for (uint64_t bits = set[w]; bits; bits &= bits - 1) {
      int cpu = w * 64 + __builtin_ctzll(bits);
      int node = -1;
      for (int n = 0; n < node_limit; n++)
        if (has(online, n) && (node_cpus[n][cpu / 64] >> (cpu % 64) & 1)) { node = n; break; }
      if (node < 0 || (found >= 0 && node != found)) return -1;   /* spans nodes: untrusted */
      found = node;
    }
  }
  return found < 0 ? -1 : home[found];
}

int topology_cpu_node(int cpu) {
  if (cpu < 0 || cpu >= TOPO_MAX_CPUS) return -1;
  if (nnodes == 1) return __builtin_ctzll(allowed);
  for (int n = 0; n < node_limit; n++)
    if (has(online, n) && (node_cpus[n][cpu / 64] >> (cpu % 64) & 1)) return home[n];
  return -1;
}
