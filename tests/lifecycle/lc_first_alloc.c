/* The first allocation of a process, made before locus has initialised
 * itself: a library constructor that runs before a preloaded locus's
 * (lc_first_ctor.c). Each form is tried in a fresh process (the test
 * re-executes itself): the block must hold the request and keep it while
 * other blocks are allocated around it. malloc's class lookup once read the
 * class table before the first call initialised it, and handed out a
 * 16-byte block for any small request (found with redis under LD_PRELOAD:
 * libgpg-error's constructor asks for 37 bytes; the overflow cut a free
 * list, which the debug build's validator reported as 254 lost blocks). */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define LC_FIRST_REQ 1000
extern void *lc_first_ptr;
extern size_t lc_first_usable;

static int check(const char *form) {
  unsigned char *p = lc_first_ptr;
  if (!p) return 2;
  if (lc_first_usable < LC_FIRST_REQ) {
    fprintf(stderr, "lc_first_alloc: %s(%d) as the first call: %zu usable bytes\n", form, LC_FIRST_REQ,
            lc_first_usable);
    return 1;
  }
  if (strcmp(form, "malloc") && strcmp(form, "calloc") && strcmp(form, "realloc") && (uintptr_t)p % 64)
    return 4;
  memset(p, 0xA5, LC_FIRST_REQ);       /* the whole request is ours */
  void *q[256];
  for (int i = 0; i < 256; i++) {
    q[i] = malloc(16 + 16 * (i % 8));
    memset(q[i], 0x5A, 16 + 16 * (i % 8));
  }
  for (int i = 0; i < LC_FIRST_REQ; i++)
    if (p[i] != 0xA5) return 3;
  for (int i = 0; i < 256; i++) free(q[i]);
  free(p);
  return 0;
}

int main(int argc, char **argv) {
  static const char *forms[] = {"malloc", "calloc", "realloc", "memalign", "aligned_alloc", "posix_memalign"};
  const char *form = getenv("LC_FIRST_FORM");
  (void)argc;
  if (form) return check(form);
  if (!getenv("LD_PRELOAD") || !strstr(getenv("LD_PRELOAD"), "locus")) {
    fprintf(stderr, "lc_first_alloc: run with locus in LD_PRELOAD\n");
    return 1;
  }
  int bad = 0;
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("LC_FIRST_FORM", forms[i], 1);
      execv("/proc/self/exe", argv);
      _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
      fprintf(stderr, "lc_first_alloc: %s as the first call: %s %d\n", forms[i], WIFEXITED(st) ? "exit" : "signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      bad = 1;
    }
  }
  if (bad) return 1;
  printf("lc_first_alloc: ok\n");
  return 0;
}
