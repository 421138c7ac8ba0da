/* The adaptive controller (LOCUS_PROFILE=auto). The rule, per memory source
 * and per kind of cached memory (heap chunks; large segments):
 *
 *  - A cached segment is kept while it is likely to be asked for again: the
 *    kind's window is ADAPT_WINDOW_FACTOR times the reuse distance observed
 *    on its hits (the time between a segment's caching and its reuse; a
 *    maximum that decays by 1/64 per tick of the source, a half-life of
 *    about 0.45 s), within [ADAPT_WINDOW_MIN_NS, the kind's maximum]:
 *    ADAPT_WINDOW_MAX_NS for large segments, ADAPT_CHUNK_WINDOW_MAX_NS for
 *    chunks. Segments older than their kind's window go back to the OS,
 *    oldest first; a chunk only at a second look, ADAPT_CHUNK_GRACE_NS after
 *    a tick first found it stale (source_decay).
 *  - A miss of a kind (a fresh mapping: page faults and system calls) within
 *    the kind's window (at least ADAPT_REGRET_NS) after a decay of that kind,
 *    for at most twice the bytes released and not yet taken back, is a
 *    regret: the program reuses at a
 *    longer distance than measured: the distance since the released memory
 *    was cached counts as an observed one, and the measured distance at
 *    least doubles. Each regret takes back the bytes it re-maps, so every
 *    released chunk mapped again counts once. Growth by mremap (of a cached
 *    segment or of a live block) counts as a miss for its new tail.
 *  - The ledger: while at least half of the bytes a kind's decays released
 *    over the run came back as regrets, releasing that kind costs more page
 *    faults than it saves resident memory: its reuse distance stops decaying
 *    (the window stays where the regrets put it) until the balance turns.
 *  - Memory pressure bounds the cache: at most half of the headroom left (the
 *    smaller of MemAvailable and the cgroup's limit minus its usage, less our
 *    own growth since the sample, less a reserve); PSI "some avg10" of
 *    ADAPT_PSI_HIGH or more, or a headroom under the reserve, releases every
 *    cached byte at once, and so does a fresh mapping that would eat into the
 *    reserve, and so does a cgroup v2 "oom" event (memory.events) since the
 *    previous sample. The ledger does not hold memory against pressure.
 *
 * Nothing runs in the background: the sources call adapt_tick on their slow
 * paths and the heaps on theirs (every 32nd run refill or medium allocation,
 * and every 32nd heap_cache_tick of the thread cache's frees).
 * The pressure files are read at most every ADAPT_SAMPLE_NS, by one thread
 * (the one that wins the time stamp). */
#include "source/adapt.h"

#include "os/os.h"
#include "source/source.h"
#include "types.h"
#include "config/options.h"
#include "util/stats.h"

static struct {
  _Atomic uint64_t next_sample_ns;
  _Atomic uint64_t next_tick_ns;  /* the sources are examined together, at most every ADAPT_TICK_NS */
  atomic_int psi;                /* hundredths of a percent, -1 unknown */
  atomic_size_t headroom;        /* at the sample; SIZE_MAX unknown */
  atomic_size_t footprint;       /* locus's mapped bytes at the sample */
  atomic_size_t reserve;
  atomic_size_t cg_limit;
  atomic_int cg_version;
  atomic_size_t cg_events;       /* v2 "oom" events at the sample; SIZE_MAX unknown */
  atomic_bool cg_oom;            /* they rose since the sample before: release at once */
} pr = {.cg_events = SIZE_MAX, .psi = -1, .headroom = SIZE_MAX, .reserve = ADAPT_RESERVE, .cg_limit = SIZE_MAX};

bool adapt_active(void) {
  return atomic_load_explicit(&locus_opt.profile, memory_order_relaxed) == PROFILE_AUTO;
}

uint64_t adapt_now(void) { return os_clock_coarse_ns(); }

static size_t footprint(void) {
  return atomic_load_explicit(&locus_stats.in_use, memory_order_relaxed) +
         atomic_load_explicit(&locus_stats.cached, memory_order_relaxed);
}

/* The headroom now: the sampled one less what locus mapped since (its own
 * growth is known without reading any file). Memory locus gave back since is
 * not credited until the next sample. */
static size_t headroom_now(void) {
  size_t h = atomic_load_explicit(&pr.headroom, memory_order_relaxed);
  if (h == SIZE_MAX) return h;
  size_t f = footprint(), f0 = atomic_load_explicit(&pr.footprint, memory_order_relaxed);
  size_t grew = f > f0 ? f - f0 : 0;
  return h > grew ? h - grew : 0;
}

