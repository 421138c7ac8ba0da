/* Platform pieces through the internal interface: the allocation-free
 * formatter, out-of-memory paths of heap records and registry leaves (the OS
 * layer's failure injection), the options table and its API, the heap
 * validator, and the kernel-feature record in the JSON statistics. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "heap/heap.h"
#include "locus.h"
#include "os/os.h"
#include "registry/registry.h"
#include "config/options.h"

/* ---- formatter ------------------------------------------------------------- */
static void same(const char *fmt, ...) {
  char want[256], got[256];
  va_list ap, aq;
  va_start(ap, fmt);
  va_copy(aq, ap);
  int n = vsnprintf(want, sizeof want, fmt, ap);
  size_t m = fmt_vbuf(got, sizeof got, fmt, aq);
  va_end(aq);
  va_end(ap);
  CHECK((size_t)n == m && !strcmp(want, got), "fmt \"%s\": libc \"%s\" (%d), locus \"%s\" (%zu)", fmt, want, n,
        got, m);
}

static void test_fmt(void) {
  same("%d %d %d", 0, -1, INT_MIN);
  same("%u %u", 0u, UINT_MAX);
  same("%x %x", 0xdeadbeefu, 0u);
  same("%ld %ld %lu %lx", LONG_MIN, LONG_MAX, ULONG_MAX, 0xfeedfacecafeul);
  same("%zu %zu", (size_t)0, SIZE_MAX);
  same("%s|%c|%%", "text", 'z');
  /* Past six integer arguments they travel on the stack, 8 bytes each: a
   * %u read as unsigned long would pick up whatever the upper half holds. */
  same("%d %d %d %d %d %d %u %u %d %u", 1, 2, 3, 4, 5, 6, 4000000000u, 7u, -8, UINT_MAX);
  same("%p", (void *)0x1234);
  char small[8];
  size_t n = fmt_buf(small, sizeof small, "%s", "0123456789");
  CHECK(n == 10 && !strcmp(small, "0123456"), "truncation: %zu \"%s\"", n, small);
}

/* ---- out of memory ----------------------------------------------------------- */
enum { NTHREADS = 160 };
static pthread_barrier_t started, injected, done_first, cleared;
static int first_errno[NTHREADS];
static void *first_ptr[NTHREADS], *second_ptr[NTHREADS];

static void *oom_thread(void *arg) {
  long i = (long)arg;
  pthread_barrier_wait(&started);
  pthread_barrier_wait(&injected);     /* every map now fails */
  errno = 0;
  first_ptr[i] = malloc(64);
  first_errno[i] = errno;
  pthread_barrier_wait(&done_first);
  pthread_barrier_wait(&cleared);      /* maps work again */
  second_ptr[i] = malloc(64);
  free(first_ptr[i]);
  free(second_ptr[i]);
  return NULL;
}

/* Threads whose heap cannot be made get NULL and ENOMEM, not an abort; once
 * the OS gives memory again, the same threads allocate normally. 160 live
 * threads exhaust the heap-record arena (64 records per mapping). */
static void test_heap_record_oom(void) {
  pthread_t t[NTHREADS];
  pthread_barrier_init(&started, NULL, NTHREADS + 1);
  pthread_barrier_init(&injected, NULL, NTHREADS + 1);
  pthread_barrier_init(&done_first, NULL, NTHREADS + 1);
  pthread_barrier_init(&cleared, NULL, NTHREADS + 1);
  for (long i = 0; i < NTHREADS; i++) CHECK(pthread_create(&t[i], NULL, oom_thread, (void *)i) == 0, "thread %ld", i);
  pthread_barrier_wait(&started);
  os_inject_map_failures(1 << 30);
  pthread_barrier_wait(&injected);
  pthread_barrier_wait(&done_first);   /* every thread has tried once */
  os_inject_map_failures(0);
  pthread_barrier_wait(&cleared);
  for (long i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  int failed = 0;
  for (int i = 0; i < NTHREADS; i++) {
    CHECK(first_ptr[i] || first_errno[i] == ENOMEM, "thread %d: NULL with errno %d", i, first_errno[i]);
    failed += !first_ptr[i];
    CHECK(second_ptr[i], "thread %d: malloc failed after memory came back", i);
  }
  CHECK(failed > 0, "no thread saw the injected failure");
  pthread_barrier_destroy(&started);
  pthread_barrier_destroy(&injected);
  pthread_barrier_destroy(&done_first);
  pthread_barrier_destroy(&cleared);
  printf("heap records: %d of %d threads got ENOMEM while the OS refused memory\n", failed, NTHREADS);
}

static pthread_barrier_t second_round;
static void *retry_thread(void *arg) {
  void **out = arg;
  *out = malloc(64);
  free(*out);
  pthread_barrier_wait(&second_round);
  return NULL;
}

static void test_recovers(void) {
  void *got[8];
  pthread_t t[8];
  pthread_barrier_init(&second_round, NULL, 9);
  for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, retry_thread, &got[i]);
  pthread_barrier_wait(&second_round);
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 8; i++) CHECK(got[i], "thread %d: malloc failed after memory came back", i);
  pthread_barrier_destroy(&second_round);
}

