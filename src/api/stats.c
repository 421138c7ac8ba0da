/* The statistics report: locus_stats_get, the readable report and the JSON
 * form, read from the counters (util/stats.c), the heaps and the sources. */
#include <stdarg.h>
#include <string.h>

#include "config/options.h"
#include <stdio.h>

#include "heap/heap.h"
#include "heap/user.h"
#include "numa/next_touch.h"
#include "os/os.h"
#include "os/topology.h"
#include "source/ksm.h"
#include "source/source.h"
#include "source/thp.h"
#include "util/lock.h"
#include "util/stats.h"

#define LD(x) atomic_load_explicit(&locus_stats.x, memory_order_relaxed)

LOCUS_EXPORT void locus_stats_get(locus_stats_t *st) {
  if (!st) return;
  size_t live = 0, orphaned = 0;
  heaps_counts(&live, &orphaned);
  *st = (locus_stats_t){
    .bytes_in_use = LD(in_use), .bytes_cached = LD(cached), .peak_footprint = LD(peak),
    .mmap_calls = LD(mmaps), .munmap_calls = LD(munmaps), .mremap_calls = LD(mremaps),
    .madvise_calls = LD(madvises), .cache_hits = LD(hits), .cache_misses = LD(misses),
    .bytes_returned = LD(returned), .heaps_live = live, .heaps_orphaned = orphaned,
    .bytes_huge = LD(huge), .bytes_decayed = LD(decayed), .bytes_pressure_released = LD(pressured),
  };
}

/* An append-only text buffer over a caller's array (no allocation). */
typedef struct { char *buf; size_t len, n; } text_t;

static void text(text_t *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = t->n < t->len ? t->len - t->n : 0;
  t->n += fmt_vbuf(room ? t->buf + t->n : NULL, room, fmt, ap);
  va_end(ap);
}

typedef struct { text_t *t; int n; } list_ctx_t;

#define ALD(s, x) atomic_load_explicit(&(s)->adapt.x, memory_order_relaxed)

static void json_source(void *ctx, const source_t *s) {
  list_ctx_t *c = ctx;
  text(c->t, "%s{\"node\":%d,\"kind\":\"%s\",\"in_use\":%zu,\"cached\":%zu,\"segments\":%zu,\"hits\":%zu,"
       "\"misses\":%zu,\"auto_bound\":%zu,\"auto_window_ms\":%zu,\"auto_chunk_window_ms\":%zu,\"decayed\":%zu,"
       "\"pressure_released\":%zu,\"regrets\":%zu,\"chunk_regrets\":%zu}", c->n++ ? "," : "", s->node,
       s->node == SOURCE_GENERIC ? "generic" : s->node == SOURCE_INTERLEAVE ? "interleave" : "node",
       (size_t)s->in_use, (size_t)s->cached, (size_t)s->nseg, (size_t)s->hits, (size_t)s->misses,
       (size_t)ALD(s, bound), (size_t)(ALD(s, k[ADAPT_LARGE].window_ns) / 1000000),
       (size_t)(ALD(s, k[ADAPT_CHUNK].window_ns) / 1000000), (size_t)ALD(s, decayed), (size_t)ALD(s, pressured),
       adapt_regrets(&s->adapt), (size_t)ALD(s, k[ADAPT_CHUNK].regrets));
}

static const char *const heap_states[] = {"live", "orphan", "dead"};
#define HLD(h, x) atomic_load_explicit(&(h)->x, memory_order_relaxed)

typedef struct { text_t *t; int n; } heap_ctx_t;

/* Blocks in a heap's thread cache (its owner changes them meanwhile: a
 * snapshot, read without tearing each field). */
static size_t heap_cached_blocks(const heap_t *h) {
  size_t n = 0;
  for (unsigned i = 0; i < NUM_CLASSES; i++) {
    const tcache_t *t = &h->cache[i];
    void *head = __atomic_load_n(&t->head, __ATOMIC_RELAXED);
    uint32_t room = __atomic_load_n(&t->room, __ATOMIC_RELAXED);
    if (head && room < t->bound) n += t->bound - room;
  }
  return n;
}

