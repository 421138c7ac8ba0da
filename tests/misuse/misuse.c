/*
 * Misuse cases of the allocator API (docs/misuse.md). Each case runs in a
 * child process; the parent checks the outcome:
 *
 *   RETURN  the call must fail cleanly (NULL with errno ENOMEM, EINVAL, ...);
 *           the child checks that itself and exits 0.
 *   ABORT   the misuse must be detected: the child dies of SIGABRT and its
 *           stderr contains the word "locus", the address the case printed
 *           (as ADDR=0x... on stdout) and one of the case's keywords.
 *   GLIBC   aligned_alloc/memalign with odd alignments: same answer as glibc's
 *           own function (found with dlopen("libc.so.6")) in the same process.
 *
 * Usage: misuse CASE          run one case (ctest: misuse_CASE)
 *        misuse --list        print the case names
 *        misuse --all         run every case, report each
 *        misuse --check-list NAME...  fail unless NAME... are exactly the cases
 *        misuse --child CASE  run the case in this process (no checks)
 *
 * The calls go to the standard names (linked to liblocus, which overrides them),
 * or to locus_* with -DLOCUS_TEST_PREFIX, or to glibc with -DLOCUS_TEST_SYSTEM
 * (to check the harness: the ABORT cases then fail, glibc's messages do not
 * name locus).
 */
#define _GNU_SOURCE 1
#include "locus_test_api.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define A_MALLOC LOCUS_API(malloc)
#define A_CALLOC LOCUS_API(calloc)
#define A_REALLOC LOCUS_API(realloc)
#define A_REALLOCARRAY LOCUS_API(reallocarray)
#define A_FREE LOCUS_API(free)
#define A_POSIX_MEMALIGN LOCUS_API(posix_memalign)
#define A_ALIGNED_ALLOC LOCUS_API(aligned_alloc)
#define A_MEMALIGN LOCUS_API(memalign)

/* Keeps the compiler from reasoning about the pointers we misuse. */
static void *volatile sink;
static void *launder(void *p) { sink = p; return sink; }

static void say_addr(const void *p) {
  printf("ADDR=%p\n", p);
  fflush(stdout);
}

/* Child-side failure of a RETURN/GLIBC case. */
static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "misuse: MISMATCH: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return 1;
}

/* ---- requests that must fail cleanly ------------------------------------ */

static int c_malloc_size_max(void) {
  errno = 0;
  void *p = A_MALLOC(SIZE_MAX);
  if (p || errno != ENOMEM) return bad("malloc(SIZE_MAX) = %p, errno %d (want NULL, ENOMEM)", p, errno);
  return 0;
}

static int c_malloc_ptrdiff_max(void) {
  errno = 0;
  void *p = A_MALLOC((size_t)PTRDIFF_MAX + 1);
  if (p || errno != ENOMEM) return bad("malloc(PTRDIFF_MAX+1) = %p, errno %d (want NULL, ENOMEM)", p, errno);
  return 0;
}

static int c_calloc_overflow(void) {
  static const size_t cases[][2] = { { SIZE_MAX / 2 + 1, 2 }, { (size_t)1 << 32, ((size_t)1 << 32) + 1 },
                                     { SIZE_MAX, SIZE_MAX }, { 3, SIZE_MAX / 3 + 1 } };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    errno = 0;
    void *p = A_CALLOC(cases[i][0], cases[i][1]);
    if (p || errno != ENOMEM)
      return bad("calloc(%zu, %zu) = %p, errno %d (want NULL, ENOMEM)", cases[i][0], cases[i][1], p, errno);
  }
  return 0;
}

static int c_reallocarray_overflow(void) {
  unsigned char *p = A_MALLOC(100);
  if (!p) return bad("malloc(100) failed");
  memset(p, 0x5c, 100);
  errno = 0;
  void *q = A_REALLOCARRAY(p, SIZE_MAX / 2 + 1, 2);
  if (q || errno != ENOMEM) return bad("reallocarray(p, SIZE_MAX/2+1, 2) = %p, errno %d (want NULL, ENOMEM)", q, errno);
  for (int i = 0; i < 100; i++)
    if (p[i] != 0x5c) return bad("reallocarray overflow changed the old block");
  errno = 0;
  q = A_REALLOCARRAY(NULL, (size_t)1 << 33, (size_t)1 << 33);
  if (q || errno != ENOMEM) return bad("reallocarray(NULL, 2^33, 2^33) = %p, errno %d (want NULL, ENOMEM)", q, errno);
  A_FREE(p); /* still valid */
  return 0;
}

