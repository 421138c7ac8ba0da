/* Shared by the heap workloads (heap_timestep, heap_parse, heap_segment):
 * ways to drop many blocks at once, compared with freeing them one by one.
 *
 * The programs stay plain programs (the allocator is chosen by LD_PRELOAD):
 * the heap APIs of the allocator in the process are found at run time with
 * dlsym(RTLD_DEFAULT, ...), so one binary runs under every preload:
 *   locus_heap_*   (include/locus.h) when liblocus is preloaded or linked;
 *   mi_heap_*, mi_manage_os_memory_ex, mi_heap_new_in_arena when libmimalloc
 *                  is preloaded (compiled in only when <mimalloc.h> is found:
 *                  Debian's libmimalloc-dev, scripts/setup.sh bench).
 * glibc's obstack (a region allocator over malloc'ed chunks) and a
 * hand-written bump allocator over a segment are the allocator-independent
 * baselines.
 *
 * Blocks are marked as the ab_* workloads mark theirs (bench/common.h), one
 * word at each end, but with room for sizes up to 16 MiB: head
 * (tag << 24) | n at offset 0, head ^ AB_TAIL_MIX at n - 8 (n >= 16). The
 * heads are summed when a block is made (asum) and when it is checked before
 * it is dropped (fsum); tags and sizes come from the seed alone, so the sum
 * is the same under every allocator and every variant (checksum=). */
#ifndef LOCUS_BENCH_HEAP_COMMON_H
#define LOCUS_BENCH_HEAP_COMMON_H

#include "common.h"

#include <dlfcn.h>
#include <obstack.h>
#include <sys/mman.h>

#include "../include/locus.h"

#if defined(__has_include)
#if __has_include(<mimalloc.h>)
#include <mimalloc.h>
#define HB_HAVE_MIMALLOC 1
#endif
#endif

#define obstack_chunk_alloc malloc
#define obstack_chunk_free free

/* ---- block marks -------------------------------------------------------- */

#define HB_SIZE_BITS 24

static inline uint64_t hb_put(void *p, size_t n, uint64_t tag) {
    uint64_t h = (tag << HB_SIZE_BITS) | (uint64_t)n;
    *(uint64_t *)p = h;
    uint64_t t = h ^ AB_TAIL_MIX;
    memcpy((char *)p + n - 8, &t, 8);
    return h;
}

static void __attribute__((noinline, noreturn)) hb_bad(const void *p, uint64_t h, const char *where) {
    bench_fail("corrupt", "%s: block %p lost its head or tail word (head %#" PRIx64 ")", where, p, h);
}

/* Checks the block's two words (and, if n is not 0, its size) and returns its head. */
static inline uint64_t hb_take(const void *p, size_t n, const char *where) {
    uint64_t h = *(const uint64_t *)p, t;
    size_t m = (size_t)(h & ((1u << HB_SIZE_BITS) - 1));
    if (__builtin_expect(m < 16 || (n && m != n), 0)) hb_bad(p, h, where);
    memcpy(&t, (const char *)p + m - 8, 8);
    if (__builtin_expect(t != (h ^ AB_TAIL_MIX), 0)) hb_bad(p, h, where);
    return h;
}

/* Sizes: mostly small, some medium (multiply-shift, no division). */
static inline size_t hb_size(uint64_t x, size_t lo, size_t mid, size_t hi, unsigned pct_hi) {
    unsigned c = (unsigned)(((x & 0xffffffffu) * 100u) >> 32);
    return c < pct_hi ? ab_size(x, mid, hi) : ab_size(x, lo, mid);
}

/* ---- the allocator's heap APIs, found at run time ------------------------ */

typedef struct {
    locus_heap_t *(*create)(const locus_heap_config_t *);
    void (*destroy)(locus_heap_t *);
    void (*reset)(locus_heap_t *);
    void *(*malloc)(locus_heap_t *, size_t);
} hb_locus_api_t;

