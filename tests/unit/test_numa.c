/* The NUMA placement API on this machine (one node or more): explicit
 * placement, interleave, realloc keeping placement, frees from other
 * threads, thread node and rebind, next-touch (fault path, threads, a
 * program's own SIGSEGV handler, cancellation on free) and bad input. Page
 * placement across several nodes is proven in the QEMU guests (tests/numa). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "heap/heap.h"
#include "locus.h"
#include "numa/next_touch.h"

static int place_of(const void *p) {
  region_t *r = registry_lookup(p);
  CHECK(r, "%p not found", p);
  return r->heap->place;
}

static void test_on_node(void) {
  size_t sizes[] = {1, 16, 200, 8192, 9000, 100000, 1 << 20, (1 << 20) + 1, 8 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    char *p = locus_malloc_on_node(sizes[i], 0);
    CHECK(p, "on_node(%zu, 0)", sizes[i]);
    memset(p, 0x5a, sizes[i]);
    CHECK(locus_usable_size(p) >= sizes[i], "usable");
    CHECK(locus_node_of(p) == 0 && locus_node_of(p + sizes[i] - 1) == 0, "node of %zu-byte block", sizes[i]);
    CHECK(place_of(p) == 0, "block of %zu bytes from the node-0 heap (place %d)", sizes[i], place_of(p));
    char *q = realloc(p, sizes[i] * 3 + 100);
    CHECK(q && q[0] == 0x5a && q[sizes[i] - 1] == 0x5a, "realloc keeps data");
    CHECK(place_of(q) == 0, "realloc keeps the placement (%zu bytes)", sizes[i]);
    free(q);
  }
  void *plain = malloc(100);
  CHECK(place_of(plain) == PLACE_MAIN, "plain malloc from the main heap");
  free(plain);
  char *iv = locus_malloc_interleaved(3 << 20);
  CHECK(iv && place_of(iv) == PLACE_INTERLEAVE, "interleaved");
  memset(iv, 1, 3 << 20);
  CHECK(locus_node_of(iv) >= 0, "interleaved page resident");
  free(iv);
  iv = locus_malloc_interleaved(64);
  CHECK(iv && place_of(iv) == PLACE_INTERLEAVE, "small interleaved");
  free(iv);
}

static void test_bad_input(void) {
  errno = 0;
  CHECK(!locus_malloc_on_node(10, -1) && errno == EINVAL, "node -1");
  errno = 0;
  CHECK(!locus_malloc_on_node(10, 64) && errno == EINVAL, "node 64");
  errno = 0;
  CHECK(!locus_malloc_on_node(10, 100000) && errno == EINVAL, "node 100000");
  errno = 0;
  CHECK(!locus_malloc_on_node(SIZE_MAX, 0) && errno == ENOMEM, "size overflow");
  errno = 0;
  CHECK(!locus_malloc_interleaved(SIZE_MAX - 10) && errno == ENOMEM, "interleaved overflow");
  CHECK(locus_node_of(NULL) == -1, "node of NULL");
  char *unmapped = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(locus_node_of(unmapped) == -1, "node of an untouched page");
  munmap(unmapped, 4096);
  int local;
  errno = 0;
  CHECK(locus_next_touch(&local, sizeof local) == -1 && errno == EINVAL, "next_touch on the stack");
  void *small = malloc(64);
  errno = 0;
  CHECK(locus_next_touch(small, 64) == -1 && errno == EINVAL, "next_touch on a small block");
  free(small);
  char *big = malloc(4 << 20);
  errno = 0;
  CHECK(locus_next_touch(big, 0) == -1 && errno == EINVAL, "next_touch of 0 bytes");
  errno = 0;
  CHECK(locus_next_touch(big, (size_t)64 << 20) == -1 && errno == EINVAL, "next_touch past the block");
  errno = 0;
  CHECK(locus_next_touch(big, SIZE_MAX) == -1 && errno == EINVAL, "next_touch length overflow");
  CHECK(locus_next_touch(NULL, 10) == -1 && errno == EINVAL, "next_touch NULL");
  free(big);
}

static void *free_elsewhere(void *arg) {
  void **v = arg;
  for (int i = 0; v[i]; i++) free(v[i]);
  return NULL;
}

/* Placed blocks freed by another thread go back to their placed heap. */
static void test_remote_free(void) {
  void *v[2001];
  for (int i = 0; i < 2000; i++) v[i] = locus_malloc_on_node((size_t)(i % 50) * 300 + 8, 0);
  v[2000] = NULL;
  pthread_t t;
  pthread_create(&t, NULL, free_elsewhere, v);
  pthread_join(t, NULL);
  for (int i = 0; i < 2000; i++) v[i] = locus_malloc_on_node((size_t)(i % 50) * 300 + 8, 0);
  for (int i = 0; i < 2000; i++) free(v[i]);
  CHECK(locus_heap_check() == 0, "heap check");
}