static int pm_einval(size_t align) {
  void *p = (void *)0x1234;
  int rc = A_POSIX_MEMALIGN(&p, align, 64);
  if (rc != EINVAL) return bad("posix_memalign(&p, %zu, 64) returned %d (want EINVAL %d)", align, rc, EINVAL);
  if (p != (void *)0x1234) return bad("posix_memalign(&p, %zu, 64) wrote %p into *p on failure", align, p);
  return 0;
}
static int c_posix_memalign_align_0(void) { return pm_einval(0); }
static int c_posix_memalign_align_3(void) { return pm_einval(3); }
static int c_posix_memalign_align_24(void) { return pm_einval(24); }
static int c_posix_memalign_align_4(void) { return pm_einval(sizeof(void *) / 2); } /* power of 2, not a multiple of sizeof(void*) */

/* ---- aligned_alloc / memalign with odd alignments: compare with glibc ---- */

typedef void *(*align_fn)(size_t, size_t);

static size_t next_pow2(size_t a) {
  size_t p = 1;
  while (p < a && p) p <<= 1;
  return p;
}

static int compare_with_glibc(const char *name, align_fn mine) {
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!libc) libc = dlopen("libc.so.6", RTLD_NOW);
  align_fn theirs = libc ? (align_fn)dlsym(libc, name) : NULL;
  void (*theirs_free)(void *) = libc ? (void (*)(void *))dlsym(libc, "free") : NULL;
  if (!theirs || !theirs_free) return bad("cannot find glibc's %s", name);
  static const size_t aligns[] = { 0, 1, 3, 5, 24, 48, 100, 4097, 65535, 100000, SIZE_MAX / 2 + 2, SIZE_MAX };
  static const size_t sizes[] = { 1, 100, 5000 };
  int fails = 0;
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
    for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++) {
      size_t a = aligns[i], s = sizes[j];
      errno = 0;
      void *g = theirs(a, s);
      int gerr = errno;
      errno = 0;
      void *m = mine(a, s);
      int merr = errno;
      size_t want = next_pow2(a); /* glibc rounds a non-power-of-two alignment up */
      if (!g) {
        if (m || merr != gerr)
          fails += bad("%s(%zu, %zu): glibc NULL errno %d, locus %p errno %d", name, a, s, gerr, m, merr);
      } else if (!m) {
        fails += bad("%s(%zu, %zu): glibc %p (aligned to %zu), locus NULL errno %d", name, a, s, g, want, merr);
      } else {
        if (want && (uintptr_t)m % want)
          fails += bad("%s(%zu, %zu) = %p: not aligned to %zu as glibc's is", name, a, s, m, want);
        if (T_USABLE_SIZE(m) < s) fails += bad("%s(%zu, %zu): usable size %zu", name, a, s, T_USABLE_SIZE(m));
        memset(m, 0xa5, s);
      }
      if (g) theirs_free(g);
      if (m) A_FREE(m);
    }
  }
  return fails ? 1 : 0;
}
static void *my_aligned_alloc(size_t a, size_t s) { return A_ALIGNED_ALLOC(a, s); }
static void *my_memalign(size_t a, size_t s) { return A_MEMALIGN(a, s); }
static int c_aligned_alloc_odd_alignment(void) { return compare_with_glibc("aligned_alloc", my_aligned_alloc); }
static int c_memalign_odd_alignment(void) { return compare_with_glibc("memalign", my_memalign); }

/* ---- invalid frees -------------------------------------------------------- */

static int interior(size_t size, size_t off) {
  unsigned char *p = A_MALLOC(size);
  if (!p) return bad("malloc(%zu) failed", size);
  memset(p, 1, size);
  say_addr(p + off);
  A_FREE(launder(p + off));
  return 0; /* reached only if undetected */
}
static int c_free_interior_small(void) { return interior(64, 16); }
static int c_free_interior_medium(void) { return interior(100 << 10, 4096 + 16); }
static int c_free_interior_large(void) { return interior(8 << 20, 3 * 4096); }

static int c_free_stack(void) {
  char buf[64];
  memset(buf, 0, sizeof buf);
  say_addr(buf + 16);
  A_FREE(launder(buf + 16));
  return 0;
}

static int c_free_mmap(void) {
  void *p = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return bad("mmap failed");
  char *q = (char *)p + 4096 + 16; /* looks like a chunk: 16 bytes into a page */
  say_addr(q);
  A_FREE(launder(q));
  return 0;
}

/* ---- double frees --------------------------------------------------------- */