typedef struct {
    void *(*heap_new)(void);
    void (*heap_destroy)(void *);
    void *(*heap_malloc)(void *, size_t);
    bool (*manage)(void *, size_t, bool, bool, bool, int, bool, int *);
    void *(*heap_new_in_arena)(int);
} hb_mi_api_t;

static hb_locus_api_t hb_locus;
static hb_mi_api_t hb_mi;

/* 1 if liblocus's heap API is in the process (preloaded or linked). */
static inline int hb_find_locus(void) {
    hb_locus.create = (locus_heap_t * (*)(const locus_heap_config_t *)) dlsym(RTLD_DEFAULT, "locus_heap_create");
    hb_locus.destroy = (void (*)(locus_heap_t *))dlsym(RTLD_DEFAULT, "locus_heap_destroy");
    hb_locus.reset = (void (*)(locus_heap_t *))dlsym(RTLD_DEFAULT, "locus_heap_reset");
    hb_locus.malloc = (void *(*)(locus_heap_t *, size_t))dlsym(RTLD_DEFAULT, "locus_heap_malloc");
    return hb_locus.create && hb_locus.destroy && hb_locus.reset && hb_locus.malloc;
}

/* 1 if mimalloc's heap API is in the process (and this was compiled with mimalloc.h). */
static inline int hb_find_mimalloc(int arena) {
#ifdef HB_HAVE_MIMALLOC
    /* The prototypes of mimalloc.h, to catch a signature that changed. */
    mi_heap_t *(*nw)(void) = (mi_heap_t * (*)(void)) dlsym(RTLD_DEFAULT, "mi_heap_new");
    void (*de)(mi_heap_t *) = (void (*)(mi_heap_t *))dlsym(RTLD_DEFAULT, "mi_heap_destroy");
    void *(*ma)(mi_heap_t *, size_t) = (void *(*)(mi_heap_t *, size_t))dlsym(RTLD_DEFAULT, "mi_heap_malloc");
    hb_mi.heap_new = (void *(*)(void))nw;
    hb_mi.heap_destroy = (void (*)(void *))de;
    hb_mi.heap_malloc = (void *(*)(void *, size_t))ma;
    if (!nw || !de || !ma) return 0;
    if (arena) {
        bool (*mg)(void *, size_t, bool, bool, bool, int, bool, mi_arena_id_t *) =
            (bool (*)(void *, size_t, bool, bool, bool, int, bool, mi_arena_id_t *))dlsym(RTLD_DEFAULT,
                                                                                       "mi_manage_os_memory_ex");
        mi_heap_t *(*na)(mi_arena_id_t) = (mi_heap_t * (*)(mi_arena_id_t)) dlsym(RTLD_DEFAULT, "mi_heap_new_in_arena");
        hb_mi.manage = (bool (*)(void *, size_t, bool, bool, bool, int, bool, int *))mg;
        hb_mi.heap_new_in_arena = (void *(*)(int))na;
        return mg && na;
    }
    return 1;
#else
    (void)arena;
    return 0;
#endif
}

/* ---- variants ------------------------------------------------------------ */

typedef enum {
    V_FREE,          /* malloc, and free of every block */
    V_LOCUS_RESET,   /* one locus arena heap, locus_heap_reset per step */
    V_LOCUS_DESTROY, /* a locus arena heap created and destroyed per step */
    V_MI_HEAP,       /* mi_heap_new / mi_heap_malloc / mi_heap_destroy per step */
    V_OBSTACK,       /* glibc obstack over malloc: obstack_free to the step's mark */
    V_BUMP,          /* a bump pointer over the segment, reset per round */
    V_LOCUS_SEGMENT, /* a locus heap over the segment, locus_heap_reset per round */
    V_MI_ARENA,      /* a mimalloc heap in an exclusive arena over the segment, destroyed per round
                        (hangs in mi_heap_destroy with mimalloc 2.0.9: see hb_variant) */
} hb_variant_t;

