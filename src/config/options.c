/* Settings: one table of every LOCUS_* variable (name, type, default, range,
 * documentation); the environment, locus_option_get/set, the verbose listing,
 * the JSON report and the README's table all come from it.
 *
 * A malformed or out-of-range value in the environment prints one warning
 * naming the variable, the value and what is accepted, and the default stays
 * in force. A LOCUS_ name that is no setting but close to one (a misspelling,
 * LOCUS_PROFLE) is warned about once, naming the closest setting; names far
 * from every setting belong to the tools (LOCUS_LIB...) and pass silently.
 * In secure-execution mode (setuid and the like) the environment is
 * not read at all (os_getenv returns NULL): a less privileged user must not
 * steer a privileged program's allocator or make it write files.
 *
 * Once per process tree: a process that printed its banner (LOCUS_VERBOSE=1)
 * or a warning about an unknown name sets LOCUS_SHOWN_BY=<its pid>:<hash> in
 * its environment (from a constructor, outside malloc), where <hash> names
 * the set of misspelled LOCUS_ names its environment held; the programs it
 * starts inherit it and print no banner, and warn about misspellings only
 * when their own set differs (a name set in a child is still warned about).
 * LOCUS_VERBOSE=all prints the banner in each. */
#include "config/options.h"

#include <errno.h>
#include <string.h>

#include "arch/arch.h"
#include "os/topology.h"
#include "os/os.h"
#include "types.h"
#include "util/lock.h"
#include "config/trace.h"

options_t locus_opt = {
  .profile = PROFILE_AUTO,
  .cache_max = 500 * MiB,
  .cache_bound = 500 * MiB,
  .cache_max_segment = 256 * MiB,
  .large_threshold = 1 * MiB,
  .thread_cache = 256 * KiB,
  .lazy_release = false,
  .page_reuse = true,
  .color = true,
  .thp = THP_OPT_AUTO,
  .overlap = true,
  .overlap_min = 64 * KiB,
  .overlap_copy_max = 512 * KiB,
  .overlap_poll_us = 50,
  .numa_policy = NUMA_LOCAL,
  .numa_node = -1,
};

static const char *const profile_names[] = {"eco", "uma", "numa", "auto", NULL};
static const char *const thp_names[] = {"auto", "on", "off", NULL};
static const char *const ksm_names[] = {"off", "large", "all", "auto", NULL};
static const char *const next_touch_names[] = {"auto", "uffd", "protect", NULL};

const char *profile_name(profile_t p) { return profile_names[p]; }

/* Set in the environment by a process that printed its banner or its
 * unknown-name warnings, for the processes it starts (see the top). */
#define SHOWN_VAR "LOCUS_SHOWN_BY"
static bool verbose_all;               /* LOCUS_VERBOSE=all: the banner in every process */
static bool shown_here;                /* this process printed what SHOWN_VAR stands for */

/* The statistics file name; written under the lock, copied out under it. */
LOCK_STATIC(file_lock, LOCK_RANK_OPTIONS_FILE, "options file names")
static char stats_file[256];
static char trace_file[256];           /* start-up only: read once, then trace.c keeps a copy */

/* Bytes a source keeps under the profile: eco keeps nothing (memory goes back
 * to the OS at once), unless it releases lazily (MADV_FREE), where it keeps
 * the freed ranges up to LOCUS_CACHE_MAX: the kernel may take their pages at
 * any time, and reusing them costs no fault while it has not. */
static void update_bound(void) {
  profile_t p = atomic_load(&locus_opt.profile);
  size_t max = atomic_load(&locus_opt.cache_max);
  /* auto: LOCUS_CACHE_MAX is the ceiling; each source's controller sets its own bound below it. */
  size_t bound = p == PROFILE_ECO ? (atomic_load(&locus_opt.lazy_release) ? max : 0) : max;
  atomic_store(&locus_opt.cache_bound, bound);
}

/* ---- parsing --------------------------------------------------------------- */