static int dfree(size_t size) {
  void *p = A_MALLOC(size);
  if (!p) return bad("malloc(%zu) failed", size);
  memset(p, 1, size);
  say_addr(p);
  A_FREE(p);
  A_FREE(launder(p));
  return 0;
}
static int c_double_free_small(void) { return dfree(64); }
static int c_double_free_medium(void) { return dfree(100 << 10); }
static int c_double_free_large(void) { return dfree(8 << 20); }

static int c_double_free_delayed(void) {
  void *p = A_MALLOC(64);
  if (!p) return bad("malloc failed");
  say_addr(p);
  A_FREE(p);
  /* other traffic in other size classes, some of it still live */
  void *keep[256];
  for (int i = 0; i < 256; i++) keep[i] = A_MALLOC(200 + (size_t)i * 40);
  for (int i = 0; i < 256; i += 2) A_FREE(keep[i]);
  A_FREE(launder(p));
  for (int i = 1; i < 256; i += 2) A_FREE(keep[i]);
  return 0;
}

static int c_double_free_after_reuse(void) {
  void *p = A_MALLOC(64);
  if (!p) return bad("malloc failed");
  A_FREE(p);
  void *q = A_MALLOC(64); /* usually the same block */
  printf("reused=%s q=%p\n", q == p ? "yes" : "no", q);
  say_addr(p);
  A_FREE(launder(p)); /* if q == p: frees q's block, a legal-looking free (undetectable) */
  A_FREE(launder(p)); /* the double free */
  return 0;
}

static void *free_twice(void *arg) {
  A_FREE(arg);
  A_FREE(launder(arg));
  return NULL;
}
static void *free_once(void *arg) {
  A_FREE(launder(arg));
  return NULL;
}
static void drain(void) {
  /* let the owner look at its queue of remote frees */
#ifndef LOCUS_TEST_SYSTEM
  locus_collect();
#endif
  for (int i = 0; i < 1000; i++) A_FREE(A_MALLOC(64));
}

/* Another thread frees a block of this thread twice. */
static int c_double_free_cross_thread(void) {
  void *p = A_MALLOC(64);
  if (!p) return bad("malloc failed");
  say_addr(p);
  pthread_t t;
  pthread_create(&t, NULL, free_twice, p);
  pthread_join(t, NULL);
  drain();
  return 0;
}

/* The owner frees, then another thread frees the same block. */
static int c_double_free_owner_then_remote(void) {
  void *p = A_MALLOC(64);
  if (!p) return bad("malloc failed");
  say_addr(p);
  A_FREE(p);
  pthread_t t;
  pthread_create(&t, NULL, free_once, p);
  pthread_join(t, NULL);
  drain();
  return 0;
}

/* Another thread frees, then the owner frees again. */
static int c_double_free_remote_then_owner(void) {
  void *p = A_MALLOC(64);
  if (!p) return bad("malloc failed");
  say_addr(p);
  pthread_t t;
  pthread_create(&t, NULL, free_once, p);
  pthread_join(t, NULL);
  A_FREE(launder(p));
  drain();
  return 0;
}

/* Two threads free the same block at the same moment (a spin barrier lines
 * them up): either one sees the other's freed tag, or both pass the check
 * and push it; then the owner, taking its remote frees back, meets the block
 * twice. Both end in the double-free abort; neither may hang or crash. */
static atomic_int racers;
static void *free_racing(void *arg) {
  atomic_fetch_add(&racers, 1);
  while (atomic_load(&racers) < 2) {
  }
  A_FREE(launder(arg));
  return NULL;
}
static int c_double_free_concurrent(void) {
  void *keep[16];
  for (int i = 0; i < 16; i++) keep[i] = A_MALLOC(64);   /* the run has other live blocks */
  void *p = A_MALLOC(64);
  if (!p) return bad("malloc failed");
  say_addr(p);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, free_racing, p);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  drain();
  for (int i = 0; i < 16; i++) A_FREE(keep[i]);
  return 0;
}

static int realloc_freed(size_t size) {
  void *p = A_MALLOC(size);
  if (!p) return bad("malloc failed");
  say_addr(p);
  A_FREE(p);
  void *q = A_REALLOC(launder(p), size * 2);
  printf("realloc returned %p\n", q);
  return 0;
}
static int c_realloc_freed_small(void) { return realloc_freed(64); }
static int c_realloc_freed_large(void) { return realloc_freed(4 << 20); }

/* ---- the table ------------------------------------------------------------- */

enum expect { RETURN, ABORT, GLIBC };

