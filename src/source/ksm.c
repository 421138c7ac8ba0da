/* LOCUS_KSM=auto: the sampler that decides which large blocks are worth
 * same-page merging (ksm.h has the rule and its constants; docs/sharing.md
 * the measurements).
 *
 * The watch is a table of live large blocks under one lock. The sampler
 * holds the lock while it reads a block's pages, and a block leaves the
 * table under the same lock before it is freed, moved (mremap) or handed to
 * next-touch. The program may still have made a page unreadable (mprotect,
 * an execute-only or pkey-protected page, MADV_DONTFORK in a child) or left
 * it to a userfaultfd handler: the sampler reads only resident pages
 * (mincore; a page never touched counts as zero, and is not faulted in) and
 * copies them with process_vm_readv, which fails instead of raising a
 * signal (a page that cannot be read counts as changed: never advised). A
 * torn read of a page the owner is writing only makes a hash differ, which
 * counts as a change.
 *
 * Each block is sampled at fixed pages (KSM_AUTO_SAMPLES spread evenly over
 * it, past its header page), so that two samples compare the same pages;
 * a sample is a 64-bit hash per page, and whether every sampled word was
 * zero. The sampled pages stand for the block: a block is advised whole, or
 * not at all. */
#include "source/ksm.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "config/options.h"
#include "os/os.h"
#include "os/shm.h"
#include "source/source.h"
#include "util/lock.h"

typedef struct {
  region_t *r;                 /* NULL: a free slot */
  uint64_t last_ns;            /* the latest sample, 0 before the first */
  ksm_track_t t;
  uint64_t h[KSM_AUTO_SAMPLES];
} watch_t;

/* The slots are found without a scan (a large malloc/free pair under auto
 * cost 1.6 µs instead of 0.6 µs with 400 blocks watched when both walked
 * the table): a stack of the free slots below `top`, and an open-addressing
 * index from a region's address to its slot (linear probing, deletion by
 * backward shift, so no tombstones). KSM_INDEX is a power of two at least
 * twice KSM_AUTO_SLOTS, so a probe sequence always meets an empty entry. */
#define KSM_INDEX (2 * KSM_AUTO_SLOTS)
_Static_assert((KSM_INDEX & (KSM_INDEX - 1)) == 0 && KSM_AUTO_SLOTS < UINT16_MAX, "index of 16-bit slot numbers");

static struct {
  lock_t lock;
  size_t top;                  /* slots [0, top) have been used */
  size_t nfree;                /* free slots below top, in `free` */
  size_t cursor;               /* the next slot the sampler looks at */
  uint16_t free[KSM_AUTO_SLOTS];
  uint16_t index[KSM_INDEX];   /* slot + 1 of a watched region; 0: empty */
  _Atomic uint64_t next_ns;    /* the next tick */
  atomic_size_t watched, advised, advised_bytes, advices, withdrawals, zero_advices, pages, samples, full;
  watch_t w[KSM_AUTO_SLOTS];
} K;

bool ksm_thread_off;

bool ksm_auto(void) { return atomic_load_explicit(&locus_opt.ksm, memory_order_relaxed) == KSM_OPT_AUTO; }

/* The sampler's thread: 0 none, 1 started, 2 could not be started. */
static atomic_int sampler_state;

/* The child of fork has no sampler thread: the next block watched starts one. */
static void ksm_fork_child(void) {
  if (atomic_load(&sampler_state) == 1) atomic_store(&sampler_state, 0);
  os_internal_fork_child();
}
static lock_class_t ksm_locks = {.name = "ksm auto (watched blocks)", .rank = LOCK_RANK_KSM, .lock = &K.lock,
                                 .fork_child = ksm_fork_child};
__attribute__((constructor(101))) static void ksm_locks_register(void) {
  lock_init(&K.lock, LOCK_RANK_KSM);
  lock_class_register(&ksm_locks);
}

/* The index entry a region hashes to (regions are page-aligned and a slice
 * long at least: the bits above the slice tell them apart). K.lock held. */