/* "512M", "2G", "64k", "1T", "1048576"; binary multiples; optional "iB"/"B". */
static bool parse_size(const char *s, size_t *out) {
  if (!*s) return false;
  size_t v = 0;
  const char *p = s;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (v > (SIZE_MAX - 9) / 10) return false;
    v = v * 10 + (size_t)(*p - '0');
  }
  if (p == s) return false;
  int shift = 0;
  switch (*p) {
  case 0: break;
  case 'k': case 'K': shift = 10; p++; break;
  case 'm': case 'M': shift = 20; p++; break;
  case 'g': case 'G': shift = 30; p++; break;
  case 't': case 'T': shift = 40; p++; break;
  default: return false;
  }
  if (shift && (*p == 'i' || *p == 'I')) p++;
  if (shift && (*p == 'b' || *p == 'B')) p++;
  if (*p) return false;
  if (shift && v > (SIZE_MAX >> shift)) return false;
  *out = v << shift;
  return true;
}

static bool parse_bool(const char *s, bool *out) {
  if (!strcmp(s, "1") || !strcmp(s, "yes") || !strcmp(s, "on") || !strcmp(s, "true")) { *out = true; return true; }
  if (!strcmp(s, "0") || !strcmp(s, "no") || !strcmp(s, "off") || !strcmp(s, "false")) { *out = false; return true; }
  return false;
}

/* Sizes print in the largest binary unit that divides them exactly. */
static size_t format_size(char *buf, size_t len, size_t v) {
  static const char units[] = "kMGT";
  int u = -1;
  while (u < 3 && v && v % 1024 == 0) {
    v /= 1024;
    u++;
  }
  return u < 0 ? fmt_buf(buf, len, "%zu", v) : fmt_buf(buf, len, "%zu%c", v, units[u]);
}

/* ---- the table ------------------------------------------------------------- */
typedef enum { T_BOOL, T_SIZE, T_ENUM, T_STRING, T_NUMA } opt_type_t;

typedef struct {
  option_info_t info;
  opt_type_t type;
  size_t lo, hi;                   /* T_SIZE */
  const char *const *choices;      /* T_ENUM */
  void *field;                     /* atomic_bool, atomic_size_t, size_t, _Atomic profile_t, char[256] */
  void (*changed)(void);           /* run after a run-time change */
} option_t;

/* The sources apply the new bound (api/options.c: options_set returns 1). */
static void profile_changed(void) { update_bound(); }