/* User heaps are reported apart, with their names; capture trampolines hold nothing. */
static bool thread_heap(const heap_t *h) { return h->place != PLACE_USER && h->place != PLACE_CAPTURE; }

static void json_heap(void *ctx, const heap_t *h) {
  heap_ctx_t *c = ctx;
  if (!thread_heap(h)) return;
  text(c->t, "%s{\"tid\":%d,\"state\":\"%s\",\"place\":%d,\"node\":%d,\"chunk_bytes\":%zu,\"large_bytes\":%zu,"
       "\"large_allocs\":%zu,\"remote_frees\":%zu,\"reclaimed_runs\":%zu,\"thread_cache_blocks\":%zu}",
       c->n++ ? "," : "", (int)h->tid, heap_states[h->state], h->place, h->node, HLD(h, st_chunk_bytes),
       HLD(h, st_large_bytes), HLD(h, st_large_allocs), HLD(h, st_remote_frees), HLD(h, st_reclaimed_runs),
       heap_cached_blocks(h));
}

/* What the heaps hold, summed over them, and the process's resident set. */
typedef struct { size_t large_live, chunks, resident; } memory_t;

static void sum_heap(void *ctx, const heap_t *h) {
  memory_t *m = ctx;
  /* The user's memory is not locus's; a destroyed user heap has no source (under heaps_lock). */
  if (h->place == PLACE_USER && (!h->source || h->source->user)) return;
  m->large_live += HLD(h, st_large_bytes);
  m->chunks += HLD(h, st_chunk_bytes);
}

/* Resident bytes of the process (/proc/self/statm, second field), 0 if unknown. */
static size_t resident_bytes(void) {
  char buf[128];
  if (os_read_file("/proc/self/statm", buf, sizeof buf) <= 0) return 0;
  const char *p = buf;
  while (*p && *p != ' ') p++;
  size_t pages = 0;
  for (p++; *p >= '0' && *p <= '9'; p++) pages = pages * 10 + (size_t)(*p - '0');
  return pages * os_features.page_size;
}

static void memory_get(memory_t *m) {
  *m = (memory_t){0};
  heaps_report(sum_heap, m);
  m->resident = resident_bytes();
}

/* One line per user heap (locus_heap_create): what it holds and, over a
 * segment or a source of the user's, how much of that memory is free. */
static void json_uheap(void *ctx, uheap_t *u) {
  heap_ctx_t *c = ctx;
  size_t held, total, free_bytes, threads, allocs;
  uheap_figures(u, &held, &total, &free_bytes, &threads, &allocs);
  text(c->t, "%s{\"name\":\"", c->n++ ? "," : "");
  for (const char *q = uheap_name(u); *q; q++) {   /* a JSON string: quotes, backslashes, controls escaped */
    unsigned char ch = (unsigned char)*q;
    if (ch < 0x20 || ch == '"' || ch == '\\') text(c->t, "\\u00%c%c", "0123456789abcdef"[ch >> 4], "0123456789abcdef"[ch & 15]);
    else text(c->t, "%c", ch);
  }
  text(c->t, "\",\"arena\":%s,\"held_bytes\":%zu,\"user_memory_bytes\":%zu,\"user_memory_free\":%zu,"
       "\"threads\":%zu,\"allocations\":%zu}", uheap_is_arena(u) ? "true" : "false", held, total, free_bytes,
       threads, allocs);
}

