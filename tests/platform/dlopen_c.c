/* dlopen_c LIB: load locus at run time, like a plugin host would.
 *
 * This program is NOT linked with locus (it uses glibc's malloc itself). It
 * dlopens LIB with RTLD_NOW | RTLD_LOCAL, looks up locus_malloc, locus_free,
 * locus_usable_size and locus_version, and from the main thread and 4 more
 * threads allocates blocks of 16 B to 64 MiB, writes a word at the start and
 * at the end of each, checks every word once all blocks of the round exist
 * (blocks must not overlap), frees them, joins the threads and dlcloses.
 * Then it does it all a second time (a plugin loaded again).
 *
 * Prints "dlopen_c: ok" and exits 0 on success; exits 1 with a message on
 * failure.
 *
 * dlopen_c LIB --thread-across-dlclose: a thread allocates through LIB, the
 * main thread dlcloses LIB while that thread still runs, then the thread
 * exits. Not registered with ctest: with locus 0.2.0 the thread dies of
 * SIGSEGV on exit, in glibc's __nptl_deallocate_tsd calling locus's
 * pthread key destructor (heap_abandon, src/heap/heap.c), which dlclose has
 * unmapped (see docs/testing.md, platform tests). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);
typedef size_t (*usable_fn)(const void *);
typedef const char *(*version_fn)(void);

static malloc_fn l_malloc;
static free_fn l_free;
static usable_fn l_usable;
static version_fn l_version;

#define NTHREADS 4
#define ROUNDS 3

static void die(const char *fmt, const char *a) {
  fprintf(stderr, "dlopen_c: FAIL: ");
  fprintf(stderr, fmt, a);
  fputc('\n', stderr);
  exit(1);
}

/* Sizes from 16 B to 64 MiB: powers of two and their neighbours, plus odd ones. */
static size_t sizes[128];
static int nsizes;
static void make_sizes(void) {
  for (size_t s = 16; s <= ((size_t)64 << 20); s *= 2) {
    sizes[nsizes++] = s;
    if (s < ((size_t)64 << 20)) {
      sizes[nsizes++] = s + s / 2 + 8;
      sizes[nsizes++] = s + 1 < 24 ? 24 : s + 1;
    }
  }
}

static int check_round(int tag) {
  void *blocks[128];
  int bad = 0;
  for (int i = 0; i < nsizes; i++) {
    size_t n = sizes[i];
    unsigned char *p = l_malloc(n);
    if (!p) {
      fprintf(stderr, "dlopen_c: locus_malloc(%zu) returned NULL\n", n);
      bad++;
      blocks[i] = NULL;
      continue;
    }
    size_t u = l_usable(p);
    if (u < n) {
      fprintf(stderr, "dlopen_c: locus_usable_size = %zu < %zu\n", u, n);
      bad++;
    }
    uint64_t head = ((uint64_t)tag << 32) ^ (uint64_t)i, tail = ~head;
    memcpy(p, &head, 8);
    memcpy(p + n - 8, &tail, 8);
    blocks[i] = p;
  }
  for (int i = 0; i < nsizes; i++) {
    unsigned char *p = blocks[i];
    if (!p) continue;
    size_t n = sizes[i];
    uint64_t head, tail, want = ((uint64_t)tag << 32) ^ (uint64_t)i;
    memcpy(&head, p, 8);
    memcpy(&tail, p + n - 8, 8);
    if (head != want || tail != ~want) {
      fprintf(stderr, "dlopen_c: block of %zu bytes at %p was overwritten\n", n, (void *)p);
      bad++;
    }
    l_free(p);
  }
  return bad;
}

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  intptr_t bad = 0;
  for (int r = 0; r < ROUNDS; r++) bad += check_round(id * 100 + r);
  return (void *)bad;
}

/* Is a file whose path contains `name` mapped into this process? */
static int mapped(const char *name) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[4096];
  int found = 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, name)) found = 1;
  fclose(f);
  return found;
}

static void *sym(void *h, const char *name) {
  dlerror();
  void *p = dlsym(h, name);
  if (!p) die("dlsym(%s) failed", name);
  return p;
}

