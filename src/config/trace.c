/* Allocation trace (LOCUS_TRACE_FILE) for the alignment analyser, `locus
 * align` (S. Valat, PhD thesis, 2014, §3.6: the analysis needs the base
 * address, size and allocation site of every large array).
 *
 * One text line per event, written with a single write(2) on an O_APPEND
 * descriptor, so that lines of several threads or processes never mix:
 *   H pid locus-trace 1 page=4096            first line of a process
 *   M pid start end offset path              an executable mapping (hex)
 *   A pid seq addr size c1 c2 ...            large allocation
 *   R pid seq old addr size c1 c2 ...        large block resized (maybe moved)
 *   F pid addr                               large block about to be freed
 * Addresses and offsets are hexadecimal, pid, seq and size decimal. c1 c2 ...
 * are the call-site candidates: the words of the stack above this module's
 * frame that point into an executable mapping other than locus's own, nearest
 * first (at most MAX_CAND of SCAN_WORDS words). The first is the return
 * address into the caller of malloc in practice; the tool resolves them with
 * the M lines (which are read once, at the first record: objects loaded later
 * by dlopen are not listed). The library neither unwinds nor resolves symbols.
 *
 * An analysis library preloaded beside locus (liblocus_sample.so, tools/analysis/sample.c)
 * learns of the same events synchronously by defining locus_trace_observer,
 * a weak reference here: it is called after an allocation or resize and
 * before a free, while the block is still intact. Without such a library the
 * reference is null and nothing is called.
 *
 * Off by default; the callers test locus_trace_on (set once at start-up) on
 * the large paths only. */
#include "config/trace.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "os/os.h"
#include "types.h"
#include "util/error.h"
#include "util/lock.h"
#include "config/options.h"

#define SCAN_WORDS 256                 /* stack words examined per record (2 KiB) */
#define MAX_CAND 6                     /* call-site candidates kept per record */
#define MAX_RANGES 256                 /* executable mappings remembered */

bool locus_trace_on;

/* kind 'A' (allocated, after), 'R' (resized: old -> p, after), 'F' (before the free). */
extern void locus_trace_observer(int kind, unsigned long seq, const void *p, size_t size, const void *old)
    __attribute__((weak));

static char path[256];
LOCK_STATIC(open_lock, LOCK_RANK_TRACE_OPEN, "trace file opening")
static atomic_int state;               /* 0 not open yet, 1 open, -1 failed (silent from then on) */
static int fd = -1;
static int fd_pid;                     /* the process that opened fd (a forked child reopens maps) */
static atomic_ulong seq;

static struct {
  uintptr_t lo, hi;
} ranges[MAX_RANGES];
static int nranges;
static uintptr_t self_lo, self_hi;    /* locus's own text: never a call site */
static uintptr_t stack_lo, stack_hi;  /* the main thread's stack: the scan stops at its top */
static char maps[64 * 1024];           /* /proc/self/maps, read once per process */

void trace_start(const char *p) {
  size_t n = 0;
  while (p[n] && n + 1 < sizeof path) {
    path[n] = p[n];
    n++;
  }
  path[n] = 0;
  locus_trace_on = n > 0;
}

static uintptr_t hex(const char **s) {
  uintptr_t v = 0;
  for (;; (*s)++) {
    char c = **s;
    if (c >= '0' && c <= '9') v = v * 16 + (uintptr_t)(c - '0');
    else if (c >= 'a' && c <= 'f') v = v * 16 + (uintptr_t)(c - 'a' + 10);
    else return v;
  }
}

static void emit(const char *buf, size_t len) {
  if (len && !os_write_all(fd, buf, len)) atomic_store(&state, -1);
}

/* Reads the executable mappings, writes them as M lines; under open_lock. */
static void read_maps(int pid) {
  char line[600];
  size_t n = fmt_buf(line, sizeof line, "H %d locus-trace 1 page=%zu\n", pid, os_page_size());
  emit(line, n);
  nranges = 0;
  if (os_read_file("/proc/self/maps", maps, sizeof maps) <= 0) return;
  uintptr_t self = (uintptr_t)&trace_start;
  for (const char *s = maps; *s;) {
    const char *eol = s;
    while (*eol && *eol != '\n') eol++;
    uintptr_t lo = hex(&s);
    s++;                               /* '-' */
    uintptr_t hi = hex(&s);
    s++;                               /* ' ' */
    bool exec = s + 3 < eol && s[2] == 'x';
    s += 5;                            /* "r-xp " */
    uintptr_t off = s < eol ? hex(&s) : 0;
    for (int field = 0; field < 2 && s < eol; field++) {   /* dev, inode */
      while (s < eol && *s == ' ') s++;
      while (s < eol && *s != ' ') s++;
    }
    while (s < eol && *s == ' ') s++;
    if (eol - s == 7 && !memcmp(s, "[stack]", 7)) {
      stack_lo = lo;
      stack_hi = hi;
    }
    if (exec && s < eol && *s == '/') {
      if (self >= lo && self < hi) {
        self_lo = lo;
        self_hi = hi;
      } else if (nranges < MAX_RANGES) {
        ranges[nranges].lo = lo;
        ranges[nranges].hi = hi;
        nranges++;
      }
      n = fmt_buf(line, sizeof line, "M %d %lx %lx %lx ", pid, (unsigned long)lo, (unsigned long)hi,
                  (unsigned long)off);
      for (const char *c = s; c < eol && n < sizeof line - 1; c++) line[n++] = *c;
      line[n++] = '\n';
      emit(line, n);
    }
    s = *eol ? eol + 1 : eol;
  }
}

