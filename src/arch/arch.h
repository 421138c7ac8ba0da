/* The architecture layer: everything locus needs to know about the CPU, for
 * x86-64 and aarch64. Nothing outside this file names an instruction or an
 * architecture macro. */
#ifndef LOCUS_ARCH_H
#define LOCUS_ARCH_H

#include <stdint.h>

#if defined(__x86_64__)
#define ARCH_NAME "x86_64"
#define ARCH_CACHE_LINE 64
/* Largest base page size the architecture allows: mappings are split and
 * unmapped only on multiples of it, so the same binary runs on any kernel. */
#define ARCH_PAGE_MAX 4096u
/* Total store order: every plain store is a release, every load an acquire. */
#define ARCH_TSO 1

static inline void arch_pause(void) { __builtin_ia32_pause(); }

/* A fast, monotonic-enough tick count (for ages and seeds, not for time). */
static inline uint64_t arch_cycles(void) {
  uint32_t lo, hi;
  __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
  return (uint64_t)hi << 32 | lo;
}

#elif defined(__aarch64__)
#define ARCH_NAME "aarch64"
/* Neoverse and A64FX L1 lines are 64 and 256 bytes; 64 keeps structures small,
 * and the few contended fields are padded to 128 (adjacent-line prefetch). */
#define ARCH_CACHE_LINE 64
#define ARCH_PAGE_MAX 65536u   /* kernels run with 4, 16 or 64 KiB pages */
#define ARCH_TSO 0             /* weakly ordered: releases need stlr */

static inline void arch_pause(void) { __asm__ volatile("yield" ::: "memory"); }

static inline uint64_t arch_cycles(void) {
  uint64_t v;
  __asm__ volatile("mrs %0, cntvct_el0" : "=r"(v));
  return v;
}

#else
#error "locus supports x86-64 and aarch64: add the port to src/arch/arch.h"
#endif

#endif /* LOCUS_ARCH_H */
