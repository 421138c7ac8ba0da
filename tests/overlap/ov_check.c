/* Correctness of liblocus-overlap.so (docs/overlap.md) under mpirun, 2 or 4
 * ranks (an even number; ranks pair as r and r^1). Every case checks every
 * byte; the program prints "ov_check: <case> ok" per case and exits 0 when
 * all pass (non-zero, with the case, otherwise). It runs the same with and
 * without the library (plain MPI must pass too); OV_EXPECT_OVERLAP=1 also
 * asks that a guarded MPI_Ssend return before its receive is posted (the
 * proof that the call was overlapped).
 *
 * Cases: ordering, wildcards, statuses, partial pages, shared page frames,
 * writes to a send buffer and reads of a receive buffer right after the
 * call, system calls on the buffers, free during a transfer, stack buffers
 * (copy and blocking paths), Sendrecv(_replace), Ssend/Rsend, errors
 * (invalid rank and communicator with MPI_ERRORS_RETURN), MPI_Cancel of a
 * program request while overlapped ones are pending, a program's own receive
 * into a page an intercepted send guards, calls before MPI_Init
 * and after MPI_Finalize, MPI_Finalize with transfers pending. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <pthread.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <setjmp.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

static int rank, size, peer;
static bool tcp;                       /* OV_TCP=1: run.sh's tcp mode (--mca btl tcp,self) */
static const char *tmpdir;

#define FAIL(...)                                                   \
  do {                                                              \
    fprintf(stderr, "ov_check rank %d: FAIL %s:%d: ", rank, __func__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                                   \
    fprintf(stderr, "\n");                                          \
    MPI_Abort(MPI_COMM_WORLD, 1);                                   \
  } while (0)

static unsigned char pat(size_t i, int seed) { return (unsigned char)(i * 131 + (size_t)seed * 7 + (i >> 12)); }
static void fill(void *p, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) ((unsigned char *)p)[i] = pat(i, seed);
}
static void check(const void *p, size_t n, int seed, const char *what) {
  for (size_t i = 0; i < n; i++)
    if (((const unsigned char *)p)[i] != pat(i, seed))
      FAIL("%s: byte %zu of %zu is %u, expected %u (seed %d)", what, i, n, ((const unsigned char *)p)[i], pat(i, seed),
           seed);
}
static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static void done(const char *c) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("ov_check: %s ok\n", c), fflush(stdout);
}
static bool sender(void) { return !(rank & 1); }

#define BIG (1u << 20)
/* Timing checks: the peer comes LATE_S seconds late, and a call counts as
 * overlapped (returned at once) under LIMIT seconds. Twice apart, so that
 * a rank descheduled for up to LIMIT on a loaded 2-core host (4 ranks, each
 * with a progress thread, beside another test) cannot turn a verdict. */
#define LATE_S 1
#define LIMIT 0.5

