/* A deliberately broken allocator for the ctest bench_ab_overlap: a bump
 * allocator that, for blocks of 16 B - 1 KiB the program itself asks for,
 * starts the next block 8 bytes (aligned down) before the end of the previous
 * one, so consecutive blocks overlap by one word; it never reuses memory
 * (free is a no-op).  Requests from libc, ld.so and libgomp (thread control
 * blocks, TLS vectors) are served correctly, else the program would crash
 * before its checks run.  The ab_* workloads must reject it: the new
 * block's head word lands on the previous block's tail word.  LD_PRELOAD
 * only; not part of locus. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <dlfcn.h>
#include <sys/mman.h>

#define ARENA (8ULL << 30) /* address space only: pages are touched as used */

static char *base, *cur;
static atomic_flag lock = ATOMIC_FLAG_INIT;

typedef struct { size_t n; size_t pad; } hdr_t; /* 16 B before each block */

/* Whether the caller at return address ra may get an overlapping block. */
static int victim(void *ra) {
    Dl_info di;
    if (!dladdr(ra, &di) || !di.dli_fname) return 0;
    static const char *spared[] = {"libc.so", "ld-linux", "libgomp", "libpthread", "libdl"};
    for (size_t i = 0; i < sizeof spared / sizeof *spared; i++)
        if (strstr(di.dli_fname, spared[i])) return 0;
    return 1;
}

static void *bump(size_t n, size_t align, int evil) {
    while (atomic_flag_test_and_set_explicit(&lock, memory_order_acquire)) { }
    if (!base) {
        void *m = mmap(NULL, ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            atomic_flag_clear_explicit(&lock, memory_order_release);
            return NULL;
        }
        base = cur = (char *)m;
    }
    if (align < 16) align = 16;
    uintptr_t u = ((uintptr_t)cur + sizeof(hdr_t) + align - 1) & ~(uintptr_t)(align - 1);
    if (u + n > (uintptr_t)base + ARENA) {
        atomic_flag_clear_explicit(&lock, memory_order_release);
        return NULL;
    }
    ((hdr_t *)u)[-1].n = n;
    /* the overlap: the next block's header and first word sit on this
     * block's last bytes */
    uintptr_t next = evil && n >= 16 && n <= 1024 ? ((u + n - 8) & ~(uintptr_t)7) - sizeof(hdr_t) : u + n;
    cur = (char *)next;
    atomic_flag_clear_explicit(&lock, memory_order_release);
    return (void *)u;
}

void *malloc(size_t n) {
    void *p = bump(n ? n : 1, 16, victim(__builtin_return_address(0)));
    if (!p) errno = ENOMEM;
    return p;
}
void free(void *p) { (void)p; }
void *calloc(size_t a, size_t b) {
    size_t n;
    if (__builtin_mul_overflow(a, b, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = bump(n ? n : 1, 16, 0); /* not malloc + memset: gcc would turn that into calloc */
    if (p) memset(p, 0, n);
    else errno = ENOMEM;
    return p;
}
void *realloc(void *old, size_t n) {
    void *p = malloc(n);
    if (p && old) {
        size_t o = ((hdr_t *)old)[-1].n;
        memcpy(p, old, o < n ? o : n);
    }
    return p;
}
int posix_memalign(void **out, size_t align, size_t n) {
    void *p = bump(n ? n : 1, align, 0);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
void *aligned_alloc(size_t align, size_t n) { return bump(n ? n : 1, align, 0); }
void *memalign(size_t align, size_t n) { return bump(n ? n : 1, align, 0); }
size_t malloc_usable_size(void *p) { return p ? ((hdr_t *)p)[-1].n : 0; }