#define RT true
#define START false
static option_t table[] = {
  {{"profile", "LOCUS_PROFILE", "enum", "auto", "eco, uma, numa, auto",
    "How much freed memory the sources keep: eco none (lowest footprint, but every large block is mapped "
    "and faulted anew: several times slower than glibc where large blocks are freed and allocated in a loop), uma up to "
    "LOCUS_CACHE_MAX in one source, numa up to LOCUS_CACHE_MAX per NUMA node, reused on the same node; "
    "auto decides per source from reuse and memory pressure (docs/adaptive.md).", RT},
   T_ENUM, 0, 0, profile_names, &locus_opt.profile, profile_changed},
  {{"cache_max", "LOCUS_CACHE_MAX", "size", "500M", "0 to 64T",
    "Bound of the uma and numa caches (numa: per node). eco keeps nothing, unless LOCUS_LAZY_RELEASE=1.", RT},
   T_SIZE, 0, (size_t)1 << 46, NULL, &locus_opt.cache_max, profile_changed},
  {{"cache_max_segment", "LOCUS_CACHE_MAX_SEGMENT", "size", "256M", "4k to 64T",
    "Largest freed segment worth caching; larger ones go back to the OS at once.", RT},
   T_SIZE, 4096, (size_t)1 << 46, NULL, &locus_opt.cache_max_segment, NULL},
  {{"large_threshold", "LOCUS_LARGE_THRESHOLD", "size", "1M", "16k to 32M",
    "Blocks above this size are large segments, served by the memory sources.", START},
   T_SIZE, 16 * KiB, 32 * MiB, NULL, &locus_opt.large_threshold, NULL},
  {{"thread_cache", "LOCUS_THREAD_CACHE", "size", "256k", "0 to 1M",
    "Small blocks a thread keeps for its own next mallocs, in bytes per size class (at most 1024 blocks "
    "per class): a block freed is handed out again while still in the thread's caches. 0: none.", START},
   T_SIZE, 0, MiB, NULL, &locus_opt.thread_cache, NULL},
  {{"lazy_release", "LOCUS_LAZY_RELEASE", "bool", "0", "0/1, yes/no, on/off, true/false",
    "Release freed segments with MADV_FREE and keep them: eco then keeps up to LOCUS_CACHE_MAX instead of "
    "unmapping; in every profile the kernel may reclaim the cached pages under memory pressure.", RT},
   T_BOOL, 0, 0, NULL, &locus_opt.lazy_release, profile_changed},
  {{"page_reuse", "LOCUS_PAGE_REUSE", "bool", "1", "0/1, yes/no, on/off, true/false",
    "With the eco profile, map segments with the kernel's page reuse when it has it (locus's kernel series, "
    "docs/kernel.md): memory given back comes again without being cleared; calloc clears it.", RT},
   T_BOOL, 0, 0, NULL, &locus_opt.page_reuse, NULL},
  {{"color", "LOCUS_COLOR", "bool", "1", "0/1, yes/no, on/off, true/false",
    "Start large blocks at a varying multiple of 64 bytes so that arrays do not collide in the caches.", RT},
   T_BOOL, 0, 0, NULL, &locus_opt.color, NULL},
  {{"thp", "LOCUS_THP", "enum", "auto", "auto, on, off",
    "Transparent huge pages for large blocks of 4 MiB or more: their mappings start on a 2 MiB boundary "
    "and are advised (MADV_HUGEPAGE) when the kernel's THP mode is madvise. auto: when the kernel allows "
    "THP and the profile is not eco (eco too with the kernel's page reuse, which pools 2 MiB pages), and "
    "only while a huge-page fault costs this process no more than the base-page faults it replaces "
    "(measured on fresh mappings, docs/adaptive.md; the decision is in LOCUS_STATS); "
    "on: always, also under eco; off: never.", RT},
   T_ENUM, 0, 0, thp_names, &locus_opt.thp, NULL},
  {{"ksm", "LOCUS_KSM", "enum", "off", "off, large, all, auto",
    "Same-page merging (KSM, docs/sharing.md): large: advise large blocks MADV_MERGEABLE (once per "
    "mapping: the advice stays with a block recycled or grown); all: heap chunks too; auto: only the "
    "large blocks whose sampled pages stay unchanged for 3 s (or zero for 1 s), withdrawn when they "
    "change again and dropped when they are freed; off: only what "
    "the program advises with locus_merge. The kernel merges only while KSM runs "
    "(/sys/kernel/mm/ksm/run); locus info shows its state.", START},
   T_ENUM, 0, 0, ksm_names, &locus_opt.ksm, NULL},
  {{"next_touch", "LOCUS_NEXT_TOUCH", "enum", "auto", "auto, uffd, protect",
    "How locus_next_touch traps the next access (docs/numa.md). uffd: userfaultfd, so that system calls "
    "into a pending range wait for the migration instead of failing with EFAULT (needs /dev/userfaultfd "
    "access, CAP_SYS_PTRACE or vm.unprivileged_userfaultfd=1, and Linux 6.8); protect: page protection "
    "and a SIGSEGV handler (system calls fail with EFAULT, see locus_next_touch_resolve); auto: uffd when "
    "allowed, else protect.", START},
   T_ENUM, 0, 0, next_touch_names, &locus_opt.next_touch, NULL},
  {{"overlap", "LOCUS_OVERLAP", "bool", "1", "0/1, yes/no, on/off, true/false",
    "With liblocus-overlap.so loaded (locus run --overlap, docs/overlap.md): 0 turns it off (MPI calls "
    "block as without it). liblocus.so alone ignores it, as the other LOCUS_OVERLAP_* settings.", START},
   T_BOOL, 0, 0, NULL, &locus_opt.overlap, NULL},
  {{"overlap_min", "LOCUS_OVERLAP_MIN", "size", "64k", "4k to 1G",
    "With overlap: blocks of at least this size (aligned to a page at most) are memory-file-backed, so "
    "that transfers from or into them can be guarded by page protection and overlapped.", START},
   T_SIZE, 4 * KiB, GiB, NULL, &locus_opt.overlap_min, NULL},
  {{"overlap_copy_max", "LOCUS_OVERLAP_COPY_MAX", "size", "512k", "0 to 64M",
    "With overlap: a send from memory that cannot be guarded (stack, globals, small blocks) is copied "
    "and overlapped up to this size (measured: bench/overlap/copy_threshold.sh, docs/overlap.md); larger "
    "ones block.", START},
   T_SIZE, 0, 64 * MiB, NULL, &locus_opt.overlap_copy_max, NULL},
  {{"overlap_poll_us", "LOCUS_OVERLAP_POLL_US", "size", "50", "0 to 100000",
    "With overlap: the longest sleep, in microseconds, of the progress thread between two tests of pending "
    "requests (it sleeps without a timeout when none is pending).", START},
   T_SIZE, 0, 100000, NULL, &locus_opt.overlap_poll_us, NULL},
  {{"overlap_stats", "LOCUS_OVERLAP_STATS", "bool", "0", "0/1, yes/no, on/off, true/false",
    "With overlap: each rank prints at MPI_Finalize the calls it guarded, copied and blocked, and the "
    "faults and system calls that waited.", START},
   T_BOOL, 0, 0, NULL, &locus_opt.overlap_stats, NULL},
  {{"stats", "LOCUS_STATS", "bool", "0", "0/1, yes/no, on/off, true/false",
    "Print statistics at exit (to stderr, or LOCUS_STATS_FILE).", RT},
   T_BOOL, 0, 0, NULL, &locus_opt.stats, NULL},
  {{"stats_file", "LOCUS_STATS_FILE", "string", "", "a path (up to 255 bytes)",
    "Append the statistics report to this file instead of stderr. Ignored in secure-execution mode.", RT},
   T_STRING, 0, 0, NULL, stats_file, NULL},
  {{"trace_file", "LOCUS_TRACE_FILE", "string", "", "a path (up to 255 bytes)",
    "Append a line per large allocation, resize and free (address, size, call-site candidates) to this "
    "file, for locus align. Off when empty. Ignored in secure-execution mode.", START},
   T_STRING, 0, 0, NULL, trace_file, NULL},
  {{"numa", "LOCUS_NUMA", "policy", "local", "local, interleave, bind:N, preferred:N (N an allowed node)",
    "Where memory goes when the program does not say: local (the thread's node when it is bound to one "
    "node and the profile is numa, else first touch), interleave (pages round-robin over the allowed "
    "nodes), bind:N (every page on node N), preferred:N (node N while it has free memory).", START},
   T_NUMA, 0, 0, NULL, NULL, NULL},
  {{"verbose", "LOCUS_VERBOSE", "bool", "0", "0/1, yes/no, on/off, true/false, all",
    "Print a banner (version, profile, nodes, kernel features) and the effective settings at start, in the "
    "first process of a process tree (it sets LOCUS_SHOWN_BY=<pid>:<hash> for the programs it starts); all: in "
    "every process.", RT},
   T_BOOL, 0, 0, NULL, &locus_opt.verbose, NULL},
};
#define NOPTIONS (sizeof table / sizeof table[0])