/* Messages of one (source, tag) arrive in order, whatever their buffers. */
static void c_ordering(void) {
  enum { N = 40 };
  size_t n = 256 * 1024;
  if (sender()) {
    char *b = malloc(n);
    for (int k = 0; k < N; k++) {
      fill(b, n, k);                   /* the previous send may be pending: the write waits for it */
      MPI_Send(b, (int)n, MPI_BYTE, peer, 5, MPI_COMM_WORLD);
    }
    free(b);
  } else {
    char *r[N];
    for (int k = 0; k < N; k++) {
      r[k] = malloc(n);
      MPI_Recv(r[k], (int)n, MPI_BYTE, peer, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    for (int k = 0; k < N; k++) {
      check(r[k], n, k, "ordering");
      free(r[k]);
    }
  }
  done("ordering");
}

/* MPI_ANY_SOURCE / MPI_ANY_TAG, with statuses ignored (overlapped) and
 * asked for (blocking): sources, tags and counts right. */
static void c_wildcards(void) {
  size_t n = 300 * 1000;
  if (rank != 0) {
    char *b = malloc(n);
    fill(b, n, rank);
    MPI_Send(b, (int)n - rank, MPI_BYTE, 0, 100 + rank, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);       /* rank 0's first wildcards see first messages only */
    fill(b, n, rank + 50);
    MPI_Send(b, (int)n, MPI_BYTE, 0, 200 + rank, MPI_COMM_WORLD);
    free(b);
  } else {
    int seen[64] = {0};
    char *b = malloc(n);
    for (int k = 1; k < size; k++) {     /* with status: where it came from */
      MPI_Status st;
      int cnt;
      MPI_Recv(b, (int)n, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
      MPI_Get_count(&st, MPI_BYTE, &cnt);
      int s = st.MPI_SOURCE;
      if (s < 1 || s >= size || seen[s]++ || st.MPI_TAG != 100 + s || cnt != (int)n - s)
        FAIL("status: source %d tag %d count %d", s, st.MPI_TAG, cnt);
      check(b, (size_t)cnt, s, "wildcard with status");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    char *r[64];
    for (int k = 1; k < size; k++) {     /* status ignored: overlapped; the tag tells the sender */
      r[k] = malloc(n);
      MPI_Recv(r[k], (int)n, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    int found = 0;
    for (int k = 1; k < size; k++) {
      for (int s = 1; s < size; s++)
        if (r[k][0] == (char)pat(0, s + 50) && r[k][1] == (char)pat(1, s + 50)) {
          check(r[k], n, s + 50, "wildcard ignored status");
          found |= 1 << s;
        }
      free(r[k]);
    }
    if (found != ((1 << size) - 2)) FAIL("wildcard receives: senders found %#x", found);
    free(b);
  }
  done("wildcards");
}

/* Statuses and counts of MPI_Recv and MPI_Sendrecv; MPI_Probe after
 * overlapped receives. */
static void c_statuses(void) {
  size_t n = 200 * 1000;
  char *s = malloc(n), *r = malloc(n);
  fill(s, n, rank);
  MPI_Status st;
  int cnt;
  MPI_Sendrecv(s, (int)n - 3 * rank, MPI_BYTE, peer, 7, r, (int)n, MPI_BYTE, peer, 7, MPI_COMM_WORLD, &st);
  MPI_Get_count(&st, MPI_BYTE, &cnt);
  if (st.MPI_SOURCE != peer || st.MPI_TAG != 7 || cnt != (int)n - 3 * peer) FAIL("sendrecv status");
  check(r, (size_t)cnt, peer, "sendrecv");
  if (sender()) {
    MPI_Send(s, 1000, MPI_BYTE, peer, 8, MPI_COMM_WORLD);
    MPI_Send(s, 2000, MPI_BYTE, peer, 9, MPI_COMM_WORLD);
  } else {
    MPI_Probe(peer, 9, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_BYTE, &cnt);
    if (cnt != 2000 || st.MPI_TAG != 9) FAIL("probe count %d", cnt);
    MPI_Recv(r, (int)n, MPI_BYTE, peer, 8, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_BYTE, &cnt);
    if (cnt != 1000) FAIL("recv count %d", cnt);
    MPI_Recv(r, (int)n, MPI_BYTE, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    check(r, 2000, peer, "probe");   /* the sender's pattern: its rank */
  }
  free(s);
  free(r);
  done("statuses");
}

/* Buffers not on page boundaries; the program writes the bytes next to a
 * pending receive's (same page) and reads next to a pending send's. */
static void c_partial_pages(void) {
  size_t n = 1 << 20;
  char *b = malloc(n);
  size_t off = 100, len = 5000;        /* pages 0 and 1, partly */
  fill(b, n, 3);
  if (sender()) {
    fill(b + off, len, 11);
    MPI_Send(b + off, (int)len, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    b[0] = 42;                         /* same page as the pending send: waits, then writes */
    b[off + len + 10] = 43;
    fill(b + 8192, 3 * 4096 + 7, 12);
    MPI_Send(b + 8192, 3 * 4096 + 7, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
    if (b[0] != 42 || b[off + len + 10] != 43) FAIL("neighbour bytes lost");
  } else {
    MPI_Recv(b + off, (int)len, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    b[0] = 42;                         /* a neighbour write while the receive may be pending */
    MPI_Recv(b + 8192, 3 * 4096 + 7, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (b[0] != 42) FAIL("neighbour byte lost");
    check(b + off, len, 11, "partial page 1");
    check(b + 8192, 3 * 4096 + 7, 12, "partial page 2");
    for (size_t i = 1; i < off; i++)
      if ((unsigned char)b[i] != pat(i, 3)) FAIL("byte %zu before the buffer changed", i);
  }
  free(b);
  done("partial pages");
}

/* Several pending requests on one page frame: two receives into the two
 * halves of a page and a send from a third buffer on that page; then the
 * receive buffer of one half is sent on (serialisation). */
static void c_shared_frames(void) {
  size_t n = 1 << 20;
  char *b = malloc(n);
  char *page = b + 4 * 4096;
  if (sender()) {
    char *s = malloc(n);
    fill(s, 2048, 21);
    MPI_Send(s, 2048, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    fill(s + 4096, 900, 22);
    MPI_Send(s + 4096, 900, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
    MPI_Recv(b, 1500, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Recv(b + 2048, 2048, MPI_BYTE, peer, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    check(b, 1500, 23, "shared frame: third");
    check(b + 2048, 2048, 21, "shared frame: forwarded");
    free(s);
  } else {
    fill(page + 3000, 1500, 23);
    MPI_Recv(page, 2048, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Recv(page + 2048, 900, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(page + 3000 + 48, 0, MPI_BYTE, peer, 99, MPI_COMM_WORLD);   /* empty: no buffer */
    MPI_Send(page + 3000, 1500, MPI_BYTE, peer, 3, MPI_COMM_WORLD);   /* the receives' page, other bytes */
    MPI_Send(page, 2048, MPI_BYTE, peer, 4, MPI_COMM_WORLD);          /* the first receive's bytes: waits for it */
    check(page, 2048, 21, "shared frame: first half");
    check(page + 2048, 900, 22, "shared frame: second");
  }
  if (sender()) MPI_Recv(NULL, 0, MPI_BYTE, peer, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  free(b);
  done("shared page frames");
}

/* The send buffer written right after MPI_Send returns: the receiver gets
 * the data of the call; the receive buffer read right after MPI_Recv
 * returns: the data is there. */
static void c_access_during(void) {
  size_t n = 4u << 20;
  char *b = malloc(n);
  for (int round = 0; round < 5; round++) {
    if (sender()) {
      fill(b, n, 30 + round);
      MPI_Send(b, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
      memset(b, 0xEE, n);              /* must not reach the receiver */
      MPI_Send(b, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
      b[n / 2] = 1;
    } else {
      MPI_Recv(b, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      check(b, n, 30 + round, "read right after MPI_Recv");
      MPI_Recv(b, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      for (size_t i = 0; i < n; i += 4093)
        if ((unsigned char)b[i] != 0xEE) FAIL("second message byte %zu", i);
    }
  }
  free(b);
  done("accesses during transfers");
}

/* write() of a receive buffer right after MPI_Recv, read() into a send
 * buffer right after MPI_Send: the calls succeed and see or keep the data
 * of the transfer. */
static void c_syscalls(void) {
  size_t n = 2u << 20;
  char path[256];
  snprintf(path, sizeof path, "%s/ov_check.%d.%d", tmpdir, (int)getpid(), rank);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) FAIL("open %s", path);
  unlink(path);
  char *b = malloc(n), *c = malloc(n);
  if (sender()) {
    fill(b, n, 40);
    MPI_Send(b, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    fill(c, n, 41);
    if (pwrite(fd, c, n, 0) != (ssize_t)n) FAIL("pwrite");
    if (pread(fd, b, n, 0) != (ssize_t)n) FAIL("pread into the send buffer");   /* the send sees the old data */
    check(b, n, 41, "pread");
    fill(b, n, 42);
    MPI_Send(b, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
    FILE *f = fdopen(dup(fd), "w+");
    if (fread(b, 1, n, f) > n) FAIL("fread");   /* whatever it reads: it must not fail on the page */
    fclose(f);
    fill(b, n, 43);
    MPI_Send(b, (int)n, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
    struct iovec v = {b, n};
    if (preadv(fd, &v, 1, 0) != (ssize_t)n) FAIL("preadv into the send buffer");
    check(b, n, 41, "preadv");
  } else {
    MPI_Recv(b, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (write(fd, b, n) != (ssize_t)n) FAIL("write of the receive buffer");
    if (pread(fd, c, n, 0) != (ssize_t)n) FAIL("pread back");
    check(c, n, 40, "write after MPI_Recv");
    MPI_Recv(b, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    FILE *f = fdopen(dup(fd), "w");
    if (fwrite(b, 1, n, f) != n) FAIL("fwrite of the receive buffer");
    fclose(f);
    if (pread(fd, c, n, (off_t)n) != (ssize_t)n) FAIL("pread back 2");
    check(c, n, 42, "fwrite after MPI_Recv");
    MPI_Recv(b, (int)n, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    struct iovec v = {b, n};
    if (pwritev(fd, &v, 1, (off_t)(2 * n)) != (ssize_t)n) FAIL("pwritev of the receive buffer");
    if (pread(fd, c, n, (off_t)(2 * n)) != (ssize_t)n) FAIL("pread back 3");
    check(c, n, 43, "pwritev after MPI_Recv");
  }
  close(fd);
  free(b);
  free(c);
  done("system calls on buffers");
}

/* free() right after MPI_Send / MPI_Recv returns. */
static void c_free_during(void) {
  size_t n = 3u << 20;
  for (int k = 0; k < 8; k++) {
    char *b = malloc(n);
    if (sender()) {
      fill(b, n, 50 + k);
      MPI_Send(b, (int)n, MPI_BYTE, peer, k, MPI_COMM_WORLD);
      free(b);                         /* waits for the send */
      char *x = malloc(n);             /* may reuse the address space */
      memset(x, 0x55, n);
      free(x);
    } else {
      if (k & 1) {
        MPI_Recv(b, (int)n, MPI_BYTE, peer, k, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        free(b);                       /* the data is lost, but nothing breaks */
      } else {
        MPI_Recv(b, (int)n, MPI_BYTE, peer, k, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check(b, n, 50 + k, "free during: received");
        free(b);
      }
    }
  }
  done("free during a transfer");
}

/* Buffers locus does not guard: the stack (copy path for a small send,
 * blocking receive) and a large one on the stack (blocking send). */
static void c_stack(void) {
  char small[3000];
  static char global[200000];
  if (sender()) {
    fill(small, sizeof small, 60);
    MPI_Send(small, sizeof small, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    memset(small, 0, sizeof small);    /* copied: the receiver must not see this */
    fill(global, sizeof global, 61);
    MPI_Send(global, sizeof global, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
    memset(global, 0, sizeof global);
  } else {
    MPI_Recv(small, sizeof small, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    check(small, sizeof small, 60, "stack");
    MPI_Recv(global, sizeof global, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    check(global, sizeof global, 61, "global");
  }
  done("stack and globals");
}

/* MPI_Sendrecv_replace, MPI_Ssend, MPI_Rsend (receive posted first), and a
 * derived datatype with holes. */
static void c_modes(void) {
  size_t n = 512 * 1024;
  char *b = malloc(n);
  fill(b, n, 70 + rank);
  MPI_Sendrecv_replace(b, (int)n, MPI_BYTE, peer, 1, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  check(b, n, 70 + peer, "sendrecv_replace");
  MPI_Datatype vec;
  MPI_Type_vector(100, 1000, 2000, MPI_BYTE, &vec);
  MPI_Type_commit(&vec);
  if (sender()) {
    fill(b, n, 71);
    MPI_Ssend(b, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
    fill(b, n, 72);
    MPI_Barrier(MPI_COMM_WORLD);       /* the receiver's MPI_Irecv is posted */
    MPI_Rsend(b, (int)n, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
    fill(b, n, 73);
    MPI_Send(b, 1, vec, peer, 4, MPI_COMM_WORLD);
    fill(b, n, 74);
  } else {
    MPI_Recv(b, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    check(b, n, 71, "ssend");
    MPI_Request rq;
    char *c = malloc(n);
    MPI_Irecv(c, (int)n, MPI_BYTE, peer, 3, MPI_COMM_WORLD, &rq);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    check(c, n, 72, "rsend");
    memset(c, 0, n);
    MPI_Recv(c, 1, vec, peer, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int blk = 0; blk < 100; blk++)
      for (int i = 0; i < 1000; i++) {
        size_t at = (size_t)blk * 2000 + (size_t)i;
        if ((unsigned char)c[at] != pat(at, 73)) FAIL("vector byte %zu", at);
        if (c[at + 1000] != 0 && blk < 99) FAIL("vector hole %zu written", at + 1000);
      }
    free(c);
  }
  if (sender()) MPI_Barrier(MPI_COMM_WORLD);
  else MPI_Barrier(MPI_COMM_WORLD);
  MPI_Type_free(&vec);
  free(b);
  done("sendrecv_replace, ssend, rsend, derived types");
}

/* Errors come back where the blocking call returned them; MPI_Cancel of a
 * program request while overlapped requests are pending. */
static void c_errors(void) {
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  size_t n = 256 * 1024;
  char *b = malloc(n);
  fill(b, n, 80);
  int rc = MPI_Send(b, (int)n, MPI_BYTE, size + 5, 0, c);
  if (rc == MPI_SUCCESS) FAIL("send to an invalid rank succeeded");
  rc = MPI_Recv(b, (int)n, MPI_BYTE, -7, 0, c, MPI_STATUS_IGNORE);
  if (rc == MPI_SUCCESS) FAIL("receive from an invalid rank succeeded");
  rc = MPI_Send(b, -1, MPI_BYTE, peer, 0, c);
  if (rc == MPI_SUCCESS) FAIL("negative count accepted");
  /* Checked before the library reads the buffer (a copy of NULL crashed):
   * a NULL buffer to MPI_PROC_NULL (Open MPI: MPI_ERR_BUFFER, whatever the
   * peer), an invalid rank or tag with a bad buffer: the runtime's answer.
   * Large enough not to go straight to the runtime as small messages do. */
  int rc0 = MPI_Send(NULL, 100000, MPI_INT, MPI_PROC_NULL, 0, c);
  rc = MPI_Sendrecv(NULL, 100000, MPI_INT, MPI_PROC_NULL, 0, NULL, 100000, MPI_INT, MPI_PROC_NULL, 0, c,
                    MPI_STATUS_IGNORE);
  if ((rc0 == MPI_SUCCESS) != (rc == MPI_SUCCESS)) FAIL("NULL buffers with MPI_PROC_NULL: %d and %d", rc0, rc);
  rc = MPI_Ssend(NULL, 100000, MPI_INT, MPI_PROC_NULL, 0, c);
  if ((rc0 == MPI_SUCCESS) != (rc == MPI_SUCCESS)) FAIL("NULL buffer ssend to MPI_PROC_NULL: %d and %d", rc0, rc);
  rc = MPI_Send((void *)16, 100000, MPI_INT, size + 5, 0, c);
  if (rc == MPI_SUCCESS) FAIL("send from a bad pointer to an invalid rank succeeded");
  rc = MPI_Send((void *)16, 100000, MPI_INT, peer, -3, c);
  if (rc == MPI_SUCCESS) FAIL("send from a bad pointer with a negative tag succeeded");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  rc = MPI_Send(b, 10, MPI_BYTE, peer, 0, MPI_COMM_NULL);
  if (rc == MPI_SUCCESS) FAIL("send on MPI_COMM_NULL succeeded");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  /* Cancel */
  MPI_Request rq;
  char *x = malloc(n);
  if (sender()) MPI_Send(b, (int)n, MPI_BYTE, peer, 1, c);
  else MPI_Recv(x, (int)n, MPI_BYTE, peer, 1, c, MPI_STATUS_IGNORE);   /* maybe pending */
  MPI_Irecv(x + 1, 10, MPI_BYTE, peer, 12345, c, &rq);
  MPI_Cancel(&rq);
  MPI_Status st;
  MPI_Wait(&rq, &st);
  int flag;
  MPI_Test_cancelled(&st, &flag);
  if (!flag) FAIL("cancel did not cancel");
  if (!sender()) check(x, n, 80, "receive around a cancel");
  free(x);
  free(b);
  MPI_Comm_free(&c);
  done("errors and cancel");
}

/* The program's own non-blocking receive into a page that an intercepted
 * send then guards: the runtime writes the program's address while the
 * page is read-only (the progress thread must not wait for itself). */
static void c_program_requests(void) {
  size_t n = 1 << 20;
  char *b = malloc(n);
  for (int round = 0; round < 20; round++) {
    char *page = b + 8 * 4096;
    /* 1000 bytes: small messages go straight to the runtime; 20000: the
     * send is guarded, its first page the receive's last */
    bool big = (round & 1) && tcp;     /* shared memory: the peer's single copy cannot write a guarded page (docs/overlap.md) */
    size_t len = big ? 20000 : 1000, at = big ? 20000 + 48 : 2048;
    if (sender()) {
      fill(b, len, 100 + round);
      MPI_Send(b, (int)len, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
      MPI_Recv(b + 65536, (int)len, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      check(b + 65536, len, 200 + round, "program request: guarded send");
    } else {
      MPI_Request rq;
      MPI_Irecv(page, (int)len, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &rq);
      fill(page + at, len, 200 + round);
      MPI_Send(page + at, (int)len, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
      MPI_Wait(&rq, MPI_STATUS_IGNORE);
      check(page, len, 100 + round, "program request: its receive");
    }
  }
  free(b);
  done("program requests on guarded pages");
}

/* Threads of a FUNNELED-style program read a receive buffer and write a
 * send buffer while the main thread's calls are pending: each access
 * faults and waits on its own. */
typedef struct {
  char *buf;
  size_t n;
  int seed;
  bool write;
  int bad;
} worker_t;

static void *worker(void *arg) {
  worker_t *w = arg;
  for (size_t i = 0; i < w->n; i += 4096 / 4) {
    if (w->write) w->buf[i] = (char)w->seed;
    else if ((unsigned char)w->buf[i] != pat(i, w->seed)) w->bad++;
  }
  return NULL;
}

static void c_threads(void) {
  size_t n = 2u << 20;
  char *b = malloc(n);
  enum { T = 4 };
  for (int round = 0; round < 5; round++) {
    pthread_t t[T];
    worker_t w[T];
    if (sender()) {
      fill(b, n, 110 + round);
      MPI_Send(b, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
      for (int k = 0; k < T; k++) {   /* writers of the buffer in flight: they wait */
        w[k] = (worker_t){b + (size_t)k * (n / T), n / T, 1, true, 0};
        pthread_create(&t[k], NULL, worker, &w[k]);
      }
      for (int k = 0; k < T; k++) pthread_join(t[k], NULL);
    } else {
      MPI_Recv(b, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      for (int k = 0; k < T; k++) {   /* readers of the buffer still arriving: they wait */
        w[k] = (worker_t){b, n, 110 + round, false, 0};
        pthread_create(&t[k], NULL, worker, &w[k]);
      }
      for (int k = 0; k < T; k++) {
        pthread_join(t[k], NULL);
        if (w[k].bad) FAIL("thread %d read %d wrong bytes", k, w[k].bad);
      }
    }
  }
  free(b);
  done("threads touching buffers in flight");
}

/* The call is overlapped: a guarded MPI_Ssend returns before the receiver
 * posts its receive (LATE_S later). */
static void c_overlapped(void) {
  size_t n = 1u << 20;
  char *b = malloc(n);
  double t = 0;
  if (sender()) {
    fill(b, n, 90);
    double t0 = now();
    MPI_Ssend(b, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    t = now() - t0;
  } else {
    struct timespec ts = {LATE_S, 0};
    nanosleep(&ts, NULL);
    MPI_Recv(b, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    check(b, n, 90, "overlapped ssend");
  }
  const char *e = getenv("OV_EXPECT_OVERLAP");
  if (sender() && e && *e == '1' && t > LIMIT) FAIL("MPI_Ssend took %.3f s: not overlapped", t);
  if (sender() && e && *e == '0' && t < LIMIT) FAIL("MPI_Ssend took %.3f s: overlapped although off", t);
  free(b);
  done("overlapped ssend");
}

/* Small messages go straight to the runtime: a small MPI_Recv that asks
 * for its status does not wait for the pending requests (here a guarded
 * receive whose message comes LATE_S later), and keeps MPI's order against
 * the pending ones; 1-byte messages from the stack interleave. */
static void c_small_direct(void) {
  size_t n = 1u << 20;
  char *b = malloc(n), *c = malloc(100);
  char small[64];
  double t = 0;
  if (sender()) {
    MPI_Recv(b, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);   /* overlapped: pending */
    double t0 = now();
    MPI_Status st;
    MPI_Recv(small, sizeof small, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &st);
    t = now() - t0;
    MPI_Recv(c, 100, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);   /* same tag, posted after: second */
    int cnt;
    MPI_Get_count(&st, MPI_BYTE, &cnt);
    if (cnt != 10 || st.MPI_SOURCE != peer || st.MPI_TAG != 2) FAIL("small status: count %d", cnt);
    check(small, 10, 122, "small receive");
    check(b, n, 120, "large receive before a small one");
    check(c, 100, 121, "small receive after a pending large one");
  } else {
    fill(small, 10, 122);
    MPI_Send(small, 10, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
    struct timespec ts = {LATE_S, 0};
    nanosleep(&ts, NULL);
    fill(b, n, 120);
    fill(c, 100, 121);
    MPI_Send(b, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    MPI_Send(c, 100, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
  }
  for (int k = 0; k < 1000; k++) {     /* ping-pong of one byte */
    char x = (char)k;
    if (sender()) {
      MPI_Send(&x, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
      MPI_Recv(&x, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (x != (char)(k + 1)) FAIL("ping-pong %d", k);
    } else {
      MPI_Recv(&x, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      x++;
      MPI_Send(&x, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
    }
  }
  const char *e = getenv("OV_EXPECT_OVERLAP");
  if (sender() && e && *e == '1' && t > LIMIT) FAIL("small MPI_Recv took %.3f s: waited for pending requests", t);
  free(b);
  free(c);
  done("small messages straight to the runtime");
}

/* Many pending requests cut one block's pages: a large guarded send over
 * 300 pages, then 100 small guarded MPI_Ssend on its odd pages (pending
 * until matched). The large one completes first, the small ones later;
 * then every page must be writable (the protection of each page recomputed
 * from all the requests on the block: more than 64 once crashed). */
static void c_many_cuts(void) {
  size_t pg = 4096, np = 300;
  enum { K = 100 };
  char *b = malloc(np * pg + pg);
  char *a = (char *)(((uintptr_t)b + pg - 1) & ~(uintptr_t)(pg - 1));
  if (sender()) {
    fill(a, np * pg, 130);
    MPI_Send(a, (int)(np * pg), MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    for (int i = 0; i < K; i++) MPI_Ssend(a + (size_t)(2 * i + 1) * pg, 100, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);              /* the large send completes meanwhile */
    MPI_Barrier(MPI_COMM_WORLD);       /* the small ones complete */
    for (size_t p = 0; p < np; p++) a[p * pg] = 2;
  } else {
    char *r = malloc(np * pg);
    MPI_Recv(r, (int)(np * pg), MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    struct timespec ts = {0, 150 * 1000 * 1000};
    nanosleep(&ts, NULL);
    check(r, np * pg, 130, "many cuts: large");
    for (int i = 0; i < K; i++) {
      MPI_Recv(r, 100, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      for (int j = 0; j < 100; j++)
        if ((unsigned char)r[j] != pat((size_t)(2 * i + 1) * pg + (size_t)j, 130)) FAIL("many cuts: small %d byte %d", i, j);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    free(r);
  }
  free(b);
  done("many requests on one block");
}

/* The program's own MPI_Isend shares a page with an intercepted receive
 * that guards it (inaccessible); the runtime sends the Isend's data from
 * the program's address, with writev on TCP, in the thread that completes
 * requests: it must not wait for itself (hung before). Over TCP only: on
 * shared memory the peer reads it with a single copy (process_vm_readv),
 * which a guarded page fails (docs/overlap.md). */
static void c_program_isend(void) {
  if (!tcp) return;
  size_t n1 = (1u << 20) - 128, n2 = 256 * 1024;
  if (sender()) {
    char *b = malloc(n1 + n2 + 4096);
    fill(b, n1, 140);
    MPI_Request rq;
    MPI_Isend(b, (int)n1, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &rq);
    MPI_Recv(b + n1, (int)n2, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);   /* its first page: the Isend's last */
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    check(b + n1, n2, 141, "program isend: intercepted receive");
    free(b);
  } else {
    char *r = malloc(n1), *s = malloc(n2);
    fill(s, n2, 141);
    struct timespec ts = {0, 150 * 1000 * 1000};
    nanosleep(&ts, NULL);              /* the peer's page is guarded by now */
    MPI_Request rq[2];
    MPI_Irecv(r, (int)n1, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &rq[0]);
    nanosleep(&ts, NULL);
    MPI_Isend(s, (int)n2, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &rq[1]);
    MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
    check(r, n1, 140, "program isend: its data");
    free(r);
    free(s);
  }
  done("program isend on a guarded page (tcp)");
}

/* A truncated receive under MPI_ERRORS_RETURN: the error comes back from
 * the MPI_Recv (blocking) or from the next call that completes it
 * (overlapped), once, and nothing hangs (MPI_Waitall in the drain
 * intermittently did). */
static void c_truncated(void) {
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  size_t n = 400 * 1000;
  char *b = malloc(2 * n);
  for (int round = 0; round < 20; round++) {
    struct timespec ts = {0, (round % 3) * 2 * 1000 * 1000};
    if ((round & 1) == sender()) nanosleep(&ts, NULL);   /* the message arrives before or after the receive */
    if (sender()) {
      fill(b, 2 * n, 150 + round);
      if (MPI_Send(b, (int)(2 * n), MPI_BYTE, peer, 1, c) != MPI_SUCCESS) FAIL("truncated: the send failed");
      if (MPI_Barrier(c) != MPI_SUCCESS) FAIL("truncated: sender's barrier failed");
    } else {
      int cls1 = MPI_SUCCESS, cls2 = MPI_SUCCESS;
      int rc = MPI_Recv(b, (int)n, MPI_BYTE, peer, 1, c, MPI_STATUS_IGNORE);
      MPI_Error_class(rc, &cls1);
      rc = MPI_Barrier(c);
      MPI_Error_class(rc, &cls2);
      if ((cls1 == MPI_ERR_TRUNCATE) == (cls2 == MPI_ERR_TRUNCATE) || (cls1 != MPI_SUCCESS && cls1 != MPI_ERR_TRUNCATE) ||
          (cls2 != MPI_SUCCESS && cls2 != MPI_ERR_TRUNCATE))
        FAIL("truncated round %d: receive class %d, next call class %d", round, cls1, cls2);
      if (MPI_Barrier(c) != MPI_SUCCESS) FAIL("truncated: error reported twice");
    }
    if (sender()) MPI_Barrier(c);
  }
  free(b);
  MPI_Comm_free(&c);
  done("truncated receive");
}

/* A worker that blocks every signal (sigfillset: signals go to one
 * thread), and a signal handler installed with a full sa_mask, read a
 * receive buffer right after MPI_Recv: the kernel killed the process
 * (a fault with SIGSEGV blocked). */
static char *volatile sm_buf;
static volatile long sm_sum;
static size_t sm_n;
static void *sm_worker(void *arg) {
  (void)arg;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  long s = 0;
  for (size_t i = 0; i < sm_n; i += 1024) s += sm_buf[i];
  return (void *)s;
}
static void sm_handler(int sig) {
  (void)sig;
  long s = 0;
  for (size_t i = 0; i < sm_n; i += 1024) s += sm_buf[i];
  sm_sum = s;
}
static void c_sigmask(void) {
  sm_n = 1u << 20;
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = sm_handler;
  sigfillset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, &old);
  for (int round = 0; round < 2; round++) {
    sm_buf = malloc(sm_n);
    if (sender()) {
      memset(sm_buf, 1, sm_n);
      struct timespec ts = {0, 50 * 1000 * 1000};
      nanosleep(&ts, NULL);            /* the receive is pending when the reader starts */
      MPI_Send(sm_buf, (int)sm_n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    } else {
      MPI_Recv(sm_buf, (int)sm_n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      long want = (long)(sm_n / 1024);
      if (round == 0) {
        pthread_t t;
        void *res;
        pthread_create(&t, NULL, sm_worker, NULL);
        pthread_join(t, &res);
        if ((long)res != want) FAIL("sigmask worker sum %ld", (long)res);
      } else {
        sm_sum = 0;
        raise(SIGUSR1);
        if (sm_sum != want) FAIL("full sa_mask handler sum %ld", (long)sm_sum);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    free(sm_buf);
  }
  sigaction(SIGUSR1, &old, NULL);
  done("signals blocked while touching a buffer in flight");
}

/* The program mprotects a receive buffer read-only right after MPI_Recv
 * (to catch later writes): it reads the received data (it read the old
 * data), and the protection holds after the transfer (completion undid it). */
static sigjmp_buf mp_jb;
static volatile int mp_caught;
static void mp_handler(int sig) {
  (void)sig;
  mp_caught++;
  siglongjmp(mp_jb, 1);
}
static void c_mprotect(void) {
  size_t n = 1u << 20;
  char *b = malloc(n + 4096);
  char *a = (char *)(((uintptr_t)b + 4095) & ~(uintptr_t)4095);
  if (sender()) {
    fill(a, n, 160);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    MPI_Send(a, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    memset(a, 0, n);
    MPI_Recv(a, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (mprotect(a, n, PROT_READ) != 0) FAIL("mprotect");
    check(a, n, 160, "read after mprotect(PROT_READ)");
    MPI_Barrier(MPI_COMM_WORLD);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = mp_handler;
    sigaction(SIGSEGV, &sa, &old);
    mp_caught = 0;
    if (!sigsetjmp(mp_jb, 1)) *(volatile char *)(a + n / 2) = 1;
    sigaction(SIGSEGV, &old, NULL);
    if (!mp_caught) FAIL("a write to a page the program made read-only did not fault");
    mprotect(a, n, PROT_READ | PROT_WRITE);
  }
  free(b);
  done("mprotect of a buffer in flight");
}

int main(int argc, char **argv) {
  tmpdir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  tcp = getenv("OV_TCP") && *getenv("OV_TCP") == '1';
  int flag = 1;
  MPI_Initialized(&flag);              /* before MPI_Init: passes through */
  if (flag) return 2;
  const char *lvl = getenv("OV_THREAD_LEVEL");
  if (lvl) {
    int provided;
    MPI_Init_thread(&argc, &argv, atoi(lvl), &provided);
  } else {
    MPI_Init(&argc, &argv);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size & 1) {
    if (!rank) fprintf(stderr, "ov_check: needs an even number of ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  peer = rank ^ 1;
  c_ordering();
  c_wildcards();
  c_statuses();
  c_partial_pages();
  c_shared_frames();
  c_access_during();
  c_syscalls();
  c_free_during();
  c_stack();
  c_modes();
  c_errors();
  c_program_requests();
  c_threads();
  c_overlapped();
  c_small_direct();
  c_many_cuts();
  c_program_isend();
  c_truncated();
  c_sigmask();
  c_mprotect();
  /* MPI_Finalize with transfers pending: the last send is not waited for. */
  size_t n = 2u << 20;
  char *b = malloc(n);
  if (sender()) {
    fill(b, n, 99);
    MPI_Send(b, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
  } else {
    MPI_Recv(b, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Finalize();
  if (!sender()) check(b, n, 99, "received before MPI_Finalize returned");
  MPI_Finalized(&flag);                /* after MPI_Finalize: passes through */
  if (!flag) return 3;
  if (rank == 0) printf("ov_check: finalize with pending transfers ok\nov_check: all ok (%d ranks)\n", size);
  return 0;
}
