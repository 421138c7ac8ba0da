/* NUMA topology from sysfs, read with raw file I/O so that discovery never
 * calls malloc (the thesis hit infinite recursion through hwloc/libnuma at
 * this point: Valat, PhD thesis, 2014, §4.11). */
#include <string.h>

#include "numa/topology.h"

#include "os/os.h"
#include "types.h"

#define MAX_NODES 64
#define MAX_CPUS 1024
static int nnodes = 1;
static uint64_t node_cpus[MAX_NODES][MAX_CPUS / 64];

/* Parses a sysfs list such as "0-3,8,10-11" into a bitmap; returns the highest
 * listed index or -1. */
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

void topology_init(void) {
  char buf[4096];
  if (os_read_file("/sys/devices/system/node/possible", buf, sizeof buf) <= 0) return;
  int hi = parse_list(buf, NULL, MAX_NODES);
  nnodes = hi < 0 ? 1 : hi + 1;
  for (int n = 0; n < nnodes; n++) {
    char path[96];
    fmt_buf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", n);
    if (os_read_file(path, buf, sizeof buf) > 0) parse_list(buf, node_cpus[n], MAX_CPUS);
  }
}

int topology_nodes(void) { return nnodes; }

int topology_thread_node(void) {
  uint64_t set[MAX_CPUS / 64];
  int words = os_thread_cpus(set, MAX_CPUS / 64);
  if (words < 0) return -1;
  int found = -1;
  for (int cpu = 0; cpu < words * 64; cpu++) {
    if (!(set[cpu / 64] >> (cpu % 64) & 1)) continue;
    int node = -1;
    for (int n = 0; n < nnodes; n++)
      if (node_cpus[n][cpu / 64] >> (cpu % 64) & 1) { node = n; break; }
    if (node < 0 || (found >= 0 && node != found)) return -1;   /* spans nodes: untrusted */
    found = node;
  }
  return found;
}