const option_info_t *options_info(size_t i) { return i < NOPTIONS ? &table[i].info : NULL; }

static option_t *find(const char *name) {
  if (!name) return NULL;
  for (size_t i = 0; i < NOPTIONS; i++)
    if (!strcmp(name, table[i].info.name) || !strcmp(name, table[i].info.env)) return &table[i];
  return NULL;
}

/* Parses and stores; false when the value is not acceptable (nothing changes). */
static const char *const numa_names[] = {"local", "interleave", "bind", "preferred"};

/* "local", "interleave", "bind:N", "preferred:N" with N an allowed node. */
static bool parse_numa(const char *v, numa_policy_t *policy, int *node) {
  for (int i = 0; i < 4; i++) {
    size_t n = strlen(numa_names[i]);
    if (strncmp(v, numa_names[i], n)) continue;
    bool needs_node = i >= NUMA_BIND;
    if (!needs_node) {
      if (v[n]) return false;
      *policy = (numa_policy_t)i;
      *node = -1;
      return true;
    }
    if (v[n] != ':' || v[n + 1] < '0' || v[n + 1] > '9') return false;
    int id = 0;
    const char *p = v + n + 1;
    for (; *p >= '0' && *p <= '9' && id < TOPO_MAX_NODES; p++) id = id * 10 + (*p - '0');
    if (*p || !topology_node_allowed(id)) return false;
    *policy = (numa_policy_t)i;
    *node = id;
    return true;
  }
  return false;
}

