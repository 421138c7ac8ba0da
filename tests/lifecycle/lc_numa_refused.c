/* The NUMA system calls forbidden after start-up: a program that sandboxes
 * itself with seccomp as container runtimes do without CAP_SYS_NICE (mbind,
 * set_mempolicy, get_mempolicy and move_pages fail with EPERM). locus probed
 * them at start and found them; from the first refusal it must go on as on
 * a kernel without them (one warning), not fail every allocation that needs
 * fresh memory, as it did: every size from 1 KiB to 64 MiB returned NULL. */
#define _GNU_SOURCE
#include "lc_common.h"
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#define DENY(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM)

static void *worker(void *arg) {
  long fails = 0;
  for (size_t sz = 1024; sz <= ((size_t)64 << 20); sz <<= 1) {
    char *p = malloc(sz);
    if (!p) { fails++; continue; }
    memset(p, (int)(uintptr_t)arg, sz);
    char *q = realloc(p, sz * 3);
    if (!q) { fails++; free(p); continue; }
    if (q[sz - 1] != (char)(uintptr_t)arg) fails += 1000;
    free(q);
  }
  return (void *)fails;
}

int main(void) {
  if (getenv("LOCUS_TEST_EMULATOR")) {   /* qemu-user does not filter the guest's system calls */
    lc_say("lc_numa_refused: skipped under an emulator\nlc_numa_refused: ok\n");
    return 0;
  }
  free(malloc(100));                   /* locus initialised, its NUMA probe done */
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      DENY(SYS_mbind), DENY(SYS_set_mempolicy), DENY(SYS_get_mempolicy), DENY(SYS_move_pages),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof f / sizeof f[0], f};
  LC_CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "no_new_privs");
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog)) {
    lc_say("lc_numa_refused: no seccomp here (errno %d): skipped\nlc_numa_refused: ok\n", errno);
    return 0;
  }
  LC_CHECK(syscall(SYS_mbind, NULL, 0, 0, NULL, 0, 0) == -1 && errno == EPERM, "the filter refuses mbind");
  pthread_t t[3];
  for (long i = 0; i < 3; i++) LC_CHECK(pthread_create(&t[i], NULL, worker, (void *)(i + 1)) == 0, "pthread_create");
  long fails = (long)worker((void *)9);
  for (int i = 0; i < 3; i++) {
    void *r;
    pthread_join(t[i], &r);
    fails += (long)r;
  }
  LC_CHECK(fails == 0, "allocations with the NUMA calls refused: %ld failed or wrong", fails);
  if (lc_have_locus()) {
    void *n0 = locus_malloc_on_node(1 << 20, 0);
    lc_say("lc_numa_refused: locus_malloc_on_node(1 MiB, 0) = %p\n", n0);
    free(n0);
  }
  lc_say("lc_numa_refused: ok\n");
  return 0;
}
