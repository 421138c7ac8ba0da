/* A heap over an MPI shared-memory window (docs/heaps.md), run with
 * mpirun -np 4: each rank creates a heap over its own part of an
 * MPI_Win_allocate_shared window and builds a linked list in it; every
 * other rank walks that list through MPI_Win_shared_query. The window is
 * mapped at a different address in each process, so the links are offsets
 * from the start of the owner's segment, not pointers. Each rank manages
 * only its own part: a heap is never shared between processes. */
#include <locus.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #c); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define PART ((size_t)32 << 20)       /* each rank's segment */
#define NODES 1000

/* At the start of each rank's part; the mappings of the window differ from
 * process to process, so the segment's offset is written down too. */
struct header { int64_t segment; int64_t head; int64_t count; int64_t sum; };
struct node { int64_t next; int64_t value; int64_t payload; int64_t size; };   /* offsets, not pointers */

/* The segment after the header, aligned on 64 KiB: a multiple of the page
 * size wherever locus runs (aarch64 kernels may have 64 KiB pages). */
#define ALIGN ((size_t)64 << 10)
static char *segment_of(char *base) {
  return (char *)(((uintptr_t)base + sizeof(struct header) + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm shm;                       /* the ranks that can share memory (all of them on one machine) */
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shm);
  int rank, nranks;
  MPI_Comm_rank(shm, &rank);
  MPI_Comm_size(shm, &nranks);

  /* A bit more than the segment: room for the header and to align inside. */
  char *base;
  MPI_Win win;
  MPI_Win_allocate_shared((MPI_Aint)(PART + 2 * ALIGN), 1, MPI_INFO_NULL, shm, &base, &win);
  struct header *hdr = (struct header *)base;
  char *seg = segment_of(base);

  locus_heap_config_t cfg = LOCUS_HEAP_CONFIG_INIT;
  cfg.segment = seg;                  /* aligned, >= 1 MiB */
  cfg.segment_size = PART;
  char name[32];
  snprintf(name, sizeof name, "window rank %d", rank);
  cfg.name = name;
  locus_heap_t *h = locus_heap_create(&cfg);
  CHECK(h);

  MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
  /* Build: a list of NODES nodes, each with a payload: small, medium, one large. */
  int64_t head = -1, sum = 0;
  for (int i = 0; i < NODES; i++) {
    struct node *n = locus_heap_malloc(h, sizeof *n);
    size_t size = i == 0 ? (size_t)3 << 20 : i % 100 == 1 ? 200000 : 16 + (size_t)(i * 7919 + rank * 104729) % 8000;
    unsigned char *p = locus_heap_malloc(h, size);
    CHECK(n && p);
    for (size_t k = 0; k < size; k++) p[k] = (unsigned char)(rank + i + k);
    n->value = rank * 100000 + i;
    n->payload = (char *)p - seg;
    n->size = (int64_t)size;
    n->next = head;
    head = (char *)n - seg;
    sum += n->value;
  }
  hdr->segment = seg - base;
  hdr->head = head;
  hdr->count = NODES;
  hdr->sum = sum;
  MPI_Win_sync(win);                  /* our stores visible ... */
  MPI_Barrier(shm);                   /* ... before the others read */
  MPI_Win_sync(win);

  /* Read every other rank's list in place. */
  for (int r = 0; r < nranks; r++) {
    if (r == rank) continue;
    MPI_Aint size;
    int unit;
    char *rbase;
    MPI_Win_shared_query(win, r, &size, &unit, &rbase);
    const struct header *rh = (const struct header *)rbase;
    const char *rseg = rbase + rh->segment;
    int64_t count = 0, rsum = 0;
    for (int64_t off = rh->head; off >= 0; count++) {
      const struct node *n = (const struct node *)(rseg + off);
      int i = (int)(n->value - r * 100000);
      const unsigned char *p = (const unsigned char *)rseg + n->payload;
      for (int64_t k = 0; k < n->size; k++) CHECK(p[k] == (unsigned char)(r + i + k));
      rsum += n->value;
      off = n->next;
    }
    CHECK(count == rh->count && rsum == rh->sum);
  }
  MPI_Barrier(shm);                   /* nobody reads our list any more */

  /* Our own blocks are ordinary blocks: free and realloc work. */
  struct node *first = (struct node *)(seg + head);
  char *grown = realloc(seg + first->payload, 100000);
  CHECK(locus_heap_of(grown) == h && grown >= seg && grown + 100000 <= seg + PART);
  free(grown);
  locus_stats_t st;
  CHECK(locus_heap_stats(h, &st) == 0 && st.bytes_in_use <= PART);
  MPI_Win_unlock_all(win);

  locus_heap_destroy(h);              /* before the window goes */
  MPI_Win_free(&win);
  if (rank == 0) printf("%d ranks: each read the others' %d-node lists in their window segments\n", nranks, NODES);
  MPI_Comm_free(&shm);
  MPI_Finalize();
  return 0;
}