static const char *const hb_variant_names[] = {"free",   "locus-reset", "locus-destroy", "mimalloc-heap",
                                               "obstack", "bump",       "locus-segment", "mimalloc-arena"};

/* --variant NAME: one of hb_variant_names, or one that picks the heap API of
 * the allocator in the process, or `free` when it has none (what the harness
 * runs, so that every allocator runs the workload):
 *   heap          locus: `reset_or_destroy`; mimalloc: mimalloc-heap; else free
 *   heap-destroy  locus: locus-destroy; mimalloc: mimalloc-heap; else free
 *   heap-segment  locus: locus-segment; else free
 * (mimalloc-arena is left out of heap-segment: with Debian's mimalloc 2.0.9,
 * mi_heap_destroy of a heap in an exclusive arena over the segment spins
 * forever once the heap held a few MiB: heap_segment --blocks 20000 never
 * ends, --blocks 1000 does. It stays available by name.)
 * A named variant whose API is not in the process is a usage error (exit 2). */
static inline hb_variant_t hb_variant(const bench_args_t *a, const char *dflt, hb_variant_t reset_or_destroy) {
    const char *v = dflt;
    for (int i = 1; i + 1 < a->argc; i++)
        if (!strcmp(a->argv[i], "--variant")) v = a->argv[i + 1];
    int loc = hb_find_locus();
    if (!strcmp(v, "heap")) return loc ? reset_or_destroy : hb_find_mimalloc(0) ? V_MI_HEAP : V_FREE;
    if (!strcmp(v, "heap-destroy")) return loc ? V_LOCUS_DESTROY : hb_find_mimalloc(0) ? V_MI_HEAP : V_FREE;
    if (!strcmp(v, "heap-segment")) return loc ? V_LOCUS_SEGMENT : V_FREE; /* not mimalloc-arena: below */
    for (unsigned k = 0; k < sizeof hb_variant_names / sizeof *hb_variant_names; k++) {
        if (strcmp(v, hb_variant_names[k])) continue;
        if ((k == V_LOCUS_RESET || k == V_LOCUS_DESTROY || k == V_LOCUS_SEGMENT) && !loc)
            bench_usage_exit("this variant needs liblocus in the process (LD_PRELOAD=.../liblocus.so)");
        if (k == V_MI_HEAP && !hb_find_mimalloc(0))
            bench_usage_exit("this variant needs libmimalloc in the process and a build with mimalloc.h");
        if (k == V_MI_ARENA && !hb_find_mimalloc(1))
            bench_usage_exit("this variant needs libmimalloc (with arenas) and a build with mimalloc.h");
        return (hb_variant_t)k;
    }
    bench_usage_exit("unknown --variant (free, locus-reset, locus-destroy, mimalloc-heap, obstack, bump, "
                     "locus-segment, mimalloc-arena, or heap, heap-destroy, heap-segment)");
    return V_FREE;
}

/* ---- a region: where one step's blocks come from ------------------------- */

typedef struct {
    hb_variant_t v;
    locus_heap_t *lh;
    void *mh;
    struct obstack ob;
    void *ob_mark;
    int ob_init;
    /* segment variants */
    char *seg;
    size_t seg_size, bump;
    int mi_arena;
} hb_region_t;

static inline void hb_locus_new(hb_region_t *r, void *seg, size_t seg_size, unsigned flags) {
    locus_heap_config_t c = LOCUS_HEAP_CONFIG_INIT;
    c.segment = seg;
    c.segment_size = seg_size;
    c.flags = flags;
    r->lh = hb_locus.create(&c);
    if (!r->lh) bench_fail("heap", "locus_heap_create: %s", strerror(errno));
}

static inline void hb_mi_new(hb_region_t *r) {
    r->mh = r->v == V_MI_ARENA ? hb_mi.heap_new_in_arena(r->mi_arena) : hb_mi.heap_new();
    if (!r->mh) bench_fail("heap", "mi_heap_new failed");
}

