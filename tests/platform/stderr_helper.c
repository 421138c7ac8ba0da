/* stderr_helper MODE [FILE]: a program that does something to its stderr
 * (descriptor 2) before it exits, for stats_stderr_closed.sh (which preloads
 * locus with LOCUS_STATS=1). Not linked with locus.
 *
 *   close           close(2), allocate, exit(0)
 *   reuse-write F   close(2), open F for writing: F gets descriptor 2 (the
 *                   lowest free one); write one line of data to it; exit(0)
 *   reuse-read F    close(2), open F read-only (descriptor 2), read it; exit(0)
 *   freopen F       freopen(F, "w", stderr): the usual way to redirect stderr
 *                   to a log file; fprintf a line to stderr; exit(0)
 *
 * Exits 3 if the descriptor arithmetic does not come out as described (then
 * the test cannot say anything). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void alloc_some(void) {
  for (size_t n = 8; n < (4u << 20); n *= 4) {
    char *p = malloc(n);
    if (p) p[0] = p[n - 1] = 1;
    free(p);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  const char *mode = argv[1];
  alloc_some();
  if (!strcmp(mode, "close")) {
    close(2);
    alloc_some();
    return 0;
  }
  if (argc < 3) return 2;
  const char *file = argv[2];
  if (!strcmp(mode, "reuse-write") || !strcmp(mode, "reuse-read")) {
    int w = !strcmp(mode, "reuse-write");
    close(2);
    int fd = w ? open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644) : open(file, O_RDONLY);
    if (fd != 2) {
      dprintf(1, "stderr_helper: open gave descriptor %d, not 2\n", fd);
      return 3;
    }
    if (w) {
      static const char line[] = "program data\n";
      if (write(fd, line, sizeof line - 1) != (ssize_t)(sizeof line - 1)) return 3;
    } else {
      char buf[256];
      if (read(fd, buf, sizeof buf) < 0) return 3;
    }
    alloc_some();
    return 0;
  }
  if (!strcmp(mode, "freopen")) {
    if (!freopen(file, "w", stderr)) return 3;
    fprintf(stderr, "log line\n");
    fflush(stderr);
    alloc_some();
    return 0;
  }
  return 2;
}