static void report_uheap(void *ctx, uheap_t *u) {
  heap_ctx_t *c = ctx;
  if (c->n++ >= 16) {
    if (c->n == 17) text(c->t, "  (more user heaps not shown)\n");
    return;
  }
  size_t held, total, free_bytes, threads, allocs;
  uheap_figures(u, &held, &total, &free_bytes, &threads, &allocs);
  char name[48];                       /* control characters shown as '?' */
  snprintf(name, sizeof name, "%s", uheap_name(u));
  for (char *q = name; *q; q++)
    if ((unsigned char)*q < 0x20 || *q == 0x7f) *q = '?';
  text(c->t, "  user heap %s : holds %zu KiB%s, %zu allocations, %zu thread(s)", name, held / KiB,
       uheap_is_arena(u) ? " (arena)" : "", allocs, threads);
  if (total) text(c->t, "; its segment and source: %zu KiB, %zu KiB free", total / KiB, free_bytes / KiB);
  text(c->t, "\n");
}

LOCUS_EXPORT size_t locus_stats_json(char *buf, size_t len) {
  locus_stats_t st;
  locus_stats_get(&st);
  text_t t = {buf, len, 0};
  const os_features_t *f = &os_features;
  text(&t, "{\"version\":\"%s\",\"arch\":\"%s\",\"profile\":\"%s\",\"cache_max\":%zu,"
       "\"cache_bound\":%zu,\"large_threshold\":%zu,", locus_version(), ARCH_NAME,
       profile_name(atomic_load(&locus_opt.profile)), atomic_load(&locus_opt.cache_max),
       atomic_load(&locus_opt.cache_bound), locus_opt.large_threshold);
  text(&t, "\"options\":{");
  size_t room = t.n < t.len ? t.len - t.n : 0;
  t.n += options_json(room ? t.buf + t.n : NULL, room);
  text(&t, "},\"features\":{\"kernel\":\"%s\",\"page_size\":%zu,\"huge_page_size\":%zu,\"thp\":\"%s\","
       "\"numa_nodes\":%d,\"numa_balancing\":%d,\"madv_free\":%s,\"madv_populate_write\":%s,"
       "\"page_reuse\":%s,\"page_reuse_maps\":%zu,\"numa\":%s,\"secure\":%s},", f->kernel, f->page_size, f->huge_page_size, os_thp_name(f->thp),
       topology_nodes(), f->numa_balancing, f->madv_free ? "true" : "false",
       f->madv_populate_write ? "true" : "false", f->page_reuse ? "true" : "false", os_page_reuse_maps(), f->numa ? "true" : "false", f->secure ? "true" : "false");
  memory_t m;
  memory_get(&m);
  text(&t, "\"bytes_in_use\":%zu,\"bytes_cached\":%zu,\"peak_footprint\":%zu,\"bytes_reserved\":%zu,"
       "\"bytes_large_live\":%zu,\"bytes_chunks\":%zu,\"bytes_resident\":%zu,", st.bytes_in_use,
       st.bytes_cached, st.peak_footprint, st.bytes_in_use + st.bytes_cached, m.large_live, m.chunks, m.resident);
  text(&t, "\"mmap_calls\":%zu,\"munmap_calls\":%zu,\"mremap_calls\":%zu,\"madvise_calls\":%zu,",
       st.mmap_calls, st.munmap_calls, st.mremap_calls, st.madvise_calls);
  text(&t, "\"cache_hits\":%zu,\"cache_misses\":%zu,\"bytes_returned\":%zu,", st.cache_hits,
       st.cache_misses, st.bytes_returned);
  adapt_pressure_t ap;
  adapt_pressure_get(&ap);
  text(&t, "\"bytes_huge\":%zu,\"bytes_decayed\":%zu,\"bytes_pressure_released\":%zu,\"pressure\":{\"psi_some_avg10\":%d,"
       "\"headroom\":%zu,\"cgroup\":%d,\"cgroup_limit\":%zu,\"high\":%s},", (size_t)st.bytes_huge,
       (size_t)st.bytes_decayed, (size_t)st.bytes_pressure_released, ap.psi,
       ap.headroom == SIZE_MAX ? (size_t)0 : ap.headroom, ap.cg_version,
       ap.cg_limit == SIZE_MAX ? (size_t)0 : ap.cg_limit, ap.high ? "true" : "false");
  thp_report_t hr;
  thp_report(&hr);
  text(&t, "\"thp\":{\"adaptive\":%s,\"advising\":%s,\"huge_fault_ns\":%zu,\"base_fault_ns\":%zu,"
       "\"ratio_pct\":%u,\"huge_samples\":%zu,\"base_samples\":%zu,\"stops\":%zu,\"resumes\":%zu,"
       "\"probes\":%zu,\"withdrawn\":%zu},", hr.active ? "true" : "false", hr.advising ? "true" : "false",
       (size_t)hr.huge_ns, (size_t)hr.base_ns, hr.ratio_pct, hr.huge_samples,
       hr.base_samples, hr.stops, hr.resumes, hr.probes, hr.withdrawn);
  static const char *const ksm_opt[] = {"off", "large", "all", "auto"};
  os_ksm_t k;
  bool ksm = os_ksm_self(&k);
  ksm_auto_stats_t ka;
  ksm_auto_stats(&ka);
  text(&t, "\"ksm\":{\"option\":\"%s\",\"available\":%s,\"merging_pages\":%zu,\"zero_pages\":%zu,"
       "\"process_profit\":%zu,\"auto\":{\"watched\":%zu,\"advised\":%zu,\"advised_bytes\":%zu,"
       "\"advices\":%zu,\"zero_advices\":%zu,\"withdrawals\":%zu,\"samples\":%zu,\"pages_hashed\":%zu,"
       "\"not_watched\":%zu}},", ksm_opt[atomic_load(&locus_opt.ksm)], ksm ? "true" : "false",
       (size_t)k.merging_pages, (size_t)k.zero_pages, (size_t)k.process_profit, ka.watched, ka.advised,
       ka.advised_bytes, ka.advices, ka.zero_advices, ka.withdrawals, ka.samples, ka.pages_hashed, ka.full);
  text(&t, "\"next_touch_faults\":%zu,\"next_touch_moved_pages\":%zu,", next_touch_faults(),
       next_touch_moved_pages());
  text(&t, "\"heaps_live\":%zu,\"heaps_orphaned\":%zu,\"sources\":[", st.heaps_live, st.heaps_orphaned);
  list_ctx_t sc = {&t, 0};
  sources_report(json_source, &sc);
  text(&t, "],\"heaps\":[");
  heap_ctx_t hc = {&t, 0};
  heaps_report(json_heap, &hc);
  text(&t, "],\"user_heaps\":[");
  heap_ctx_t uc = {&t, 0};
  uheaps_report(json_uheap, &uc);
  text(&t, "]}");
  if (len) buf[t.n < len ? t.n : len - 1] = 0;
  return t.n;
}