static void cycle(const char *lib, const char *base, int pass) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) die("dlopen failed: %s", dlerror());
  if (mapped(base) != 1) die("%s is not mapped after dlopen", base);
  l_malloc = (malloc_fn)sym(h, "locus_malloc");
  l_free = (free_fn)sym(h, "locus_free");
  l_usable = (usable_fn)sym(h, "locus_usable_size");
  l_version = (version_fn)sym(h, "locus_version");
  const char *v = l_version();
  unsigned a, b, c;
  if (!v || sscanf(v, "%u.%u.%u", &a, &b, &c) != 3) die("locus_version() = '%s' is not X.Y.Z", v ? v : "(null)");
  printf("dlopen_c: pass %d: loaded %s (locus %s)\n", pass, lib, v);

  intptr_t bad = check_round(99 + pass);
  pthread_t t[NTHREADS];
  for (int i = 0; i < NTHREADS; i++)
    if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)(i + 1)) != 0) die("%s", "pthread_create failed");
  for (int i = 0; i < NTHREADS; i++) {
    void *r;
    pthread_join(t[i], &r);
    bad += (intptr_t)r;
  }
  if (bad) {
    fprintf(stderr, "dlopen_c: FAIL: %ld bad blocks\n", (long)bad);
    exit(1);
  }
  printf("dlopen_c: pass %d: %d sizes (16 B .. 64 MiB) x %d rounds x %d threads + main: ok\n", pass, nsizes,
         ROUNDS, NTHREADS);
  l_malloc = NULL;
  l_free = NULL;
  l_usable = NULL;
  l_version = NULL;
  if (dlclose(h) != 0) die("dlclose failed: %s", dlerror());
  int still = mapped(base);
  printf("dlopen_c: pass %d: after dlclose the library is %s\n", pass,
         still ? "still mapped (not unloaded)" : "unmapped");
}

/* --thread-across-dlclose */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stage;
static void *straddler(void *arg) {
  void *p = l_malloc(100);
  l_free(p);
  pthread_mutex_lock(&mu);
  stage = 1;
  pthread_cond_broadcast(&cv);
  while (stage < 2) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  return arg; /* the thread's TSD destructors run after this */
}

static int thread_across_dlclose(const char *lib) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) die("dlopen failed: %s", dlerror());
  l_malloc = (malloc_fn)sym(h, "locus_malloc");
  l_free = (free_fn)sym(h, "locus_free");
  pthread_t t;
  if (pthread_create(&t, NULL, straddler, NULL) != 0) die("%s", "pthread_create failed");
  pthread_mutex_lock(&mu);
  while (stage < 1) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  if (dlclose(h) != 0) die("dlclose failed: %s", dlerror());
  printf("dlopen_c: dlclosed while a thread that allocated is alive; the thread exits now\n");
  fflush(stdout);
  pthread_mutex_lock(&mu);
  stage = 2;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  pthread_join(t, NULL);
  printf("dlopen_c: ok\n");
  return 0;
}

static void *idle(void *arg) {
  void *p = malloc(100); /* glibc's: the program's own allocator */
  free(p);
  return arg;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[2], "--thread-across-dlclose")) return thread_across_dlclose(argv[1]);
  if (argc != 2) {
    fprintf(stderr, "usage: dlopen_c LIBRARY [--thread-across-dlclose]\n");
    return 2;
  }
  const char *lib = argv[1];
  const char *base = strrchr(lib, '/') ? strrchr(lib, '/') + 1 : lib;
  if (mapped(base) != 0) die("%s is mapped before dlopen: this program must not be linked with locus", base);
  make_sizes();
  cycle(lib, base, 1);
  cycle(lib, base, 2);
  /* A thread started after the last dlclose must start and exit cleanly. */
  pthread_t t;
  if (pthread_create(&t, NULL, idle, NULL) != 0 || pthread_join(t, NULL) != 0) die("%s", "thread after dlclose");
  printf("dlopen_c: ok\n");
  return 0;
}