/* A region in a part of the address space whose registry leaf does not exist
 * yet: with the OS refusing memory, registry_add fails and records nothing. */
static void test_registry_leaf_oom(void) {
  size_t size = 2 * SLICE_SIZE;
  char *p = NULL;
  for (uintptr_t hint = (uintptr_t)1 << 44; hint < (uintptr_t)1 << 46; hint += (uintptr_t)1 << 40) {
    p = mmap((void *)hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED, "mmap");
    uintptr_t s = (uintptr_t)p >> SLICE_SHIFT;
    if (!atomic_load(&registry_l1[s >> REG_L2_BITS]) &&
        !atomic_load(&registry_l1[(s + 2) >> REG_L2_BITS]))
      break;
    munmap(p, size);
    p = NULL;
  }
  if (!p) {
    printf("registry leaf: no address range without a leaf found; check skipped\n");
    return;
  }
  region_t *r = (region_t *)p;
  memset(r, 0, sizeof *r);
  r->size = size;
  r->kind = REGION_LARGE;
  os_inject_map_failures(1);
  CHECK(!registry_add(r), "registry_add succeeded without memory for its leaf");
  os_inject_map_failures(0);
  CHECK(registry_lookup(p + 100) == NULL, "a failed add left an entry");
  CHECK(registry_add(r) && registry_lookup(p + 100) == r, "registry_add once memory is back");
  registry_remove(r);
  munmap(p, size);

  /* And through malloc: a large block whose registry leaf cannot be made is
   * refused with ENOMEM, and the allocator still works afterwards. */
  os_inject_map_failures(1 << 30);
  errno = 0;
  void *big = malloc(64 << 20);
  int e = errno;
  os_inject_map_failures(0);
  if (big) free(big);                  /* a cached segment may serve it without any map */
  else CHECK(e == ENOMEM, "large malloc under refusal: errno %d", e);
  big = malloc(64 << 20);
  CHECK(big, "large malloc after refusal");
  free(big);
}