static size_t index_home(const region_t *r) {
  return (size_t)((((uintptr_t)r >> 20) * UINT64_C(0x9e3779b97f4a7c15)) >> 32) & (KSM_INDEX - 1);
}
/* The entry holding r's slot, or KSM_INDEX when r is not watched. */
static size_t index_find(const region_t *r) {
  for (size_t e = index_home(r);; e = (e + 1) & (KSM_INDEX - 1)) {
    if (!K.index[e]) return KSM_INDEX;
    if (K.w[K.index[e] - 1].r == r) return e;
  }
}
static void index_add(const region_t *r, size_t slot) {
  size_t e = index_home(r);
  while (K.index[e]) e = (e + 1) & (KSM_INDEX - 1);
  K.index[e] = (uint16_t)(slot + 1);
}
/* Empties entry e and moves back the entries after it that probing could no
 * longer reach (Knuth's algorithm R): every watched region stays reachable
 * from its home entry without gaps. */
static void index_remove(size_t e) {
  K.index[e] = 0;
  for (size_t j = (e + 1) & (KSM_INDEX - 1); K.index[j]; j = (j + 1) & (KSM_INDEX - 1)) {
    size_t home = index_home(K.w[K.index[j] - 1].r);
    /* j's entry may move to the hole e unless its home lies cyclically in (e, j]. */
    bool stays = e < j ? (home > e && home <= j) : (home > e || home <= j);
    if (stays) continue;
    K.index[e] = K.index[j];
    K.index[j] = 0;
    e = j;
  }
}

static inline void bump(atomic_size_t *c, size_t n) { atomic_fetch_add_explicit(c, n, memory_order_relaxed); }
static inline void drop(atomic_size_t *c, size_t n) { atomic_fetch_sub_explicit(c, n, memory_order_relaxed); }

/* A program that computes for seconds without calling the allocator (the
 * time steps of a simulation) gives the sampler no tick: a thread of its
 * own wakes every KSM_AUTO_TICK_NS while blocks are watched (every second
 * otherwise) and ticks. It never allocates and holds no lock while asleep. */
static void *sampler_main(void *arg) {
  (void)arg;
  for (;;) {
    os_sleep_ns(atomic_load_explicit(&K.watched, memory_order_relaxed) ? KSM_AUTO_TICK_NS : 10 * KSM_AUTO_TICK_NS);
    /* The program's last thread ended with pthread_exit: the process ends,
     * as POSIX says, rather than live on in locus's threads. */
    if (os_internal_exit_due()) os_internal_exit();
    ksm_tick(os_clock_coarse_ns());
  }
  return NULL;
}

static void sampler_start(void) {
  int s = 0;
  if (!atomic_compare_exchange_strong(&sampler_state, &s, 1)) return;
  /* Every signal blocked in it: the program's signals (SIGCHLD, a
   * sigwait-ed SIGTERM, handlers with large frames) go to its own threads. */
  int err = os_internal_thread_start(sampler_main, NULL);
  if (err) {
    atomic_store(&sampler_state, 2);
    locus_warn("LOCUS_KSM=auto: no sampler thread (error %d): blocks are sampled only when the program allocates", err);
  }
}

void ksm_watch(region_t *r) {
  if (!ksm_auto() || (r->flags & (REGION_USER | REGION_FILE | REGION_NEXT_TOUCH | REGION_KSM_WATCH))) return;
  lock_acquire(&K.lock);
  size_t i;
  if (K.nfree) i = K.free[--K.nfree];
  else if (K.top < KSM_AUTO_SLOTS) i = K.top++;
  else {
    lock_release(&K.lock);
    bump(&K.full, 1);
    return;
  }
  LOCUS_ASSERT(!K.w[i].r && index_find(r) == KSM_INDEX);
  K.w[i] = (watch_t){.r = r, .t = {.need = KSM_AUTO_STABLE}};
  index_add(r, i);
  r->flags |= REGION_KSM_WATCH;
  if (r->flags & REGION_KSM_AUTO) {    /* moved by mremap: the kernel's mapping kept the advice */
    bump(&K.advised, 1);
    bump(&K.advised_bytes, r->size);
  }
  bump(&K.watched, 1);
  lock_release(&K.lock);
  if (unlikely(atomic_load_explicit(&sampler_state, memory_order_relaxed) == 0) && !ksm_thread_off) sampler_start();
}

