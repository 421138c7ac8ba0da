/* A heap over huge pages (docs/heaps.md): a MAP_HUGETLB segment, which the
 * kernel can give only from the huge pages reserved beforehand
 * (/proc/sys/vm/nr_hugepages); without them the test skips (exit 77). The
 * heap cuts blocks from the segment and never advises or unmaps it; calloc
 * of recycled blocks returns zeros, written with stores. */
#define _GNU_SOURCE
#include <errno.h>
#include <locus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)
#define SEG ((size_t)16 << 20)        /* 8 huge pages of 2 MiB */

int main(void) {
  char *seg = mmap(NULL, SEG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
  if (seg == MAP_FAILED) {
    printf("skip: no 16 MiB of huge pages (mmap MAP_HUGETLB: %s); reserve them with\n"
           "      echo 8 > /proc/sys/vm/nr_hugepages\n", strerror(errno));
    return 77;
  }
  locus_heap_config_t cfg = LOCUS_HEAP_CONFIG_INIT;
  cfg.segment = seg;
  cfg.segment_size = SEG;
  cfg.name = "hugetlb";
  locus_heap_t *h = locus_heap_create(&cfg);
  CHECK(h);

  char *blocks[64];
  size_t sizes[64];
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 64; i++) {    /* small, medium and large blocks, dirtied */
      sizes[i] = i % 3 == 0 ? 48 : i % 3 == 1 ? 20000 : 150000;
      blocks[i] = locus_heap_calloc(h, sizes[i], 1);
      CHECK(blocks[i] && blocks[i] >= seg && blocks[i] + sizes[i] <= seg + SEG);
      for (size_t k = 0; k < sizes[i]; k++) CHECK(blocks[i][k] == 0);
      memset(blocks[i], 0xee, sizes[i]);
    }
    for (int i = 0; i < 64; i += 2) free(blocks[i]);
    for (int i = 1; i < 64; i += 2) {
      for (size_t k = 0; k < sizes[i]; k++) CHECK((unsigned char)blocks[i][k] == 0xee);
      free(blocks[i]);
    }
  }
  char *big = locus_heap_calloc(h, (size_t)5 << 20, 1);
  CHECK(big && big >= seg && big + ((size_t)5 << 20) <= seg + SEG);
  for (size_t k = 0; k < (size_t)5 << 20; k++) CHECK(big[k] == 0);
  free(big);
  printf("hugetlb segment: 3 rounds of 64 blocks and one 5 MiB block, every calloc zero\n");
  locus_heap_destroy(h);
  munmap(seg, SEG);
  return 0;
}