static bool pressure_high(void) {
  int psi = atomic_load_explicit(&pr.psi, memory_order_relaxed);
  return psi >= ADAPT_PSI_HIGH || atomic_load_explicit(&pr.cg_oom, memory_order_relaxed) ||
         headroom_now() < atomic_load_explicit(&pr.reserve, memory_order_relaxed);
}

static void sample(uint64_t now) {
  uint64_t due = atomic_load_explicit(&pr.next_sample_ns, memory_order_relaxed);
  if (now < due || !atomic_compare_exchange_strong(&pr.next_sample_ns, &due, now + ADAPT_SAMPLE_NS)) return;
  os_pressure_t p;
  os_memory_pressure(&p);
  size_t h = p.mem_available;
  size_t reserve = ADAPT_RESERVE;
  if (p.cg_limit != SIZE_MAX && p.cg_usage != SIZE_MAX) {
    size_t cg = p.cg_limit > p.cg_usage ? p.cg_limit - p.cg_usage : 0;
    if (cg < h) h = cg;
    if (p.cg_limit / 8 < reserve) reserve = p.cg_limit / 8;
  }
  atomic_store_explicit(&pr.footprint, footprint(), memory_order_relaxed);
  atomic_store_explicit(&pr.headroom, h, memory_order_relaxed);
  atomic_store_explicit(&pr.reserve, reserve, memory_order_relaxed);
  atomic_store_explicit(&pr.psi, p.psi_some_avg10, memory_order_relaxed);
  atomic_store_explicit(&pr.cg_limit, p.cg_limit, memory_order_relaxed);
  atomic_store_explicit(&pr.cg_version, p.cg_version, memory_order_relaxed);
  size_t e0 = atomic_exchange_explicit(&pr.cg_events, p.cg_events, memory_order_relaxed);
  atomic_store_explicit(&pr.cg_oom, e0 != SIZE_MAX && p.cg_events != SIZE_MAX && p.cg_events > e0,
                        memory_order_relaxed);
}

static uint64_t kind_max(adapt_kind_t k) {
  return k == ADAPT_CHUNK ? ADAPT_CHUNK_WINDOW_MAX_NS : ADAPT_WINDOW_MAX_NS;
}

static uint64_t window_of(const adapt_learn_t *l, adapt_kind_t k) {
  uint64_t w = l->reuse_ns * ADAPT_WINDOW_FACTOR, max = kind_max(k);
  return w < ADAPT_WINDOW_MIN_NS ? ADAPT_WINDOW_MIN_NS : w > max ? max : w;
}

uint64_t adapt_window(const adapt_t *a, adapt_kind_t k) { return window_of(&a->k[k], k); }

/* The report's copy, written only when it moved (it is read by other threads). */
static void publish(adapt_learn_t *l, adapt_kind_t k) {
  uint64_t w = window_of(l, k);
  if (atomic_load_explicit(&l->window_ns, memory_order_relaxed) != w)
    atomic_store_explicit(&l->window_ns, w, memory_order_relaxed);
}

/* A re-map this soon after a release is a regret: within the kind's window
 * (the time the memory would have been kept) or ADAPT_REGRET_NS. */
static uint64_t regret_horizon(const adapt_learn_t *l, adapt_kind_t k) {
  uint64_t w = window_of(l, k);
  return w > ADAPT_REGRET_NS ? w : ADAPT_REGRET_NS;
}

void adapt_hit(adapt_t *a, adapt_kind_t k, uint64_t cached_ns, uint64_t now) {
  adapt_learn_t *l = &a->k[k];
  uint64_t d = now > cached_ns ? now - cached_ns : 0;
  if (d <= l->reuse_ns) return;         /* nothing learnt: the shared line is left alone */
  uint64_t cap = kind_max(k) / ADAPT_WINDOW_FACTOR;
  l->reuse_ns = d > cap ? cap : d;
  publish(l, k);
}

