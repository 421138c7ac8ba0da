/* The system calls the locks and the messages (util/) stand on: sleeping
 * until another thread says so (the futex, the last stage of every bounded
 * wait, util/lock.c), yielding, and writing to stderr (util/error.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <sys/stat.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "os/sys.h"

void os_futex_wait(atomic_int *word, int expected, uint64_t timeout_ns) {
  struct timespec ts = {(time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u)};
  /* EAGAIN (the word changed), EINTR and ETIMEDOUT all mean: look again. */
  syscall(SYS_futex, (int *)word, FUTEX_WAIT_PRIVATE, expected, timeout_ns ? &ts : NULL, NULL, 0);
}

void os_futex_wake(atomic_int *word, int n) {
  syscall(SYS_futex, (int *)word, FUTEX_WAKE_PRIVATE, n < 0 ? INT_MAX : n, NULL, NULL, 0);
}

void os_yield(void) { sched_yield(); }

/* The raw system call: write(2) of libc is a cancellation point, and malloc
 * and free must not be one (os.c, "file I/O that is never a cancellation
 * point"). */
bool os_write_all(int fd, const char *buf, size_t len) {
  while (len) {
    long w = syscall(SYS_write, fd, buf, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    buf += w;
    len -= (size_t)w;
  }
  return true;
}

/* ---- stderr that survives the program closing it ------------------------- */
static int err_copy = -1;
static dev_t err_dev;
static ino_t err_ino;

void os_stderr_keep(void) {
  struct stat st;
  if (err_copy >= 0 || fstat(2, &st) != 0) return;
  /* A high number, away from the descriptors programs and shells number by
   * hand (exec 3>file); below 100 only when the limit is that low. */
  int fd = fcntl(2, F_DUPFD_CLOEXEC, 100);
  if (fd < 0) fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
  if (fd < 0) return;
  err_dev = st.st_dev;
  err_ino = st.st_ino;
  err_copy = fd;
}

/* fd 2 first when it is open: that honours the program's own redirections
 * (freopen, dup2). A descriptor 2 that the program closed and that a later
 * open reused cannot be told apart from a redirection; a write that fails on
 * it (a file opened read-only) falls back to the copy. */
void os_write_stderr(const char *buf, size_t len) {
  int saved = errno;
  if (fcntl(2, F_GETFD) >= 0 && os_write_all(2, buf, len)) {
    errno = saved;
    return;
  }
  struct stat st;                        /* the copy's number may have been reused since */
  if (err_copy >= 0 && fstat(err_copy, &st) == 0 && st.st_dev == err_dev && st.st_ino == err_ino)
    os_write_all(err_copy, buf, len);
  errno = saved;
}