static void test_thread_node(void) {
  int n = locus_thread_node();
  CHECK(n >= -1, "thread node %d", n);
  CHECK(locus_rebind() == n, "rebind without a change keeps the node");
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  CHECK(sched_setaffinity(0, sizeof set, &set) == 0, "bind to CPU 0");
  int m = locus_rebind();
  CHECK(m >= 0 && m == locus_thread_node(), "bound to one CPU: a node (%d)", m);
  void *p = malloc(100);
  CHECK(p, "malloc after rebind");
  free(p);
}

/* ---- next touch ---- */
static volatile sig_atomic_t own_faults;
static char *own_page;
static void own_handler(int sig, siginfo_t *info, void *ctx) {
  if ((char *)info->si_addr == own_page) {
    own_faults++;
    mprotect(own_page, 4096, PROT_READ | PROT_WRITE);
    return;
  }
  _exit(99);
}

typedef struct { char *base; size_t from, to; } span_t;
static void *touch_span(void *arg) {
  span_t *s = arg;
  for (size_t i = s->from; i < s->to; i += 4096) s->base[i] = (char)(s->base[i] + 1);
  return NULL;
}

static void test_next_touch(void) {
  /* A program's own SIGSEGV handler, installed first, still gets its faults. */
  struct sigaction sa = {0};
  sa.sa_sigaction = own_handler;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, NULL);
  own_page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

  size_t len = 24 << 20;
  char *p = malloc(len);
  memset(p, 3, len);
  size_t faults0 = next_touch_faults();
  CHECK(locus_next_touch(p, len) == 0, "next_touch: %s", strerror(errno));
  errno = 0;
  CHECK(locus_next_touch(p + 4096, 100) == -1 && errno == EBUSY, "overlapping range refused");
  own_page[0] = 1;                       /* not ours: chained to the program's handler */
  CHECK(own_faults == 1, "own handler called %d times", (int)own_faults);
  /* Four threads touch four quarters at once. */
  pthread_t t[4];
  span_t s[4];
  for (int i = 0; i < 4; i++) {
    s[i] = (span_t){p, len / 4 * i, len / 4 * (i + 1)};
    pthread_create(&t[i], NULL, touch_span, &s[i]);
  }
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (size_t i = 0; i < len; i += 4096) CHECK(p[i] == 4, "byte %zu after next touch: %d", i, p[i]);
  CHECK(p[1] == 3 && p[len - 1] == 3, "untouched bytes intact");
  size_t faults = next_touch_faults() - faults0;
  CHECK(faults >= 1 && faults <= 64, "one fault per group at most: %zu", faults);
  CHECK(locus_node_of(p) >= 0, "resident after the touch");
  char json[16384];
  locus_stats_json(json, sizeof json);
  CHECK(strstr(json, "\"next_touch_faults\":") && !strstr(json, "\"next_touch_faults\":0,"),
        "next-touch faults reported: %.300s", strstr(json, "next_touch") ? strstr(json, "next_touch") : json);
  free(p);

  /* Freed before being touched: the range is cancelled, the memory reusable. */
  p = malloc(len);
  memset(p, 7, len);
  CHECK(locus_next_touch(p + 100, len / 2) == 0, "second range");
  free(p);
  p = malloc(len);
  memset(p, 9, len);
  CHECK(p[len / 4] == 9, "reused memory accessible");
  CHECK(locus_next_touch(p, len) == 0, "range again on reused memory");
  char *q = realloc(p, 2 * len);         /* resizing cancels too */
  CHECK(q && q[0] == 9 && q[len - 1] == 9, "realloc of a range pending");
  free(q);

  /* A fault that is not ours reaches the program's handler (which exits 99
   * for an address it does not know), after one of ours was handled. */
  pid_t pid = fork();
  if (pid == 0) {
    char *big = malloc(4 << 20);
    if (locus_next_touch(big, 4 << 20) != 0) _exit(2);
    big[10] = 1;                         /* ours: handled */
    volatile uintptr_t bad = 16;
    *(volatile char *)bad = 1;           /* not ours */
    _exit(0);
  }
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 99, "a foreign fault goes to the program's handler (status %d)", st);
}

int main(void) {
  test_on_node();
  test_bad_input();
  test_remote_free();
  test_next_touch();
  test_thread_node();
  return TEST_DONE();
}