void adapt_miss(adapt_t *a, adapt_kind_t k, size_t size, uint64_t now) {
  adapt_learn_t *l = &a->k[k];
  if (!l->last_decay_bytes || l->last_decay_ns + regret_horizon(l, k) < now || l->last_decay_bytes < size / 2) return;
  /* The distance this reuse would have needed: since the released memory was cached. */
  uint64_t r = now > l->last_decay_cached_ns ? now - l->last_decay_cached_ns : 0, cap = kind_max(k) / ADAPT_WINDOW_FACTOR;
  if (r < 2 * l->reuse_ns) r = 2 * l->reuse_ns;   /* at least double: the measure fell short */
  l->reuse_ns = r > cap ? cap : r;
  size_t taken = size < l->last_decay_bytes ? size : l->last_decay_bytes;
  l->last_decay_bytes -= taken;        /* each released byte is regretted once */
  l->run_regretted += taken;
  atomic_fetch_add_explicit(&l->regrets, 1, memory_order_relaxed);
  publish(l, k);
}

void adapt_released(adapt_t *a, adapt_kind_t k, size_t bytes, uint64_t cached_ns, uint64_t now) {
  adapt_learn_t *l = &a->k[k];
  /* Decays within the regret horizon add up: a miss is compared with all
   * the memory of its kind released lately, not only the latest piece. */
  if (l->last_decay_ns + regret_horizon(l, k) < now || !l->last_decay_bytes) {
    l->last_decay_bytes = 0;
    l->last_decay_cached_ns = cached_ns;   /* the oldest released lately */
  }
  l->last_decay_ns = now;
  l->last_decay_bytes += bytes;
  l->run_decayed += bytes;
}

/* The ledger: a kind whose released bytes came back at least half the time
 * keeps its measured distance. */
static bool kind_held(const adapt_learn_t *l) { return l->run_regretted && 2 * l->run_regretted >= l->run_decayed; }

void adapt_age(adapt_t *a) {
  for (int k = 0; k < ADAPT_KINDS; k++) {
    adapt_learn_t *l = &a->k[k];
    if (!kind_held(l)) l->reuse_ns -= l->reuse_ns / 64;   /* once per tick: half-life about 0.45 s */
    publish(l, (adapt_kind_t)k);
  }
}

size_t adapt_regrets(const adapt_t *a) {
  size_t n = 0;
  for (int k = 0; k < ADAPT_KINDS; k++) n += atomic_load_explicit(&a->k[k].regrets, memory_order_relaxed);
  return n;
}

size_t adapt_bound(adapt_t *a) {
  size_t max = atomic_load_explicit(&locus_opt.cache_max, memory_order_relaxed);
  size_t b = max;
  if (pressure_high()) {
    b = 0;
  } else {
    size_t h = headroom_now(), reserve = atomic_load_explicit(&pr.reserve, memory_order_relaxed);
    size_t room = h == SIZE_MAX ? SIZE_MAX : h > reserve ? (h - reserve) / 2 : 0;
    if (room < b) b = room;
  }
  /* Called on every free into the cache: written only when it moved. */
  if (atomic_load_explicit(&a->bound, memory_order_relaxed) != b) atomic_store_explicit(&a->bound, b, memory_order_relaxed);
  return b;
}

bool adapt_fresh_needs_room(size_t size) {
  size_t h = headroom_now();
  return h != SIZE_MAX && h < size + atomic_load_explicit(&pr.reserve, memory_order_relaxed) &&
         atomic_load_explicit(&locus_stats.cached, memory_order_relaxed) > 0;
}

static void tick_source(source_t *s, void *ctx) {
  uint64_t now = *(uint64_t *)ctx;
  adapt_t *a = &s->adapt;
  if (!atomic_load_explicit(&s->nseg, memory_order_relaxed)) return;
  size_t bound = adapt_bound(a);
  if (atomic_load_explicit(&s->cached, memory_order_relaxed) > bound) {
    size_t n = source_trim(s, bound);
    atomic_fetch_add_explicit(&a->pressured, n, memory_order_relaxed);
    stat_add(&locus_stats.pressured, n);
  }
  source_decay(s, now);
}

/* On every source entry and every 32nd heap slow path: between ticks it
 * costs two loads of read-mostly words (no per-source work). */
void adapt_tick(uint64_t now) {
  sample(now);
  uint64_t due = atomic_load_explicit(&pr.next_tick_ns, memory_order_relaxed);
  if (now < due || !atomic_compare_exchange_strong(&pr.next_tick_ns, &due, now + ADAPT_TICK_NS)) return;
  sources_for_each(tick_source, &now);
}

void adapt_pressure_get(adapt_pressure_t *p) {
  p->psi = atomic_load(&pr.psi);
  p->headroom = headroom_now();
  p->cg_version = atomic_load(&pr.cg_version);
  p->cg_limit = atomic_load(&pr.cg_limit);
  p->high = pressure_high();
}