static bool store(option_t *o, const char *v) {
  switch (o->type) {
  case T_NUMA:
    return parse_numa(v, &locus_opt.numa_policy, &locus_opt.numa_node);
  case T_BOOL: {
    bool b, all = o->field == &locus_opt.verbose && !strcmp(v, "all");
    if (!all && !parse_bool(v, &b)) return false;
    if (o->field == &locus_opt.verbose) verbose_all = all;
    atomic_store((atomic_bool *)o->field, all || b);
    return true;
  }
  case T_SIZE: {
    size_t n;
    if (!parse_size(v, &n) || n < o->lo || n > o->hi) return false;
    if (o->info.runtime) atomic_store((atomic_size_t *)o->field, n);
    else *(size_t *)o->field = n;
    return true;
  }
  case T_ENUM:
    for (int i = 0; o->choices[i]; i++)
      if (!strcmp(v, o->choices[i])) {
        atomic_store((_Atomic profile_t *)o->field, (profile_t)i);
        return true;
      }
    return false;
  case T_STRING:                      /* field: a char[256] */
    if (strlen(v) >= sizeof stats_file) return false;
    lock_acquire(&file_lock);
    strcpy((char *)o->field, v);
    lock_release(&file_lock);
    return true;
  }
  return false;
}

static size_t value_text(const option_t *o, char *buf, size_t len) {
  switch (o->type) {
  case T_BOOL:
    if (o->field == &locus_opt.verbose && verbose_all && atomic_load(&locus_opt.verbose))
      return fmt_buf(buf, len, "all");
    return fmt_buf(buf, len, "%d", atomic_load((atomic_bool *)o->field) ? 1 : 0);
  case T_SIZE:
    return format_size(buf, len, o->info.runtime ? atomic_load((atomic_size_t *)o->field) : *(size_t *)o->field);
  case T_ENUM: return fmt_buf(buf, len, "%s", o->choices[atomic_load((_Atomic profile_t *)o->field)]);
  case T_STRING: {
    char tmp[sizeof stats_file];
    lock_acquire(&file_lock);
    fmt_buf(tmp, sizeof tmp, "%s", (const char *)o->field);
    lock_release(&file_lock);
    return fmt_buf(buf, len, "%s", tmp);
  }
  case T_NUMA:
    if (locus_opt.numa_policy < NUMA_BIND) return fmt_buf(buf, len, "%s", numa_names[locus_opt.numa_policy]);
    return fmt_buf(buf, len, "%s:%d", numa_names[locus_opt.numa_policy], locus_opt.numa_node);
  }
  return 0;
}

/* ---- file names: %p, %r, %% ------------------------------------------------ */

/* The MPI rank as the launchers publish it (Open MPI, MPICH and Intel MPI,
 * PMIx, Slurm's srun), or NULL. */
static const char *mpi_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = os_getenv(vars[i]);
    if (!v || !*v) continue;
    const char *d = v;
    while (*d >= '0' && *d <= '9') d++;
    if (!*d) return v;
  }
  return NULL;
}

size_t options_expand_path(const char *pattern, char *out, size_t len) {
  size_t n = 0;
  for (const char *s = pattern; *s; s++) {
    char tmp[24];
    const char *put = tmp;
    tmp[0] = *s, tmp[1] = 0;
    if (s[0] == '%' && (s[1] == 'p' || s[1] == 'r')) {
      const char *rank = s[1] == 'r' ? mpi_rank() : NULL;
      if (rank) put = rank;
      else fmt_buf(tmp, sizeof tmp, "%d", os_getpid());
      s++;
    } else if (s[0] == '%' && s[1] == '%') {
      s++;
    }
    for (; *put; put++, n++)
      if (n + 1 < len) out[n] = *put;
  }
  if (len) out[n < len ? n : len - 1] = 0;
  return n;
}

size_t options_stats_file(char *buf, size_t len) {
  char pattern[sizeof stats_file];
  lock_acquire(&file_lock);
  fmt_buf(pattern, sizeof pattern, "%s", stats_file);
  lock_release(&file_lock);
  return options_expand_path(pattern, buf, len);
}

/* ---- unknown names ----------------------------------------------------------- */

#define NAME_MAX_CMP 48                /* longer names are compared on their first 48 characters */

/* Levenshtein distance between a and b (each cut at NAME_MAX_CMP), two rows
 * on the stack: this runs inside the first malloc. */
