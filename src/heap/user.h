/* User heaps (locus_heap_create): heaps of the program's own, over a segment
 * it gives, a memory source of its own, or locus's memory placed on a node or
 * interleaved (S. Valat, PhD thesis, 2014, §4.13). The program holds a
 * handle (locus_heap_t *: the record's address and its generation, never
 * dereferenced); locus works on the record (uheap_t). */
#ifndef LOCUS_HEAP_USER_H
#define LOCUS_HEAP_USER_H

#include "heap/heap.h"

typedef struct uheap_s uheap_t;

/* NULL with errno set (EINVAL: the configuration; ENOMEM). */
uheap_t *uheap_create(const locus_heap_config_t *cfg);
/* Drops every block; keep: the heap stays, with its memory (reset). */
void uheap_drop(locus_heap_t *h, bool keep, const char *fn);
/* Aborts, naming fn and the heap, unless u is a live heap. */
void uheap_check(const uheap_t *u, const char *fn);
/* The live heap of handle h; aborts naming fn for NULL, a foreign pointer
 * or a stale handle (its heap destroyed, even with the record reused). */
uheap_t *uheap_open(const locus_heap_t *h, const char *fn);
/* The program's handle of u (NULL for NULL). */
locus_heap_t *uheap_handle(const uheap_t *u);
/* An allocation from u by any thread (from its own sub-heap of u), with
 * growth through the user's source; NULL + ENOMEM when the heap is
 * exhausted or at its limit. uheap_malloc: locus_heap_malloc, its fast
 * path first (opens h only when it is not the heap this thread used last). */
void *uheap_alloc(uheap_t *u, size_t size, size_t align, bool zero);
void *uheap_malloc(locus_heap_t *h, size_t size);
/* Whether the calling thread owns sub-heap `sub` (may resize its blocks in place). */
bool uheap_owns(const heap_t *sub);
source_t *uheap_source(const uheap_t *u);
lock_t *uheap_lock_of(uheap_t *u);     /* (tests) */
bool uheap_is_arena(const uheap_t *u);
const char *uheap_name(const uheap_t *u);
/* The user heap of a heap record (NULL for the default heaps and for a
 * destroyed heap's sub-heap). */
static inline uheap_t *uheap_of_heap(const heap_t *h) { return h->place == PLACE_USER ? h->user : NULL; }
/* The usable bytes of an arena's block; aborts naming fn on a pointer that is not one. */
size_t arena_usable(const void *p, const char *fn);
/* free() of a block of user heap u: aborts when u is an arena. */
void uheap_free_check(const heap_t *owner, const void *p, const char *fn);
/* Large blocks of user heaps are on their heap's list (large.c). */
void uheap_large_link(heap_t *h, large_t *l);
void uheap_large_unlink(large_t *l);
/* Capture (locus_heap_capture): returns the heap captured before. */
uheap_t *uheap_capture(uheap_t *u, int *err);
/* An allocation that reached a slow path of a capture trampoline. */
void *uheap_captured_alloc(heap_t *tramp, size_t size, size_t align, bool zero);
/* The thread gives its default heap up: forgets the sub-heap it used last. */
void uheap_thread_forget(void);
/* Thread exit: ends the thread's capture; its heap pointer is the main heap again. */
void uheap_capture_end(heap_t *main);
/* The same for a main heap whose thread is gone (its TLS with it). */
void uheap_capture_drop(heap_t *main);
int uheap_stats(uheap_t *u, locus_stats_t *st);
/* fork() child: capture counts are the forking thread's own (tls: its heap pointer). */
void uheap_fork_child(const heap_t *tls);
/* Calls line(ctx, u) for every live user heap (reports). */
void uheaps_report(void (*line)(void *, uheap_t *), void *ctx);
/* The bytes the heap holds, its own memory (segment and source pieces) and
 * how much of it is free, its sub-heaps (threads that allocated) and the
 * blocks its allocation functions handed out. */
void uheap_figures(uheap_t *u, size_t *held, size_t *seg_total, size_t *seg_free, size_t *threads,
                   size_t *allocs);

#endif /* LOCUS_HEAP_USER_H */
