/* With the uma profile (LOCUS_PROFILE=uma), freed large blocks are kept in
 * the memory source's cache; when address space runs out (RLIMIT_AS) the
 * cache must be dropped before an allocation is reported as failed, and an
 * allocation that succeeds after a refused mapping leaves errno alone.
 *
 * Fill the cache (allocate, touch and free large blocks of several sizes),
 * measure how much address space stayed mapped (C), then set the limit so
 * that a new 64 MiB block fits only if that cached memory is given back:
 *   limit = VmSize_now + 64 MiB - C + slack, 0 < slack < C.
 * (On an allocator without a cache, C is ~0 and the block simply fits.)
 */
#include "lc_common.h"
#include <sys/resource.h>

#define NEED (64u << 20)

int main(void) {
  const char *prof = getenv("LOCUS_PROFILE");
  lc_say("LOCUS_PROFILE=%s, profile in use: %s\n", prof ? prof : "(unset)",
         locus_get_profile ? locus_get_profile() : "(not locus)");
  if (locus_get_profile) LC_CHECK(strcmp(locus_get_profile(), "uma") == 0, "profile is %s, not uma", locus_get_profile());

  for (size_t n = 8; n < (16u << 20); n *= 4) free(malloc(n));  /* initialise */
  long vm0 = lc_status_kb("VmSize");
  enum { N = 40 };
  void *v[N];
  size_t total = 0;
  for (int i = 0; i < N; i++) {
    size_t n = ((size_t)2 << 20) + (size_t)(i % 7) * (1u << 20) + (size_t)i * 4096;  /* 2..8 MiB */
    v[i] = malloc(n);
    LC_CHECK(v[i], "malloc(%zu)", n);
    memset(v[i], i, n);
    total += n;
  }
  for (int i = 0; i < N; i++) free(v[i]);
  long vm1 = lc_status_kb("VmSize");
  long cached_kb = vm1 - vm0;
  size_t cached = locus_cached_bytes ? locus_cached_bytes() : 0;
  lc_say("freed %zu MiB in %d blocks: address space still mapped +%ld KiB; locus_cached_bytes %zu\n",
         total >> 20, N, cached_kb, cached);
  if (locus_cached_bytes) {
    LC_CHECK(cached > 0, "the uma profile kept none of %zu MiB of freed large blocks", total >> 20);
    LC_CHECK(cached_kb > 8 * 1024, "locus reports %zu cached bytes but only %ld KiB stay mapped", cached, cached_kb);
  }
  if (cached_kb < 0) cached_kb = 0;
  long slack_kb = cached_kb / 2 + 2048;
  if (cached_kb > 4096 && slack_kb >= cached_kb) slack_kb = cached_kb - 2048;
  rlim_t lim = (rlim_t)(vm1 + (long)(NEED >> 10) - cached_kb + slack_kb) * 1024;
  struct rlimit rl = {lim, RLIM_INFINITY};
  LC_CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit: %s", strerror(errno));
  lc_say("RLIMIT_AS = VmSize %ld KiB + %u MiB - %ld KiB cached + %ld KiB slack\n", vm1, NEED >> 20, cached_kb, slack_kb);

  errno = 4242;
  unsigned char *p = calloc(1, NEED);
  LC_CHECK(p, "calloc(64 MiB) failed (errno %d) although it fits once the %ld KiB of cached memory are released",
           errno, cached_kb);
  /* The mapping refused before the cache was dropped is not reported. */
  if (locus_get_profile) LC_CHECK(errno == 4242, "errno %d after a calloc that succeeded, want it unchanged", errno);
  LC_CHECK(p[0] == 0 && p[NEED / 2] == 0 && p[NEED - 1] == 0, "calloc'd block not zero");
  memset(p, 0x33, NEED);
  LC_CHECK(p[0] == 0x33 && p[NEED - 1] == 0x33, "block content");
  lc_say("64 MiB allocated under the limit; VmSize now %ld KiB; cached now %zu\n", lc_status_kb("VmSize"),
         locus_cached_bytes ? locus_cached_bytes() : 0);
  free(p);

  /* Again with many medium blocks: fill to ENOMEM, free, fill again. */
  long c[2] = {0, 0};
  for (int pass = 0; pass < 2; pass++) {
    void *head = NULL;
    for (;;) {
      void **b = malloc(3u << 20);
      if (!b) { LC_CHECK(errno == ENOMEM, "errno %d", errno); break; }
      *b = head; head = b; c[pass]++;
    }
    while (head) { void *nx = *(void **)head; free(head); head = nx; }
  }
  lc_say("3 MiB blocks until ENOMEM: %ld, then %ld after freeing them\n", c[0], c[1]);
  LC_CHECK(c[0] > 0 && c[1] >= c[0] / 2, "memory not usable again after freeing");
  lc_say("lc_uma_release: ok\n");
  return 0;
}