/* True once the file is open for this process. The first record of each
 * process opens the file, or keeps the inherited descriptor after a fork;
 * a name with %p or %r (options_expand_path) gives each process its own file,
 * so a forked child closes its parent's descriptor and opens its own. */
static bool ready(void) {
  int pid = os_getpid();
  if (atomic_load_explicit(&state, memory_order_acquire) == 1 && fd_pid == pid) return true;
  if (atomic_load(&state) < 0) return false;
  lock_acquire(&open_lock);
  if (atomic_load(&state) >= 0 && fd_pid != pid) {   /* first record of this process */
    if (fd >= 0 && strchr(path, '%')) {
      os_close(fd);
      fd = -1;
    }
    if (fd < 0) {
      char name[256];
      /* A name cut short would be another file (as LOCUS_STATS_FILE, no
       * file rather than a wrong one). */
      if (options_expand_path(path, name, sizeof name) >= sizeof name) {
        locus_warn("LOCUS_TRACE_FILE is longer than %zu bytes once expanded; no trace", sizeof name - 1);
        atomic_store(&state, -1);
      } else {
        fd = os_open_append(name);
        if (fd < 0) {
          locus_warn("LOCUS_TRACE_FILE=%s cannot be opened; no trace", name);
          atomic_store(&state, -1);
        }
      }
    }
    if (fd >= 0) {
      fd_pid = pid;
      atomic_store_explicit(&state, 1, memory_order_release);
      read_maps(pid);
    }
  }
  lock_release(&open_lock);
  return atomic_load(&state) == 1;
}

/* Appends the call-site candidates to line. The scan reads the stack above
 * this frame (the callers' frames); it never reads below the frame, nor above
 * the top of the main thread's stack. A thread's stack has its thread control
 * block and TLS above the first frame (glibc), more than the 2 KiB scanned. */
__attribute__((noinline, no_sanitize_address)) static size_t candidates(char *line, size_t n, size_t len) {
  const volatile uintptr_t *sp = (const volatile uintptr_t *)__builtin_frame_address(0);
  int found = 0, limit = SCAN_WORDS;
  uintptr_t at = (uintptr_t)sp;
  if (at >= stack_lo && at < stack_hi && (stack_hi - at) / sizeof(uintptr_t) < (uintptr_t)limit)
    limit = (int)((stack_hi - at) / sizeof(uintptr_t));
  for (int i = 0; i < limit && found < MAX_CAND; i++) {
    uintptr_t w = sp[i];
    if (w >= self_lo && w < self_hi) continue;
    for (int r = 0; r < nranges; r++)
      if (w >= ranges[r].lo && w < ranges[r].hi) {
        n += fmt_buf(line + n, len - n, " %lx", (unsigned long)w);
        found++;
        break;
      }
  }
  return n < len ? n : len - 1;
}

NOINLINE void trace_alloc(const void *p, size_t size) {
  if (!ready()) return;
  char line[256];
  unsigned long s = atomic_fetch_add(&seq, 1) + 1;
  size_t n = fmt_buf(line, sizeof line - 1, "A %d %lu %lx %zu", fd_pid, s, (unsigned long)p, size);
  n = candidates(line, n, sizeof line - 1);
  line[n++] = '\n';
  emit(line, n);
  if (locus_trace_observer) locus_trace_observer('A', s, p, size, NULL);
}

NOINLINE void trace_realloc(const void *old, const void *p, size_t size) {
  if (!ready()) return;
  char line[256];
  unsigned long s = atomic_fetch_add(&seq, 1) + 1;
  size_t n = fmt_buf(line, sizeof line - 1, "R %d %lu %lx %lx %zu", fd_pid, s, (unsigned long)old,
                     (unsigned long)p, size);
  n = candidates(line, n, sizeof line - 1);
  line[n++] = '\n';
  emit(line, n);
  if (locus_trace_observer) locus_trace_observer('R', s, p, size, old);
}

NOINLINE void trace_free(const void *p) {
  if (!ready()) return;
  if (locus_trace_observer) locus_trace_observer('F', 0, p, 0, NULL);
  char line[64];
  size_t n = fmt_buf(line, sizeof line, "F %d %lx\n", fd_pid, (unsigned long)p);
  emit(line, n);
}
