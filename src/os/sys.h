/* The system calls below the locks and the messages (util/): the bottom of
 * the OS layer, which itself uses both (a lock for the fault handler,
 * warnings, counters). Nothing here takes a lock, allocates or reports. */
#ifndef LOCUS_SYS_H
#define LOCUS_SYS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void os_yield(void);
/* Sleeps while *word equals `expected`, at most timeout_ns (0: no bound);
 * returns early on a wake, a change of the word or a signal (futex, private
 * to the process). The caller looks at its condition again. */
void os_futex_wait(atomic_int *word, int expected, uint64_t timeout_ns);
/* Wakes up to n sleepers on word (n < 0: all). */
void os_futex_wake(atomic_int *word, int n);
/* Writes all of buf (retrying short writes and EINTR); false on error. */
bool os_write_all(int fd, const char *buf, size_t len);
/* Writes a message or report to stderr; when the program has closed stderr
 * (ls, cat and sort do at exit) or the write fails there, to the private copy
 * made at start-up, if it still names the same file. */
void os_write_stderr(const char *buf, size_t len);
/* Duplicates stderr once (close-on-exec), for os_write_stderr(). */
void os_stderr_keep(void);

#endif /* LOCUS_SYS_H */
