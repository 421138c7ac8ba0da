/* Settings: one table (config/options.c) of every LOCUS_* variable with its
 * type, default, range and documentation. The environment is read once at
 * start-up; locus_option_set changes the run-time ones later. */
#ifndef LOCUS_OPTIONS_H
#define LOCUS_OPTIONS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum { PROFILE_ECO = 0, PROFILE_UMA = 1, PROFILE_NUMA = 2, PROFILE_AUTO = 3 } profile_t;
/* LOCUS_THP: huge pages for large blocks. */
typedef enum { THP_OPT_AUTO = 0, THP_OPT_ON = 1, THP_OPT_OFF = 2 } thp_opt_t;
typedef enum { KSM_OPT_OFF = 0, KSM_OPT_LARGE = 1, KSM_OPT_ALL = 2, KSM_OPT_AUTO = 3 } ksm_opt_t;
/* LOCUS_NEXT_TOUCH: how locus_next_touch traps the next access. */
typedef enum { NT_OPT_AUTO = 0, NT_OPT_UFFD = 1, NT_OPT_PROTECT = 2 } next_touch_opt_t;
/* LOCUS_NUMA, in numactl's terms: where memory goes when the program does not say. */
typedef enum { NUMA_LOCAL = 0, NUMA_INTERLEAVE, NUMA_BIND, NUMA_PREFERRED } numa_policy_t;

/* The effective values. Fields that may change at run time are atomics:
 * locus_option_set may run beside allocations. */
typedef struct {
  _Atomic profile_t profile;
  atomic_size_t cache_max;         /* LOCUS_CACHE_MAX: bound of the uma/numa caches */
  atomic_size_t cache_bound;       /* what a source keeps now: 0 for eco (see options.c) */
  atomic_size_t cache_max_segment; /* largest segment worth caching */
  size_t large_threshold;          /* blocks above go to the sources (start-up only) */
  size_t thread_cache;             /* LOCUS_THREAD_CACHE: bytes per class a thread keeps (start-up only) */
  atomic_bool lazy_release;        /* MADV_FREE instead of munmap when eco returns memory */
  atomic_bool page_reuse;          /* eco marks its segments for the kernel's page reuse */
  atomic_bool color;               /* random 64-byte start offset for large blocks */
  _Atomic thp_opt_t thp;           /* LOCUS_THP (an enum option, stored like the profile) */
  _Atomic ksm_opt_t ksm;           /* LOCUS_KSM */
  _Atomic next_touch_opt_t next_touch;   /* LOCUS_NEXT_TOUCH (enum, start-up only) */
  atomic_bool stats;               /* print statistics at exit */
  atomic_bool verbose;
  /* Read by liblocus-overlap.so (docs/overlap.md) through locus_option_get;
   * locus itself only parses and documents them. Start-up only. */
  atomic_bool overlap;             /* LOCUS_OVERLAP */
  size_t overlap_min;              /* blocks this large are memory-file-backed, guardable */
  size_t overlap_copy_max;         /* sends of unguardable memory copied up to this size */
  size_t overlap_poll_us;          /* the progress thread's longest sleep with requests pending */
  atomic_bool overlap_stats;       /* per-rank counts at MPI_Finalize */
  numa_policy_t numa_policy;       /* start-up only */
  int numa_node;                   /* the N of bind:N and preferred:N */
} options_t;

extern options_t locus_opt;

/* Reads the environment (ignored in secure-execution mode), warns about bad
 * values; no allocation. Runs after topology_init: LOCUS_NUMA names nodes. */
void options_init(void);
/* Prints the banner and the effective settings (LOCUS_VERBOSE=1). */
void options_print(void);
const char *profile_name(profile_t p);
/* Copies pattern into out with %p replaced by the process id, %r by the MPI
 * rank (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID; the process
 * id when none is set) and %% by %; no allocation. Returns the length of the
 * whole name (>= len: cut). */
size_t options_expand_path(const char *pattern, char *out, size_t len);
/* The statistics file name (empty: stderr), expanded for the calling process,
 * into buf; returns its length as options_expand_path does. */
size_t options_stats_file(char *buf, size_t len);
/* Behind locus_option_get and locus_option_set (api/options.c), with their
 * errno; options_set returns 1 when the sources' bound changed (the caller
 * applies it: sources_apply_bound), 0 for another change, -1 on an error. */
int options_get(const char *name, char *buf, size_t len);
int options_set(const char *name, const char *value);
/* Writes the settings as JSON members ("name":value,...) through fmt-like calls. */
size_t options_json(char *buf, size_t len);

/* Where the options table lives, for tools and tests: the i-th option, or
 * NULL past the end. */
typedef struct {
  const char *name;            /* "cache_max"; the variable is LOCUS_CACHE_MAX */
  const char *env;
  const char *type;            /* "bool", "size", "enum", "string" */
  const char *def;             /* default as text */
  const char *range;           /* accepted values */
  const char *doc;
  bool runtime;                /* locus_option_set may change it after start-up */
} option_info_t;
const option_info_t *options_info(size_t i);

#endif /* LOCUS_OPTIONS_H */