static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > NAME_MAX_CMP) la = NAME_MAX_CMP;
  if (lb > NAME_MAX_CMP) lb = NAME_MAX_CMP;
  size_t row[NAME_MAX_CMP + 1], prev[NAME_MAX_CMP + 1];
  for (size_t j = 0; j <= lb; j++) prev[j] = j;
  for (size_t i = 1; i <= la; i++) {
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
      size_t del = prev[j] + 1, ins = row[j - 1] + 1;
      row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, row, (lb + 1) * sizeof row[0]);
  }
  return prev[lb];
}

/* LOCUS_ names that are not settings but are close to one: the marker above
 * and the test scripts' cache of guest kernels (tests/numa, scripts/kernel.sh). */
static const char *const not_settings[] = {SHOWN_VAR, "LOCUS_CACHE_DIR"};

/* One environment entry "LOCUS_NAME=value": a warning when NAME is no
 * setting but within a misspelling of one (at most 1 + a quarter of its
 * length past "LOCUS_" edits: LOCUS_PROFLE is, LOCUS_LIB is not LOCUS_THP). */
typedef struct {
  bool print;                          /* warn, or only hash */
  unsigned long hash;                  /* of the misspelled names seen: order-free (xor) */
} name_check_t;

static unsigned long name_hash(const char *s) {   /* FNV-1a, never 0 */
  uint64_t h = 14695981039346656037ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return (unsigned long)(h | 1);
}

static void check_name(const char *entry, void *ctx) {
  name_check_t *c = ctx;
  char name[NAME_MAX_CMP + 8];
  size_t n = 0;
  while (entry[n] && entry[n] != '=' && n + 1 < sizeof name) name[n] = entry[n], n++;
  name[n] = 0;
  for (size_t i = 0; i < sizeof not_settings / sizeof not_settings[0]; i++)
    if (!strcmp(name, not_settings[i])) return;
  const char *best = NULL;
  size_t best_d = SIZE_MAX, best_p = 0;
  for (size_t i = 0; i < NOPTIONS; i++) {
    const char *env = table[i].info.env;
    if (!strcmp(name, env)) return;
    size_t d = edit_distance(name + 6, env + 6);   /* past "LOCUS_" */
    size_t p = 0;                                  /* ties: the longer common prefix */
    while (name[p] && name[p] == env[p]) p++;
    if (d < best_d || (d == best_d && p > best_p)) best = env, best_d = d, best_p = p;
  }
  if (!best || best_d > 1 + strlen(name + 6) / 4) return;
  c->hash ^= name_hash(name);
  if (!c->print) return;
  locus_warn("%s is not a locus setting (ignored); did you mean %s?", name, best);
  shown_here = true;
}

/* The hash a parent left in LOCUS_SHOWN_BY (after the ':'), 0 if none. */
static unsigned long parent_names_hash(void) {
  const char *v = os_getenv(SHOWN_VAR), *colon = v ? strchr(v, ':') : NULL;
  unsigned long h = 0;
  if (!colon) return 0;
  for (const char *q = colon + 1; *q; q++) {
    int d = *q >= '0' && *q <= '9' ? *q - '0' : *q >= 'a' && *q <= 'f' ? *q - 'a' + 10 : -1;
    if (d < 0) return 0;
    h = h << 4 | (unsigned long)d;
  }
  return h;
}

static unsigned long names_hash;       /* of this process's misspelled names */

/* Warns about misspelled LOCUS_ names unless the parent that set
 * LOCUS_SHOWN_BY already warned about the same set. */
static void check_names(void) {
  name_check_t c = {false, 0};
  os_env_each("LOCUS_", check_name, &c);
  names_hash = c.hash;
  if (!c.hash || c.hash == parent_names_hash()) return;
  c = (name_check_t){true, 0};
  os_env_each("LOCUS_", check_name, &c);
}

/* After start-up, outside malloc: tell the programs this process starts that
 * its banner or warnings were printed (LOCUS_SHOWN_BY, see the top). */
__attribute__((constructor)) static void options_ctor(void) {
  locus_init();
  if (!shown_here) return;
  char pid[48];
  fmt_buf(pid, sizeof pid, "%d:%lx", os_getpid(), names_hash);
  os_setenv(SHOWN_VAR, pid);
}

static bool from_env[NOPTIONS];