void ksm_unwatch(region_t *r) {
  if (!(r->flags & REGION_KSM_WATCH)) return;   /* set and cleared by the block's owner only */
  lock_acquire(&K.lock);
  size_t e = index_find(r);
  LOCUS_ASSERT(e < KSM_INDEX);         /* REGION_KSM_WATCH: it has a slot */
  if (e < KSM_INDEX) {
    size_t i = K.index[e] - 1u;
    K.w[i].r = NULL;
    index_remove(e);
    K.free[K.nfree++] = (uint16_t)i;
  }
  r->flags &= (uint8_t)~REGION_KSM_WATCH;
  if (r->flags & REGION_KSM_AUTO) {
    drop(&K.advised, 1);
    drop(&K.advised_bytes, r->size);
  }
  drop(&K.watched, 1);
  lock_release(&K.lock);
}

void ksm_disown(region_t *r) {
  ksm_unwatch(r);
  if (!(r->flags & REGION_KSM_AUTO)) return;   /* the program's own advice (locus_merge) stays */
  os_merge(r, r->size, false);
  r->map = source_new_map_id();
  r->flags &= (uint8_t)~(REGION_MERGEABLE | REGION_KSM_AUTO);
  bump(&K.withdrawals, 1);
}

ksm_verdict_t ksm_judge(ksm_track_t *t, bool changed, bool zero, bool advised) {
  if (!t->nsamp) {                     /* the first sample: nothing to compare with */
    t->nsamp = 1;
    t->same = 0;
    t->zeros = zero;
    return KSM_VERDICT_WAIT;
  }
  if (t->nsamp < UINT8_MAX) t->nsamp++;
  if (changed) {
    t->same = 0;
    t->zeros = zero;
    if (advised) {                     /* written after the advice: merging it costs faults */
      t->need = t->need * 2 > KSM_AUTO_STABLE_MAX ? KSM_AUTO_STABLE_MAX : (uint8_t)(t->need * 2);
      return KSM_VERDICT_WITHDRAW;
    }
    return KSM_VERDICT_WAIT;
  }
  if (t->same < UINT8_MAX) t->same++;
  if (zero && t->zeros < UINT8_MAX) t->zeros++;
  if (!zero) t->zeros = 0;
  if (advised) return KSM_VERDICT_WAIT;
  return t->same >= t->need || (zero && t->zeros >= ksm_zero_need(t)) ? KSM_VERDICT_ADVISE : KSM_VERDICT_WAIT;
}

/* How many pages of r a sample hashes; *n_out: the pages past the header page. */
static size_t sample_pages(const region_t *r, size_t page, size_t *n_out) {
  size_t n = r->size / page;
  n = n > 1 ? n - 1 : 0;               /* past the header page */
  *n_out = n;
  return n < KSM_AUTO_SAMPLES ? n : KSM_AUTO_SAMPLES;
}

static uint64_t page_hash(const uint64_t *p, size_t words, bool *zero) {
  uint64_t h = 0xcbf29ce484222325ull, any = 0;
  for (size_t i = 0; i < words; i++) {
    uint64_t x = p[i];
    any |= x;
    h = (h ^ x) * 0x100000001b3ull;
    h ^= h >> 31;
  }
  *zero = !any;
  return h;
}

/* The sampled page's copy (under the lock), sized for the largest page. */
static uint64_t copy[65536 / sizeof(uint64_t)];
static uint64_t unreadable;