typedef struct {
  const char *name;
  int (*fn)(void);
  enum expect expect;
  const char *keywords; /* ABORT: '|'-separated, any of them, case-insensitive */
} case_t;

#define KW_DOUBLE "double free|already free|freed twice|not allocated|freed block"
#define KW_INVALID "invalid pointer|not allocated|not its start|interior|not a block|unknown pointer|bad pointer"

static const case_t cases[] = {
  { "malloc_size_max", c_malloc_size_max, RETURN, NULL },
  { "malloc_ptrdiff_max", c_malloc_ptrdiff_max, RETURN, NULL },
  { "calloc_overflow", c_calloc_overflow, RETURN, NULL },
  { "reallocarray_overflow", c_reallocarray_overflow, RETURN, NULL },
  { "posix_memalign_align_0", c_posix_memalign_align_0, RETURN, NULL },
  { "posix_memalign_align_3", c_posix_memalign_align_3, RETURN, NULL },
  { "posix_memalign_align_24", c_posix_memalign_align_24, RETURN, NULL },
  { "posix_memalign_align_4", c_posix_memalign_align_4, RETURN, NULL },
  { "aligned_alloc_odd_alignment", c_aligned_alloc_odd_alignment, GLIBC, NULL },
  { "memalign_odd_alignment", c_memalign_odd_alignment, GLIBC, NULL },
  { "free_interior_small", c_free_interior_small, ABORT, KW_INVALID },
  { "free_interior_medium", c_free_interior_medium, ABORT, KW_INVALID },
  { "free_interior_large", c_free_interior_large, ABORT, KW_INVALID },
  { "free_stack", c_free_stack, ABORT, KW_INVALID },
  { "free_mmap", c_free_mmap, ABORT, KW_INVALID },
  { "double_free_small", c_double_free_small, ABORT, KW_DOUBLE },
  { "double_free_medium", c_double_free_medium, ABORT, KW_DOUBLE },
  { "double_free_large", c_double_free_large, ABORT, KW_DOUBLE },
  { "double_free_delayed", c_double_free_delayed, ABORT, KW_DOUBLE },
  { "double_free_after_reuse", c_double_free_after_reuse, ABORT, KW_DOUBLE },
  { "double_free_cross_thread", c_double_free_cross_thread, ABORT, KW_DOUBLE },
  { "double_free_owner_then_remote", c_double_free_owner_then_remote, ABORT, KW_DOUBLE },
  { "double_free_remote_then_owner", c_double_free_remote_then_owner, ABORT, KW_DOUBLE },
  { "double_free_concurrent", c_double_free_concurrent, ABORT, KW_DOUBLE },
  { "realloc_freed_small", c_realloc_freed_small, ABORT, KW_DOUBLE "|" KW_INVALID },
  { "realloc_freed_large", c_realloc_freed_large, ABORT, KW_DOUBLE "|" KW_INVALID },
};
#define NCASES (sizeof cases / sizeof cases[0])

static const case_t *find(const char *name) {
  for (size_t i = 0; i < NCASES; i++)
    if (!strcmp(cases[i].name, name)) return &cases[i];
  return NULL;
}

static char *slurp(FILE *f) {
  fflush(f);
  long n = ftell(f);
  if (n < 0) n = 0;
  char *s = malloc((size_t)n + 1); /* parent side: the allocator under test is fine here */
  if (!s) return NULL;
  rewind(f);
  size_t got = fread(s, 1, (size_t)n, f);
  s[got] = '\0';
  return s;
}

static int contains_ci(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; hay++)
    if (!strncasecmp(hay, needle, n)) return 1;
  return 0;
}

static int any_keyword(const char *text, const char *keywords) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", keywords);
  for (char *save = NULL, *k = strtok_r(buf, "|", &save); k; k = strtok_r(NULL, "|", &save))
    if (contains_ci(text, k)) return 1;
  return 0;
}

/* Does text contain a hex number (0x...) equal to addr? */
static int mentions_addr(const char *text, uintptr_t addr) {
  for (const char *s = text; *s; s++) {
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && isxdigit((unsigned char)s[2])) {
      uintptr_t v = (uintptr_t)strtoull(s + 2, NULL, 16);
      if (v == addr) return 1;
    }
  }
  return 0;
}

