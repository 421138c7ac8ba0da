/* System calls of node-wide shared tables (os/shm.h). */
#define _GNU_SOURCE                    /* F_OFD_SETLK (Linux 3.15) */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "os/shm.h"

bool os_dir_exists(const char *path) {
  struct stat st;
  return syscall(SYS_newfstatat, AT_FDCWD, path, &st, 0) == 0 && S_ISDIR(st.st_mode);
}

int os_shm_open(const char *path, bool create, bool writable) {
  int flags = O_CLOEXEC | O_NOFOLLOW | (writable ? O_RDWR : O_RDONLY) | (create ? O_CREAT : 0);
  long fd = syscall(SYS_openat, AT_FDCWD, path, flags, 0600);
  return fd < 0 ? -errno : (int)fd;
}

bool os_file_info(int fd, const char *path, os_file_info_t *out) {
  struct stat st;
  long r = fd >= 0 ? syscall(SYS_fstat, fd, &st) : syscall(SYS_newfstatat, AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW);
  if (r != 0) return false;
  out->dev = st.st_dev;
  out->ino = st.st_ino;
  out->size = st.st_size;
  out->nlink = st.st_nlink;
  out->uid = st.st_uid;
  return true;
}

int os_file_lock(int fd, os_lock_kind_t kind, bool wait) {
  struct flock fl = {0};
  fl.l_type = kind == OS_LOCK_EXCL ? F_WRLCK : kind == OS_LOCK_SHARED ? F_RDLCK : F_UNLCK;
  fl.l_whence = SEEK_SET;              /* l_start 0, l_len 0: the whole file */
  for (;;) {
    if (syscall(SYS_fcntl, fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) == 0) return 0;
    if (errno == EINTR) continue;      /* a signal handler ran: wait again */
    return errno == EACCES ? -EAGAIN : -errno;
  }
}

int os_file_resize(int fd, int64_t size) { return syscall(SYS_ftruncate, fd, (long)size) == 0 ? 0 : -errno; }

int os_file_allocate(int fd, int64_t size) {
  for (;;) {
    if (syscall(SYS_fallocate, fd, 0, 0L, (long)size) == 0) return 0;
    if (errno != EINTR) return -errno;
  }
}

int os_unlink(const char *path) { return syscall(SYS_unlinkat, AT_FDCWD, path, 0) == 0 ? 0 : -errno; }

void *os_shm_map(int fd, size_t len, bool writable) {
  void *p = mmap(NULL, len, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? NULL : p;
}

uint32_t os_geteuid(void) { return (uint32_t)geteuid(); }

void os_sleep_ns(uint64_t ns) {
  struct timespec t = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  while (syscall(SYS_nanosleep, &t, &t) != 0 && errno == EINTR) {
  }
}
