/* NUMA topology, read from sysfs without allocating. */
#ifndef LOCUS_TOPOLOGY_H
#define LOCUS_TOPOLOGY_H

void topology_init(void);
int topology_nodes(void);
/* The node all of the calling thread's allowed CPUs belong to, or -1. */
int topology_thread_node(void);

#endif /* LOCUS_TOPOLOGY_H */