static int run_case(const case_t *c, const char *self) {
  FILE *out = tmpfile(), *err = tmpfile();
  if (!out || !err) { perror("tmpfile"); return 1; }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) { perror("fork"); return 1; }
  if (pid == 0) {
    dup2(fileno(out), 1);
    dup2(fileno(err), 2);
    alarm(30); /* a hang (a corrupted free list, a spinning lock) ends as SIGALRM */
    /* Cross builds (tests/cross): an aarch64 program under qemu-user cannot
     * exec itself, the kernel would not know the binary; the child runs under
     * the emulator named by LOCUS_TEST_EMULATOR ("qemu-aarch64 -L ..."). */
    if (getenv("LOCUS_TEST_EMULATOR") && *getenv("LOCUS_TEST_EMULATOR"))
      execl("/bin/sh", "sh", "-c", "exec $LOCUS_TEST_EMULATOR \"$0\" --child \"$1\"", self, c->name, (char *)NULL);
    else
      execl(self, self, "--child", c->name, (char *)NULL);
    _exit(127);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  char *o = slurp(out), *e = slurp(err);
  fclose(out);
  fclose(err);
  const char *so = o ? o : "", *se = e ? e : "";
  int ok = 0;
  char why[512] = "";
  if (c->expect == RETURN || c->expect == GLIBC) {
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) ok = 1;
    else if (WIFEXITED(st)) snprintf(why, sizeof why, "the calls did not fail as specified (exit %d)", WEXITSTATUS(st));
    else snprintf(why, sizeof why, "the child died of signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
  } else {
    const char *a = strstr(so, "ADDR=");
    uintptr_t addr = a ? (uintptr_t)strtoull(a + 5, NULL, 16) : 0;
    if (WIFEXITED(st))
      snprintf(why, sizeof why, "UNDETECTED: the child exited normally (status %d)", WEXITSTATUS(st));
    else if (WTERMSIG(st) != SIGABRT)
      snprintf(why, sizeof why, "the child died of signal %d (%s), not SIGABRT%s", WTERMSIG(st), strsignal(WTERMSIG(st)),
               WTERMSIG(st) == SIGALRM ? " (hang, 30 s)" : "");
    else if (!contains_ci(se, "locus"))
      snprintf(why, sizeof why, "aborted, but stderr does not name locus");
    else if (!a || !mentions_addr(se, addr))
      snprintf(why, sizeof why, "aborted, but stderr does not give the address %#" PRIxPTR, addr);
    else if (!any_keyword(se, c->keywords))
      snprintf(why, sizeof why, "aborted, but stderr has none of: %s", c->keywords);
    else
      ok = 1;
  }
  printf("misuse: %-32s %s%s%s\n", c->name, ok ? "ok" : "FAILED: ", ok ? "" : why, "");
  if (!ok || getenv("MISUSE_VERBOSE")) {
    printf("  --- child stdout ---\n%s  --- child stderr ---\n%s  ---\n", so, se);
  }
  free(o);
  free(e);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--child")) {
    const case_t *c = find(argv[2]);
    if (!c) return 126;
    int rc = c->fn();
    fflush(stdout);
    return rc;
  }
  if (argc == 2 && !strcmp(argv[1], "--list")) {
    for (size_t i = 0; i < NCASES; i++) printf("%s\n", cases[i].name);
    return 0;
  }
  if (argc >= 2 && !strcmp(argv[1], "--check-list")) {
    int rc = 0;
    for (size_t i = 0; i < NCASES; i++) {
      int found = 0;
      for (int j = 2; j < argc; j++) found |= !strcmp(argv[j], cases[i].name);
      if (!found) { printf("misuse: case %s is not registered with ctest\n", cases[i].name); rc = 1; }
    }
    for (int j = 2; j < argc; j++)
      if (!find(argv[j])) { printf("misuse: ctest names a case %s that does not exist\n", argv[j]); rc = 1; }
    if (!rc) printf("misuse: all %zu cases registered\n", NCASES);
    return rc;
  }
  /* /proc/self/exe: the child re-executes this program, fresh allocator state */
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) { perror("readlink"); return 1; }
  self[n] = '\0';
  printf("misuse: allocator %s\n", T_ALLOCATOR_NAME);
  if (argc == 2 && !strcmp(argv[1], "--all")) {
    int fails = 0;
    for (size_t i = 0; i < NCASES; i++) fails += run_case(&cases[i], self);
    printf("misuse: %d of %zu cases failed\n", fails, NCASES);
    return fails ? 1 : 0;
  }
  if (argc == 2) {
    const case_t *c = find(argv[1]);
    if (!c) { fprintf(stderr, "misuse: no case %s (see --list)\n", argv[1]); return 2; }
    return run_case(c, self);
  }
  fprintf(stderr, "usage: misuse CASE | --all | --list | --check-list NAME... | --child CASE\n");
  return 2;
}