/* Caller holds the lock: one sample of w (k pages hashed) and its verdict. */
static void sample(watch_t *w, uint64_t now) {
  region_t *r = w->r;
  size_t page = os_page_size(), n, k = sample_pages(r, page, &n);
  bool changed = false, zero = true;
  for (size_t i = 0; i < k; i++) {
    /* One page in each of k strata, at an offset drawn from the block's
     * address: evenly spaced pages would all fall in the same phase of a
     * periodic layout (the runs of a mesh). */
    size_t lo = i * n / k, span = (i + 1) * n / k - lo;
    uint64_t x = ((uintptr_t)r >> 12) * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 31;
    size_t idx = 1 + lo + (span ? x % span : 0);
    bool z = true;
    uint64_t h = 0;                    /* not resident: zero, as the kernel would fill it */
    const char *src = (char *)r + idx * page;
    if (os_page_resident(src)) {
      if (os_read_self(copy, src, page)) h = page_hash(copy, page / sizeof(uint64_t), &z);
      else h = ++unreadable, z = false;   /* a hash no sample repeats: a change */
    }
    changed |= h != w->h[i];
    zero &= z;
    w->h[i] = h;
  }
  w->last_ns = now;
  bump(&K.pages, k);
  bump(&K.samples, 1);
  bool advised = r->flags & REGION_KSM_AUTO;
  ksm_verdict_t v = ksm_judge(&w->t, changed, zero, advised);
  if (v == KSM_VERDICT_ADVISE) {
    if (os_merge(r, r->size, true)) return;   /* no KSM: stays watched, never advised */
    /* The advice splits the kernel's mapping: a mapping of its own, which
     * the cached pieces of the old one never join (source.c). */
    r->map = source_new_map_id();
    r->flags |= REGION_MERGEABLE | REGION_KSM_AUTO;
    bump(&K.advices, 1);
    if (zero) bump(&K.zero_advices, 1);
    bump(&K.advised, 1);
    bump(&K.advised_bytes, r->size);
  } else if (v == KSM_VERDICT_WITHDRAW) {
    os_merge(r, r->size, false);
    r->map = source_new_map_id();
    r->flags &= (uint8_t)~(REGION_MERGEABLE | REGION_KSM_AUTO);
    bump(&K.withdrawals, 1);
    drop(&K.advised, 1);
    drop(&K.advised_bytes, r->size);
  }
}

void ksm_tick(uint64_t now) {
  if (likely(!ksm_auto())) return;
  uint64_t due = atomic_load_explicit(&K.next_ns, memory_order_relaxed);
  if (now < due || !atomic_compare_exchange_strong(&K.next_ns, &due, now + KSM_AUTO_TICK_NS)) return;
  if (!lock_try(&K.lock)) return;
  size_t budget = KSM_AUTO_BUDGET, page = os_page_size();
  for (size_t seen = 0; seen < K.top; seen++) {
    if (K.cursor >= K.top) K.cursor = 0;
    watch_t *w = &K.w[K.cursor];
    if (w->r && (!w->last_ns || now - w->last_ns >= KSM_AUTO_PERIOD_NS)) {
      size_t n, k = sample_pages(w->r, page, &n);
      if (k > budget) break;           /* this one first at the next tick */
      if (!k) {                        /* no page past the header: nothing to judge (regions are a slice at least) */
        K.cursor++;
        continue;
      }
      sample(w, now);
      budget -= k;
    }
    K.cursor++;
  }
  lock_release(&K.lock);
}

void ksm_auto_stats(ksm_auto_stats_t *s) {
  *s = (ksm_auto_stats_t){
      .watched = atomic_load(&K.watched), .advised = atomic_load(&K.advised),
      .advised_bytes = atomic_load(&K.advised_bytes), .advices = atomic_load(&K.advices),
      .withdrawals = atomic_load(&K.withdrawals), .zero_advices = atomic_load(&K.zero_advices),
      .pages_hashed = atomic_load(&K.pages), .samples = atomic_load(&K.samples), .full = atomic_load(&K.full)};
}
