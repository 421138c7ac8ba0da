/* The system calls of node-wide shared tables (api/shared.c,
 * docs/sharing.md): files in a tmpfs directory, open file description
 * locks (the kernel drops them when the last descriptor of their open file
 * goes, with the process that held it), mappings of the file. Raw system
 * calls: none of these is a cancellation point. */
#ifndef LOCUS_SHM_H
#define LOCUS_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The directory of shared tables' files (the tests may point it elsewhere). */
#define OS_SHM_DIR "/dev/shm"

typedef struct {
  uint64_t dev, ino;                   /* the file's identity */
  int64_t size;                        /* bytes */
  uint64_t nlink;                      /* 0: unlinked */
  uint32_t uid;                        /* owner */
} os_file_info_t;

/* Whether path is an existing directory. */
bool os_dir_exists(const char *path);
/* Opens a file (never through a symbolic link, close on exec) for reading
 * and writing, or only reading; create: creates it 0600 if absent (with
 * writable). The descriptor, or -errno. */
int os_shm_open(const char *path, bool create, bool writable);
/* fstat of fd, or stat of path (fd < 0); false (errno) on failure. */
bool os_file_info(int fd, const char *path, os_file_info_t *out);
/* The lock of fd's open file description (F_OFD_SETLK/SETLKW) on the
 * whole file: OS_LOCK_NONE releases it, OS_LOCK_SHARED, OS_LOCK_EXCL take
 * or convert it; wait: sleep in the kernel until it is granted (released
 * at once by a holder that dies). 0, or -errno (-EAGAIN: held elsewhere). */
typedef enum { OS_LOCK_NONE = 0, OS_LOCK_SHARED, OS_LOCK_EXCL } os_lock_kind_t;
int os_file_lock(int fd, os_lock_kind_t kind, bool wait);
/* Sets the file's length (ftruncate); 0 or -errno. */
int os_file_resize(int fd, int64_t size);
/* Allocates the file's pages now (fallocate): 0, or -errno (-ENOSPC when
 * the tmpfs is full; -EOPNOTSUPP when the file system cannot). */
int os_file_allocate(int fd, int64_t size);
int os_unlink(const char *path);
/* A shared mapping of the file's first len bytes, readable, and writable
 * when asked (fd opened for writing); NULL (errno) on failure. */
void *os_shm_map(int fd, size_t len, bool writable);
uint32_t os_geteuid(void);
/* Sleeps ns nanoseconds (nanosleep, resumed after signals). */
void os_sleep_ns(uint64_t ns);

#endif /* LOCUS_SHM_H */