/* Once, before the first step (not timed). */
static inline void hb_region_init(hb_region_t *r, hb_variant_t v, char *seg, size_t seg_size) {
    memset(r, 0, sizeof *r);
    r->v = v;
    r->seg = seg;
    r->seg_size = seg_size;
    if (v == V_LOCUS_RESET) hb_locus_new(r, NULL, 0, LOCUS_HEAP_ARENA);
    if (v == V_LOCUS_SEGMENT) hb_locus_new(r, seg, seg_size, 0); /* frees allowed: not an arena */
    if (v == V_MI_ARENA) {
        if (!hb_mi.manage(seg, seg_size, true, false, false, -1, true, &r->mi_arena))
            bench_fail("heap", "mi_manage_os_memory_ex refused the segment");
        hb_mi_new(r);
    }
    if (v == V_OBSTACK) {
        obstack_specify_allocation(&r->ob, 1 << 20, 0, malloc, free); /* 1 MiB chunks */
        r->ob_init = 1;
    }
}

/* At the start of a step (timed). */
static inline void hb_region_begin(hb_region_t *r) {
    if (r->v == V_LOCUS_DESTROY) hb_locus_new(r, NULL, 0, LOCUS_HEAP_ARENA);
    else if (r->v == V_MI_HEAP) hb_mi_new(r);
    else if (r->v == V_OBSTACK) r->ob_mark = obstack_alloc(&r->ob, 16);
}

static inline void *hb_region_alloc(hb_region_t *r, size_t n) {
    void *p;
    switch (r->v) {
    case V_FREE: p = malloc(n); break;
    case V_LOCUS_RESET:
    case V_LOCUS_DESTROY:
    case V_LOCUS_SEGMENT: p = hb_locus.malloc(r->lh, n); break;
    case V_MI_HEAP:
    case V_MI_ARENA: p = hb_mi.heap_malloc(r->mh, n); break;
    case V_OBSTACK: p = obstack_alloc(&r->ob, n); break;
    case V_BUMP:
        if (r->bump + n > r->seg_size) { p = NULL; break; }
        p = r->seg + r->bump;
        r->bump += (n + 15) & ~(size_t)15;
        break;
    default: p = NULL;
    }
    if (__builtin_expect(!p, 0)) bench_fail("enomem", "%s: allocation of %zu bytes returned NULL",
                                           hb_variant_names[r->v], n);
    return p;
}

/* One block released before the step's end (heap_segment's frees): free()
 * for every variant whose blocks can be freed, nothing for the bump. */
static inline void hb_region_free_one(hb_region_t *r, void *p) {
    if (r->v != V_BUMP) free(p);
}

/* Every block of the step dropped at once (V_FREE: the caller freed them). */
static inline void hb_region_drop(hb_region_t *r) {
    switch (r->v) {
    case V_LOCUS_RESET:
    case V_LOCUS_SEGMENT: hb_locus.reset(r->lh); break;
    case V_LOCUS_DESTROY: hb_locus.destroy(r->lh); r->lh = NULL; break;
    case V_MI_HEAP: hb_mi.heap_destroy(r->mh); r->mh = NULL; break;
    case V_MI_ARENA: hb_mi.heap_destroy(r->mh); hb_mi_new(r); break;
    case V_OBSTACK: obstack_free(&r->ob, r->ob_mark); break;
    case V_BUMP: r->bump = 0; break;
    default: break;
    }
}

/* After the last step (not timed). */
static inline void hb_region_fini(hb_region_t *r) {
    if (r->lh) hb_locus.destroy(r->lh);
    if (r->v == V_MI_ARENA && r->mh) hb_mi.heap_destroy(r->mh);
    if (r->ob_init) obstack_free(&r->ob, NULL);
    r->lh = NULL;
    r->mh = NULL;
}

#endif
