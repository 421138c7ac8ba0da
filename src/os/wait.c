/* Sleeping until another thread says so: the futex system call, the last
 * stage of every bounded wait (util/lock.c). */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "os/os.h"

void os_futex_wait(atomic_int *word, int expected, uint64_t timeout_ns) {
  struct timespec ts = {(time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u)};
  /* EAGAIN (the word changed), EINTR and ETIMEDOUT all mean: look again. */
  syscall(SYS_futex, (int *)word, FUTEX_WAIT_PRIVATE, expected, timeout_ns ? &ts : NULL, NULL, 0);
}

void os_futex_wake(atomic_int *word, int n) {
  syscall(SYS_futex, (int *)word, FUTEX_WAKE_PRIVATE, n < 0 ? INT_MAX : n, NULL, NULL, 0);
}