void options_init(void) {
  for (size_t i = 0; i < NOPTIONS; i++) {
    option_t *o = &table[i];
    const char *s = os_getenv(o->info.env);
    if (!s) continue;
    if (store(o, s)) {
      from_env[i] = true;
      continue;
    }
    if (o->type == T_SIZE)
      locus_warn("%s=\"%s\" is not a size in [%s] (a number with an optional k, M, G or T suffix); "
                 "using the default %s", o->info.env, s, o->info.range, o->info.def);
    else if (o->type == T_NUMA)
      locus_warn("%s=\"%s\" is not one of %s (allowed nodes: %d of %d); using the default %s", o->info.env, s,
                 o->info.range, topology_allowed_count(), topology_nodes(), o->info.def);
    else if (o->type == T_STRING)
      locus_warn("%s is longer than %zu bytes; using the default (%s)", o->info.env, sizeof stats_file - 1,
                 o->field == stats_file ? "stderr" : "none");
    else
      locus_warn("%s=\"%s\" is not one of %s; using the default %s", o->info.env, s, o->info.range,
                 o->info.def);
  }
  update_bound();
  if (trace_file[0]) trace_start(trace_file);
  check_names();
}

/* ---- reports --------------------------------------------------------------- */

#ifdef LOCUS_DEBUG
#define BUILD_KIND "debug"
#else
#define BUILD_KIND "release"
#endif
#ifdef LOCUS_TLS_DYNAMIC
#define BUILD_TLS "global-dynamic"
#else
#define BUILD_TLS "initial-exec"
#endif

void options_print(void) {
  const os_features_t *f = &os_features;
  if (!verbose_all && os_getenv(SHOWN_VAR)) return;   /* a parent printed it */
  shown_here = true;
  locus_note("locus %s active in pid %d (%s, %s build, %s TLS): profile %s, %d NUMA node%s, THP %s, "
             "page %zu KiB, kernel %s", locus_version(), os_getpid(), ARCH_NAME, BUILD_KIND, BUILD_TLS,
             profile_name(atomic_load(&locus_opt.profile)), topology_nodes(),
             topology_nodes() == 1 ? "" : "s", os_thp_name(f->thp), f->page_size / 1024, f->kernel);
  locus_note("kernel features: MADV_FREE %s, MADV_POPULATE_WRITE %s, page reuse %s, NUMA calls %s, "
             "NUMA balancing %d", f->madv_free ? "yes" : "no", f->madv_populate_write ? "yes" : "no",
             f->page_reuse ? "yes" : "no", f->numa ? "yes" : "no", f->numa_balancing);
  for (size_t i = 0; i < NOPTIONS; i++) {
    char v[300];
    value_text(&table[i], v, sizeof v);
    locus_note("  %s=%s%s", table[i].info.env, v, from_env[i] ? "" : " (default)");
  }
}

size_t options_json(char *buf, size_t len) {
  size_t n = 0;
  for (size_t i = 0; i < NOPTIONS; i++) {
    char v[300];
    value_text(&table[i], v, sizeof v);
    size_t room = n < len ? len - n : 0;
    bool quote = table[i].type != T_BOOL || (v[0] != '0' && v[0] != '1');   /* LOCUS_VERBOSE=all */
    n += fmt_buf(room ? buf + n : NULL, room, "%s\"%s\":%s%s%s", i ? "," : "", table[i].info.name,
                 quote ? "\"" : "", v, quote ? "\"" : "");
  }
  return n;
}

/* ---- behind locus_option_get/set (api/options.c) ------------------------------ */

int options_get(const char *name, char *buf, size_t len) {
  option_t *o = find(name);
  if (!o) {
    errno = EINVAL;
    return -1;
  }
  char tmp[300];
  size_t n = value_text(o, tmp, sizeof tmp);
  if (buf && len) fmt_buf(buf, len, "%s", tmp);
  return (int)n;
}

int options_set(const char *name, const char *value) {
  option_t *o = find(name);
  if (!o || !value) {
    errno = EINVAL;
    return -1;
  }
  if (!o->info.runtime) {
    errno = EBUSY;
    return -1;
  }
  if (!store(o, value)) {
    errno = EINVAL;
    return -1;
  }
  if (!o->changed) return 0;
  o->changed();
  return 1;
}