/* ---- options ------------------------------------------------------------------- */
static void test_options(void) {
  char v[64];
  CHECK(locus_option_get("cache_max", v, sizeof v) == 4 && !strcmp(v, "500M"), "cache_max default: %s", v);
  CHECK(locus_option_get("LOCUS_LARGE_THRESHOLD", v, sizeof v) > 0 && !strcmp(v, "1M"), "by variable: %s", v);
  CHECK(locus_option_get("nope", v, sizeof v) == -1 && errno == EINVAL, "unknown name");
  CHECK(locus_option_get("profile", NULL, 0) == 4, "length only (\"auto\")");
  errno = 0;
  CHECK(locus_option_set("cache_max", "abc") == -1 && errno == EINVAL, "malformed size");
  CHECK(locus_option_set("cache_max", "1P") == -1 && errno == EINVAL, "unknown suffix");
  CHECK(locus_option_set("large_threshold", "2M") == -1 && errno == EBUSY, "start-up only");
  CHECK(locus_option_set("color", "maybe") == -1 && errno == EINVAL, "bad boolean");
  CHECK(locus_option_set("profile", NULL) == -1 && errno == EINVAL, "NULL value");
  CHECK(locus_option_get("cache_max", v, sizeof v) > 0 && !strcmp(v, "500M"), "unchanged after errors: %s", v);
  CHECK(locus_option_set("LOCUS_CACHE_MAX", "1T") == 0 && locus_option_get("cache_max", v, sizeof v) > 0 &&
            !strcmp(v, "1T"), "T suffix: %s", v);

  /* A smaller bound releases the excess at once; eco keeps nothing. */
  CHECK(locus_set_profile("uma") == 0 && locus_option_set("cache_max", "256M") == 0, "uma, 256M");
  void *a = malloc(32 << 20), *b = malloc(32 << 20);
  free(a);
  free(b);
  CHECK(locus_cached_bytes() >= 64 << 20, "uma caches freed large blocks: %zu", locus_cached_bytes());
  CHECK(locus_option_set("cache_max", "16M") == 0 && locus_cached_bytes() <= 16 << 20, "trimmed to the new bound: %zu",
        locus_cached_bytes());
  CHECK(locus_option_set("profile", "eco") == 0 && locus_cached_bytes() == 0, "eco keeps nothing: %zu",
        locus_cached_bytes());
  a = malloc(32 << 20);
  free(a);
  CHECK(locus_cached_bytes() == 0, "eco caches nothing, even with LOCUS_CACHE_MAX set: %zu", locus_cached_bytes());
  CHECK(locus_option_set("cache_max", "500M") == 0 && locus_set_profile("auto") == 0, "restore the default");

  /* The table documents every option it parses. */
  size_t n = 0;
  for (const option_info_t *o; (o = options_info(n)); n++)
    CHECK(o->name && !strncmp(o->env, "LOCUS_", 6) && o->def && o->range && o->doc && *o->doc, "option %zu", n);
  CHECK(n >= 9, "%zu options", n);
}

/* ---- validator ------------------------------------------------------------------- */
static void test_heap_check(void) {
  void *p[4000];
  for (int i = 0; i < 4000; i++) p[i] = malloc((size_t)(i * 37) % 20000 + 1);
  for (int i = 0; i < 4000; i += 3) free(p[i]);
  CHECK(locus_heap_check() == 0, "check of a sound heap");
  for (int i = 1; i < 4000; i++)
    if (i % 3) free(p[i]);
  CHECK(locus_heap_check() == 0, "check after freeing everything");

  /* A write after free into a small block must be reported by the check. */
  int fds[2];
  CHECK(pipe(fds) == 0, "pipe");
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    long *q = malloc(48);
    long *keep = malloc(48);           /* keeps the run current and alive */
    free(q);
    q[1] = 42;                         /* clobbers the freed tag */
    locus_heap_check();
    (void)keep;
    _exit(0);                          /* not reached when the check works */
  }
  close(fds[1]);
  char out[512] = {0};
  ssize_t got = read(fds[0], out, sizeof out - 1);
  (void)got;
  close(fds[0]);
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "corrupted heap not caught (status %d)", st);
  CHECK(strstr(out, "heap check:") && strstr(out, "lost its freed tag"), "message: %s", out);
}

/* ---- feature record ------------------------------------------------------------ */
static void test_features(void) {
  char json[8192];
  size_t n = locus_stats_json(json, sizeof json);
  CHECK(n < sizeof json, "json fits");
  CHECK(strstr(json, "\"features\":{\"kernel\":\"") && strstr(json, "\"thp\":\"") &&
            strstr(json, "\"madv_free\":") && strstr(json, "\"page_reuse\":false") && strstr(json, "\"options\":{"),
        "features in JSON: %s", json);
  CHECK(os_features.page_size == (size_t)sysconf(_SC_PAGESIZE), "page size %zu", os_features.page_size);
  CHECK(os_features.madv_free, "MADV_FREE on Linux >= 4.5");
  CHECK(!os_features.secure, "not in secure-execution mode");
}

int main(void) {
  free(malloc(1));                     /* main thread's heap exists before the OOM tests */
  test_fmt();
  test_options();
  test_heap_check();
  test_features();
  test_registry_leaf_oom();
  test_heap_record_oom();
  test_recovers();
  return TEST_DONE();
}