static void mib(text_t *t, const char *label, size_t v) {
  text(t, "  %s%zu.%zu MiB\n", label, v / MiB, (v % MiB) * 10 / MiB);
}

static void report_source(void *ctx, const source_t *s) {
  text_t *t = ctx;
  if (s->node == SOURCE_GENERIC) text(t, "  source generic : ");
  else if (s->node == SOURCE_INTERLEAVE) text(t, "  source interleaved : ");
  else text(t, "  source node %d  : ", s->node);
  text(t, "in use %zu KiB, cached %zu KiB in %zu segments, %zu hits, %zu misses\n", s->in_use / KiB,
       s->cached / KiB, s->nseg, s->hits, s->misses);
  if (ALD(s, k[ADAPT_LARGE].window_ns) || ALD(s, decayed) || ALD(s, pressured))
    text(t, "    auto            : bound %zu KiB, window %zu ms (chunks %zu ms), released %zu KiB by decay, %zu KiB by "
         "pressure, %zu regrets (%zu of chunks)\n", (size_t)ALD(s, bound) / KiB,
         (size_t)(ALD(s, k[ADAPT_LARGE].window_ns) / 1000000), (size_t)(ALD(s, k[ADAPT_CHUNK].window_ns) / 1000000),
         (size_t)ALD(s, decayed) / KiB, (size_t)ALD(s, pressured) / KiB, adapt_regrets(&s->adapt),
         (size_t)ALD(s, k[ADAPT_CHUNK].regrets));
}

