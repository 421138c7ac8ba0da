/* NUMA topology, read from sysfs without allocating (discovery runs inside
 * the first malloc). Nodes keep the kernel's numbers, gaps included. */
#ifndef LOCUS_TOPOLOGY_H
#define LOCUS_TOPOLOGY_H

#include <stdbool.h>
#include <stdint.h>

#define TOPO_MAX_NODES 64             /* node ids 0..63: one 64-bit mask */
#define TOPO_MAX_CPUS 4096

void topology_init(void);
/* Nodes present (online); 1 without sysfs. */
int topology_nodes(void);
/* Highest node id + 1: the size of arrays indexed by node. */
int topology_node_limit(void);
/* A node memory may be asked from: online, with memory, allowed by the
 * process's cpuset. */
bool topology_node_allowed(int node);
uint64_t topology_allowed_mask(void);
int topology_allowed_count(void);
/* The node whose memory serves the calling thread (the thesis's trust levels):
 * when every CPU the thread may run on belongs to one node, that node (or,
 * for a node without memory, the nearest one with memory); else -1 (not
 * bound: the generic source). */
int topology_thread_node(void);
/* The node serving a CPU's threads (its node, or the nearest with memory);
 * -1 for a CPU of no online node. */
int topology_cpu_node(int cpu);

#endif /* LOCUS_TOPOLOGY_H */
