/* The C++ operators new and delete, all forms, written in C under their
 * Itanium-ABI names so that liblocus needs no C++ runtime. On failure,
 * operator new calls the program's new-handler (std::get_new_handler) until
 * it succeeds, and with no handler throws std::bad_alloc through libstdc++'s
 * std::__throw_bad_alloc. Both are weak references: any C++ program that can
 * call operator new has libstdc++ loaded. This file is built with
 * -fexceptions so that the exception can unwind through it. */
#include <stddef.h>

#include "api/api.h"
#include "types.h"

#ifndef LOCUS_NO_OVERRIDE
typedef void (*new_handler_t)(void);
extern new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

static NOINLINE void *new_fail(size_t size, size_t align, bool nothrow) {
  for (;;) {
    new_handler_t h = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
    if (!h) break;
    h();
    void *p = align > ALIGN_MIN ? locus_alloc_aligned(size, align) : locus_malloc(size);
    if (p) return p;
  }
  if (nothrow) return NULL;
  if (_ZSt17__throw_bad_allocv) _ZSt17__throw_bad_allocv();
  locus_fatal("operator new(%zu): out of memory and no C++ runtime to throw std::bad_alloc", size);
}

static inline void *new_impl(size_t size) {
  void *p = locus_malloc(size);
  return likely(p) ? p : new_fail(size, ALIGN_MIN, false);
}
static inline void *new_nothrow(size_t size) {
  void *p = locus_malloc(size);
  return likely(p) ? p : new_fail(size, ALIGN_MIN, true);
}
static inline void *new_aligned(size_t size, size_t align, bool nothrow) {
  if (!is_pow2(align)) {
    if (nothrow) return NULL;
    locus_fatal("operator new(%zu, align_val_t(%zu)): alignment is not a power of two", size, align);
  }
  void *p = locus_alloc_aligned(size, align);
  return likely(p) ? p : new_fail(size, align, nothrow);
}

#define NEW LOCUS_EXPORT
NEW void *_Znwm(size_t n) { return new_impl(n); }                                     /* new */
NEW void *_Znam(size_t n) { return new_impl(n); }                                     /* new[] */
NEW void *_ZnwmRKSt9nothrow_t(size_t n, const void *t) { return new_nothrow(n); }
NEW void *_ZnamRKSt9nothrow_t(size_t n, const void *t) { return new_nothrow(n); }
NEW void *_ZnwmSt11align_val_t(size_t n, size_t a) { return new_aligned(n, a, false); }
NEW void *_ZnamSt11align_val_t(size_t n, size_t a) { return new_aligned(n, a, false); }
NEW void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *t) { return new_aligned(n, a, true); }
NEW void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *t) { return new_aligned(n, a, true); }

NEW void _ZdlPv(void *p) { locus_free_checked(p, "operator delete"); }
NEW void _ZdaPv(void *p) { locus_free_checked(p, "operator delete[]"); }
NEW void _ZdlPvm(void *p, size_t n) { locus_free_checked(p, "operator delete"); }
NEW void _ZdaPvm(void *p, size_t n) { locus_free_checked(p, "operator delete[]"); }
NEW void _ZdlPvRKSt9nothrow_t(void *p, const void *t) { locus_free_checked(p, "operator delete"); }
NEW void _ZdaPvRKSt9nothrow_t(void *p, const void *t) { locus_free_checked(p, "operator delete[]"); }
NEW void _ZdlPvSt11align_val_t(void *p, size_t a) { locus_free_checked(p, "operator delete"); }
NEW void _ZdaPvSt11align_val_t(void *p, size_t a) { locus_free_checked(p, "operator delete[]"); }
NEW void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a) { locus_free_checked(p, "operator delete"); }
NEW void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a) { locus_free_checked(p, "operator delete[]"); }
NEW void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *t) { locus_free_checked(p, "operator delete"); }
NEW void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *t) { locus_free_checked(p, "operator delete[]"); }
#endif
