/* A heap over a memfd segment (docs/heaps.md): memory the program maps
 * itself (here shared, MAP_SHARED of a memfd) and gives to a heap. Every
 * block lies in the segment, is seen through a second mapping of the same
 * file, and free(), realloc() and calloc() work on it; calloc clears a
 * recycled block with stores (dropping the pages of a shared mapping would
 * not clear them). At exhaustion the heap says ENOMEM; destroy leaves the
 * segment to its owner. */
#define _GNU_SOURCE
#include <errno.h>
#include <locus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)
#define SEG ((size_t)64 << 20)

static int inside(const char *seg, const void *p, size_t n) {
  return (const char *)p >= seg && (const char *)p + n <= seg + SEG;
}

int main(void) {
  int fd = memfd_create("locus-heap", MFD_CLOEXEC);
  CHECK(fd >= 0 && ftruncate(fd, SEG) == 0);
  char *seg = mmap(NULL, SEG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  char *view = mmap(NULL, SEG, PROT_READ, MAP_SHARED, fd, 0);   /* the same pages, elsewhere */
  CHECK(seg != MAP_FAILED && view != MAP_FAILED);

  locus_heap_config_t cfg = LOCUS_HEAP_CONFIG_INIT;
  cfg.segment = seg;                  /* page-aligned, at least 1 MiB, not from malloc */
  cfg.segment_size = SEG;
  cfg.name = "memfd";
  locus_heap_t *h = locus_heap_create(&cfg);
  CHECK(h);

  char *s = locus_heap_malloc(h, 100), *m = locus_heap_malloc(h, 300000), *l = locus_heap_malloc(h, 3 << 20);
  CHECK(inside(seg, s, 100) && inside(seg, m, 300000) && inside(seg, l, 3 << 20));
  CHECK(locus_heap_of(s) == h && locus_heap_of(m) == h && locus_heap_of(l) == h);
  strcpy(s, "written through the heap");
  CHECK(strcmp(view + (s - seg), "written through the heap") == 0);

  /* calloc of recycled memory: zero, and its neighbours untouched */
  memset(m, 0xab, 300000);
  memset(l, 0xcd, 3 << 20);
  free(m);
  free(l);
  char *z = locus_heap_calloc(h, 300000, 1), *zl = locus_heap_calloc(h, 3 << 20, 1);
  CHECK(inside(seg, z, 300000) && inside(seg, zl, 3 << 20));
  for (size_t i = 0; i < 300000; i++) CHECK(z[i] == 0 && view[z - seg + i] == 0);
  for (size_t i = 0; i < (3 << 20); i++) CHECK(zl[i] == 0);
  CHECK(strcmp(s, "written through the heap") == 0);

  char *r = realloc(s, 50000);        /* stays in the heap */
  CHECK(locus_heap_of(r) == h && strcmp(r, "written through the heap") == 0);

  /* fill it: every block inside, then ENOMEM */
  size_t n = 0;
  for (;;) {
    size_t size = n % 4 == 3 ? 1 << 20 : 64 + n % 5000;
    char *p = locus_heap_malloc(h, size);
    if (!p) {
      CHECK(errno == ENOMEM);
      break;
    }
    CHECK(inside(seg, p, size));
    p[0] = p[size - 1] = 1;
    n++;
  }
  locus_stats_t st;
  CHECK(locus_heap_stats(h, &st) == 0 && st.bytes_in_use <= SEG);
  printf("memfd segment: %zu blocks until ENOMEM, %llu of %zu bytes held\n", n,
         (unsigned long long)st.bytes_in_use, SEG);

  locus_heap_destroy(h);              /* the segment is still mapped: it is ours */
  munmap(view, SEG);
  munmap(seg, SEG);
  close(fd);
  return 0;
}