static void report_heap(void *ctx, const heap_t *h) {
  heap_ctx_t *c = ctx;
  if (!thread_heap(h)) return;
  if (c->n++ >= 16) {                 /* the 17th and later: one note, at the first left out */
    if (c->n == 17) text(c->t, "  (more heaps not shown)\n");
    return;
  }
  text(c->t, "  heap %s tid %d   : chunks %zu KiB, large blocks %zu KiB (%zu allocated), %zu remote frees, "
       "%zu current runs taken back while idle, %zu blocks in the thread cache\n",
       heap_states[h->state], (int)h->tid, HLD(h, st_chunk_bytes) / KiB, HLD(h, st_large_bytes) / KiB,
       HLD(h, st_large_allocs), HLD(h, st_remote_frees), HLD(h, st_reclaimed_runs), heap_cached_blocks(h));
}

LOCK_STATIC(print_lock, LOCK_RANK_STATS_PRINT, "statistics report")

LOCUS_EXPORT void locus_stats_print(void) {
  static char buf[8192];   /* static: may run at exit, when stacks are small; under print_lock */
  locus_stats_t st;
  locus_stats_get(&st);
  lock_acquire(&print_lock);
  text_t t = {buf, sizeof buf, 0};
  const os_features_t *f = &os_features;
  text(&t, "locus %s statistics (pid %d, profile %s)\n", locus_version(), os_getpid(),
       profile_name(atomic_load(&locus_opt.profile)));
  text(&t, "  kernel            : %s %s, %d NUMA node%s, THP %s, page %zu KiB, MADV_FREE %s, "
       "MADV_POPULATE_WRITE %s, page reuse %s (%zu mappings)\n", f->kernel, ARCH_NAME, topology_nodes(),
       topology_nodes() == 1 ? "" : "s", os_thp_name(f->thp), f->page_size / 1024, f->madv_free ? "yes" : "no",
       f->madv_populate_write ? "yes" : "no", f->page_reuse ? "yes" : "no", os_page_reuse_maps());
  /* Three different quantities, each labelled with what it counts: what the
   * program holds (large blocks exactly; small and medium blocks are not
   * counted one by one, only the chunks they come from), what locus has
   * mapped, and what is resident for the whole process. */
  memory_t m;
  memory_get(&m);
  mib(&t, "large blocks live : ", m.large_live);
  text(&t, "    (handed out to the program and not freed; small and medium blocks are counted with their chunks)\n");
  mib(&t, "heap chunks       : ", m.chunks);
  text(&t, "    (reserved for small and medium blocks, used or not)\n");
  mib(&t, "cached            : ", st.bytes_cached);
  text(&t, "    (freed, kept mapped by the memory sources for reuse)\n");
  mib(&t, "reserved          : ", st.bytes_in_use + st.bytes_cached);
  text(&t, "    (mapped through the memory sources: chunks, large blocks and cache)\n");
  mib(&t, "peak reserved     : ", st.peak_footprint);
  if (m.resident) {
    mib(&t, "resident          : ", m.resident);
    text(&t, "    (the whole process at this point: program, libraries and locus)\n");
  }
  mib(&t, "returned to OS    : ", st.bytes_returned);
  text(&t, "  system calls      : %zu mmap, %zu munmap, %zu mremap, %zu madvise\n", st.mmap_calls,
       st.munmap_calls, st.mremap_calls, st.madvise_calls);
  text(&t, "  source cache      : %zu hits, %zu misses\n", st.cache_hits, st.cache_misses);
  text(&t, "  heaps             : %zu live, %zu orphaned\n", st.heaps_live, st.heaps_orphaned);
  if (st.bytes_huge) mib(&t, "huge-page bytes   : ", st.bytes_huge);
  thp_report_t hr;
  thp_report(&hr);
  if (hr.active && (hr.huge_samples || hr.base_samples))
    text(&t, "  huge pages        : %s (LOCUS_THP=auto): huge-page fault %zu us, base-page fault %zu ns, "
         "ratio %u.%u%u (costly above %d, %d in a row stop, resume at %d); %zu huge and %zu base samples, %zu stops, %zu resumes, "
         "%zu probes, %zu mappings withdrawn\n", hr.advising ? "advised" : "not advised",
         (size_t)(hr.huge_ns / 1000), (size_t)hr.base_ns, hr.ratio_pct / 100, hr.ratio_pct / 10 % 10, hr.ratio_pct % 10,
         THP_OFF_RATIO, THP_OFF_CONFIRM, THP_ON_RATIO, hr.huge_samples, hr.base_samples, hr.stops, hr.resumes, hr.probes, hr.withdrawn);
  if (st.bytes_decayed || st.bytes_pressure_released)
    text(&t, "  auto released     : %zu KiB by decay, %zu KiB by pressure\n", (size_t)st.bytes_decayed / KiB,
         (size_t)st.bytes_pressure_released / KiB);
  os_ksm_t k;
  if (os_ksm_self(&k) && (k.merging_pages || k.zero_pages || atomic_load(&locus_opt.ksm) != KSM_OPT_OFF))
    text(&t, "  ksm               : %zu pages merged (%zu KiB), %zu zero pages, profit %zu bytes (LOCUS_KSM=%s)\n",
         (size_t)k.merging_pages, (size_t)(k.merging_pages * f->page_size / KiB), (size_t)k.zero_pages,
         (size_t)k.process_profit, atomic_load(&locus_opt.ksm) == KSM_OPT_LARGE ? "large"
                                   : atomic_load(&locus_opt.ksm) == KSM_OPT_ALL ? "all"
                                   : atomic_load(&locus_opt.ksm) == KSM_OPT_AUTO ? "auto" : "off");
  if (ksm_auto()) {
    ksm_auto_stats_t ka;
    ksm_auto_stats(&ka);
    text(&t, "  ksm auto          : %zu of %zu watched blocks advised (%zu KiB); %zu advices (%zu on zero pages), "
         "%zu withdrawn; %zu samples, %zu pages hashed%s\n", ka.advised, ka.watched, ka.advised_bytes / KiB,
         ka.advices, ka.zero_advices, ka.withdrawals, ka.samples, ka.pages_hashed,
         ka.full ? " (table full: some blocks not watched)" : "");
  }
  if (next_touch_faults())
    text(&t, "  next touch        : %zu faults, %zu pages moved\n", next_touch_faults(), next_touch_moved_pages());
  sources_report(report_source, &t);
  heap_ctx_t hc = {&t, 0};
  heaps_report(report_heap, &hc);
  heap_ctx_t uc = {&t, 0};
  uheaps_report(report_uheap, &uc);
  char path[256];
  size_t plen = options_stats_file(path, sizeof path);
  int fd = -1;
  if (plen >= sizeof path) locus_warn("LOCUS_STATS_FILE is longer than %zu bytes once expanded; writing "
                                      "statistics to stderr", sizeof path - 1);
  else if (path[0]) {
    fd = os_open_append(path);
    if (fd < 0) locus_warn("cannot open LOCUS_STATS_FILE \"%s\"; writing statistics to stderr", path);
  }
  size_t n = t.n < sizeof buf ? t.n : sizeof buf - 1;
  if (fd >= 0) {
    os_write_all(fd, buf, n);
    os_close(fd);
  } else {
    os_write_stderr(buf, n);
  }
  lock_release(&print_lock);
}

/* At exit, with LOCUS_STATS. */
__attribute__((destructor)) static void stats_at_exit(void) {
  if (atomic_load(&locus_opt.stats)) locus_stats_print();
}
