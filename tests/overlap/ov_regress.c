/* Regression cases of liblocus-overlap.so (docs/overlap.md), one per run:
 *   ov_regress CASE      (under mpirun with the library preloaded: regress.sh)
 * Each prints "ov_regress: CASE ok" and exits 0, or says what failed and
 * exits non-zero. Every case also holds for plain MPI.
 *
 *   small_send    (3 ranks, TCP) a small MPI_Send from a page that a pending
 *                 large send guards read-only, then a write to that page:
 *                 the large message arrives as it was sent (the small
 *                 send's writev unguarded the page); write() from the page
 *                 does not wait for the send, read() into it does.
 *   realloc_fds   (1 rank) realloc of guarded blocks keeps to the cap of
 *                 memory files: no realloc fails, descriptors stay few.
 *   copy_holes    (2 ranks) a send of a derived datatype whose extent holds
 *                 an inaccessible page, from memory the library cannot
 *                 guard (the copy path read the hole).
 *   copy_repeat   (2 ranks) the same with a type whose size equals its true
 *                 extent because a block is sent twice (sizes alone called
 *                 it dense).
 *   populate      (2 ranks) madvise(MADV_POPULATE_WRITE/READ) of a buffer
 *                 just sent / received succeeds (the kernel refused it on
 *                 a guarded page: EINVAL).
 *   mprotect_held (2 ranks) the program's own PROT_READ on a send buffer
 *                 holds during and after the transfer.
 *   madvise       (2 ranks) madvise(MADV_REMOVE) right after MPI_Send: the
 *                 message arrives intact.
 *   drained       (2 ranks) every MPI-3.1 collective is the library's
 *                 (drains), and neighbourhood collectives, blocking and
 *                 not, wait for a pending receive.
 *   attr_sigmask  (2 ranks) a thread created with pthread_attr_setsigmask_np
 *                 (every signal) reads a buffer in flight.
 *   premask       (2 ranks) every signal blocked and a handler with a full
 *                 sa_mask installed before MPI_Init: buffers in flight are
 *                 read in the main thread, a new thread and the handler.
 *   nonrank       (no mpirun, no MPI_Init) a blocked SIGBUS stays blocked. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int rank, size;
static const char *which;

#define FAIL(...)                                                            \
  do {                                                                       \
    fprintf(stderr, "ov_regress %s rank %d: FAIL line %d: ", which, rank, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                                            \
    fprintf(stderr, "\n");                                                   \
    exit(1);                                                                 \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static void ms(int n) {
  struct timespec ts = {n / 1000, (n % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}
static unsigned char pat(size_t i) { return (unsigned char)(i * 7 + 1); }

#define BIG (1u << 20)

static void c_small_send(void) {
  if (size != 3) FAIL("needs 3 ranks");
  size_t off = 512 * 1024;
  unsigned char *b = malloc(BIG), *c = malloc(BIG);
  if (rank == 0) {
    for (size_t i = 0; i < BIG; i++) b[i] = c[i] = pat(i);
    MPI_Send(b, BIG, MPI_BYTE, 1, 1, MPI_COMM_WORLD);         /* overlapped: rank 1 receives 300 ms later */
    MPI_Send(b + off, 100, MPI_BYTE, 2, 2, MPI_COMM_WORLD);   /* small, another peer: writev from the page */
    memset(b + off, 0xEE, 4096);                              /* both sends returned: allowed */
    MPI_Barrier(MPI_COMM_WORLD);
    /* System calls on a pending send's buffer: one that reads it does not
     * wait, one that writes it waits for the send. */
    MPI_Send(c, BIG, MPI_BYTE, 1, 3, MPI_COMM_WORLD);
    int fd = open("/dev/null", O_WRONLY);
    double t0 = now();
    if (write(fd, c + off, 4096) != 4096) FAIL("write from a send buffer");
    double t = now() - t0;
    close(fd);
    if (t > 0.25) FAIL("write() from a send buffer waited %.3f s for the send", t);
    fd = open("/dev/zero", O_RDONLY);
    if (read(fd, c + off, 4096) != 4096) FAIL("read into a send buffer");   /* waits for the send */
    close(fd);
    if (c[off] != 0) FAIL("read into a send buffer: no data");
  } else if (rank == 1) {
    ms(300);
    MPI_Recv(b, BIG, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (size_t i = 0; i < BIG; i++)
      if (b[i] != pat(i)) FAIL("large message byte %zu is 0x%x, expected 0x%x", i, b[i], pat(i));
    MPI_Barrier(MPI_COMM_WORLD);
    ms(500);
    MPI_Recv(c, BIG, MPI_BYTE, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (size_t i = 0; i < BIG; i++)
      if (c[i] != pat(i)) FAIL("second message byte %zu is 0x%x, expected 0x%x", i, c[i], pat(i));
  } else {
    unsigned char s[100];
    MPI_Recv(s, 100, MPI_BYTE, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (size_t i = 0; i < 100; i++)
      if (s[i] != pat(i + off)) FAIL("small message byte %zu", i);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(b);
  free(c);
}

static int count_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

static void c_realloc_fds(void) {
  enum { K = 600 };
  static char *keep[K];
  int before = count_fds();
  for (int i = 0; i < K; i++) {
    char *p = malloc(128 * 1024);
    if (!p) FAIL("malloc %d", i);
    memset(p, i, 128 * 1024);
    keep[i] = realloc(p, i & 1 ? 300 * 1024 : 40 * 1024);   /* grow and shrink */
    if (!keep[i]) FAIL("realloc %d returned NULL", i);
    if (keep[i][1000] != (char)i) FAIL("realloc %d lost the data", i);
  }
  int after = count_fds();
  if (after - before > 256 + 8) FAIL("%d descriptors more after %d reallocs (cap: 256 memory files)", after - before, K);
  int fd = open("/dev/null", O_RDONLY);
  if (fd < 0) FAIL("open after the reallocs");
  close(fd);
  for (int i = 0; i < K; i++) free(keep[i]);
}

static void c_copy_holes(void) {
  long pg = 4096;
  char *m = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) FAIL("mmap");
  if (mprotect(m + pg, pg, PROT_NONE)) FAIL("mprotect");    /* a hole MPI never reads */
  int *a = (int *)m, *b = (int *)(m + 2 * pg);
  MPI_Aint disp[2];
  MPI_Get_address(a, &disp[0]);
  MPI_Get_address(b, &disp[1]);
  int len[2] = {1000, 1000};
  MPI_Datatype types[2] = {MPI_INT, MPI_INT}, t;
  MPI_Type_create_struct(2, len, disp, types, &t);
  MPI_Type_commit(&t);
  if (rank == 0) {
    for (int i = 0; i < 1000; i++) a[i] = i, b[i] = -i;
    MPI_Send(MPI_BOTTOM, 1, t, 1, 0, MPI_COMM_WORLD);       /* 8000 bytes: the copy path's size */
  } else if (rank == 1) {
    MPI_Recv(MPI_BOTTOM, 1, t, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < 1000; i++)
      if (a[i] != i || b[i] != -i) FAIL("element %d", i);
  }
  MPI_Type_free(&t);
  MPI_Barrier(MPI_COMM_WORLD);
  munmap(m, 3 * pg);
}

static void c_copy_repeat(void) {
  long pg = 4096;
  if (rank == 0) {
    char *m = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) FAIL("mmap");
    memset(m, 'a', pg);
    memset(m + 2 * pg, 'b', pg);
    if (mprotect(m + pg, pg, PROT_NONE)) FAIL("mprotect");
    MPI_Aint disp[3];
    MPI_Get_address(m, &disp[0]);
    MPI_Get_address(m, &disp[1]);
    MPI_Get_address(m + 2 * pg, &disp[2]);
    int len[3] = {4096, 4096, 4096}, sz;
    MPI_Datatype types[3] = {MPI_BYTE, MPI_BYTE, MPI_BYTE}, t;
    MPI_Type_create_struct(3, len, disp, types, &t);
    MPI_Type_commit(&t);
    MPI_Aint tlb, text;
    MPI_Type_size(t, &sz);
    MPI_Type_get_true_extent(t, &tlb, &text);
    if (sz != text) FAIL("the type's size %d differs from its true extent %ld", sz, (long)text);
    MPI_Send(MPI_BOTTOM, 1, t, 1, 0, MPI_COMM_WORLD);
    MPI_Type_free(&t);
    munmap(m, 3 * pg);
  } else if (rank == 1) {
    static char r[3 * 4096];
    MPI_Recv(r, sizeof r, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (r[0] != 'a' || r[4096] != 'a' || r[8192] != 'b' || r[12287] != 'b') FAIL("wrong data");
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif
static void c_populate(void) {
  unsigned char *b = aligned_alloc(4096, BIG);
  if (rank == 0) {
    memset(b, 3, BIG);
    MPI_Send(b, BIG, MPI_BYTE, 1, 0, MPI_COMM_WORLD);        /* pending: rank 1 receives 200 ms later */
    if (madvise(b, BIG, MADV_POPULATE_WRITE) != 0) FAIL("MADV_POPULATE_WRITE after a send: errno %d", errno);
    MPI_Recv(b, BIG, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (madvise(b, BIG, MADV_POPULATE_READ) != 0) FAIL("MADV_POPULATE_READ after a receive: errno %d", errno);
    if (b[0] != 4 || b[BIG - 1] != 4) FAIL("received data");
  } else if (rank == 1) {
    ms(200);
    MPI_Recv(b, BIG, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (b[0] != 3 || b[BIG - 1] != 3) FAIL("received data");
    ms(200);
    memset(b, 4, BIG);
    MPI_Send(b, BIG, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(b);
}

static sigjmp_buf jb;
static volatile int caught;
static void on_segv(int sig) {
  (void)sig;
  caught++;
  siglongjmp(jb, 1);
}
static void c_mprotect_held(void) {
  char *t = aligned_alloc(4096, BIG);
  if (rank == 0) {
    memset(t, 7, BIG);
    if (mprotect(t, BIG, PROT_READ)) FAIL("mprotect");      /* read-only from now on */
    MPI_Send(t, BIG, MPI_BYTE, 1, 0, MPI_COMM_WORLD);        /* pending: rank 1 receives 200 ms later */
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_segv;
    sigaction(SIGSEGV, &sa, &old);
    caught = 0;
    if (!sigsetjmp(jb, 1)) t[100] = 1;                       /* during the transfer */
    if (caught != 1) FAIL("a write to the read-only table during the send did not fault");
    MPI_Barrier(MPI_COMM_WORLD);                             /* the send is complete */
    if (!sigsetjmp(jb, 1)) t[BIG - 100] = 1;                 /* after it */
    if (caught != 2) FAIL("a write to the read-only table after the send did not fault");
    sigaction(SIGSEGV, &old, NULL);
    if (t[100] != 7 || t[BIG - 100] != 7) FAIL("the table changed");
    mprotect(t, BIG, PROT_READ | PROT_WRITE);
  } else if (rank == 1) {
    ms(200);
    MPI_Recv(t, BIG, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (size_t i = 0; i < BIG; i++)
      if (t[i] != 7) FAIL("byte %zu", i);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  free(t);
}

static void c_madvise(void) {
  unsigned char *b = aligned_alloc(4096, BIG);
  if (rank == 0) {
    memset(b, 5, BIG);
    MPI_Send(b, BIG, MPI_BYTE, 1, 0, MPI_COMM_WORLD);        /* pending: rank 1 receives 300 ms later */
    if (madvise(b, BIG, MADV_REMOVE) != 0 && madvise(b, BIG, MADV_DONTNEED) != 0) FAIL("madvise");
  } else if (rank == 1) {
    ms(300);
    MPI_Recv(b, BIG, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (size_t i = 0; i < BIG; i++)
      if (b[i] != 5) FAIL("byte %zu is %u", i, b[i]);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(b);
}

/* The collectives of MPI-3.1 (blocking, non-blocking, neighbourhood): each
 * must complete the pending transfers first, so the library defines it. */
static const char *collectives[] = {
    "MPI_Barrier", "MPI_Bcast", "MPI_Gather", "MPI_Gatherv", "MPI_Scatter", "MPI_Scatterv", "MPI_Allgather",
    "MPI_Allgatherv", "MPI_Alltoall", "MPI_Alltoallv", "MPI_Alltoallw", "MPI_Reduce", "MPI_Allreduce",
    "MPI_Reduce_scatter", "MPI_Reduce_scatter_block", "MPI_Scan", "MPI_Exscan", "MPI_Ibarrier", "MPI_Ibcast",
    "MPI_Igather", "MPI_Igatherv", "MPI_Iscatter", "MPI_Iscatterv", "MPI_Iallgather", "MPI_Iallgatherv",
    "MPI_Ialltoall", "MPI_Ialltoallv", "MPI_Ialltoallw", "MPI_Ireduce", "MPI_Iallreduce", "MPI_Ireduce_scatter",
    "MPI_Ireduce_scatter_block", "MPI_Iscan", "MPI_Iexscan", "MPI_Neighbor_allgather", "MPI_Neighbor_allgatherv",
    "MPI_Neighbor_alltoall", "MPI_Neighbor_alltoallv", "MPI_Neighbor_alltoallw", "MPI_Ineighbor_allgather",
    "MPI_Ineighbor_allgatherv", "MPI_Ineighbor_alltoall", "MPI_Ineighbor_alltoallv", "MPI_Ineighbor_alltoallw",
    "MPI_Comm_dup", "MPI_Comm_idup", "MPI_Comm_dup_with_info", "MPI_Comm_create", "MPI_Comm_create_group",
    "MPI_Comm_split", "MPI_Comm_split_type", "MPI_Comm_free", "MPI_Intercomm_create", "MPI_Intercomm_merge",
    "MPI_Cart_create", "MPI_Cart_sub", "MPI_Graph_create", "MPI_Dist_graph_create",
    "MPI_Dist_graph_create_adjacent", NULL};

static void c_drained(void) {
  int bad = 0;
  bool expect = getenv("OV_EXPECT_OVERLAP") && *getenv("OV_EXPECT_OVERLAP") == '1';   /* plain MPI: libmpi's, of course */
  for (int k = 0; expect && collectives[k]; k++) {
    Dl_info info;
    void *f = dlsym(RTLD_DEFAULT, collectives[k]);
    if (!f || !dladdr(f, &info) || !info.dli_fname || !strstr(info.dli_fname, "locus-overlap")) {
      fprintf(stderr, "ov_regress drained: %s is not the library's (%s)\n", collectives[k],
              f && dladdr(f, &info) && info.dli_fname ? info.dli_fname : "?");
      bad++;
    }
  }
  if (bad) FAIL("%d collectives do not drain", bad);
  /* Neighbourhood collectives on a graph of this rank alone: local, so they
   * take as long as the pending receive (its message comes 300 ms later)
   * only when they drain. */
  MPI_Comm g;
  int self = 0, one = 1, disp = 0, w = 1;
  MPI_Dist_graph_create_adjacent(MPI_COMM_SELF, 1, &self, &w, 1, &self, &w, MPI_INFO_NULL, 0, &g);
  char *b = malloc(BIG), s[8] = {0}, r[8];
  MPI_Aint adisp = 0;
  MPI_Datatype bt = MPI_BYTE;
  const char *names[] = {"Neighbor_allgatherv", "Neighbor_alltoallv", "Neighbor_alltoallw", "Ineighbor_allgather",
                         "Ineighbor_allgatherv", "Ineighbor_alltoall", "Ineighbor_alltoallv", "Ineighbor_alltoallw",
                         "Ialltoallw"};
  for (int k = 0; k < 9; k++) {
    if (rank == 0) {
      ms(300);
      memset(b, k, BIG);
      MPI_Send(b, BIG, MPI_BYTE, 1, 5, MPI_COMM_WORLD);
    } else if (rank == 1) {
      MPI_Recv(b, BIG, MPI_BYTE, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);   /* pending for 300 ms */
      MPI_Request rq = MPI_REQUEST_NULL;
      double t0 = now();
      switch (k) {
      case 0: MPI_Neighbor_allgatherv(s, 1, MPI_BYTE, r, &one, &disp, MPI_BYTE, g); break;
      case 1: MPI_Neighbor_alltoallv(s, &one, &disp, MPI_BYTE, r, &one, &disp, MPI_BYTE, g); break;
      case 2: MPI_Neighbor_alltoallw(s, &one, &adisp, &bt, r, &one, &adisp, &bt, g); break;
      case 3: MPI_Ineighbor_allgather(s, 1, MPI_BYTE, r, 1, MPI_BYTE, g, &rq); break;
      case 4: MPI_Ineighbor_allgatherv(s, 1, MPI_BYTE, r, &one, &disp, MPI_BYTE, g, &rq); break;
      case 5: MPI_Ineighbor_alltoall(s, 1, MPI_BYTE, r, 1, MPI_BYTE, g, &rq); break;
      case 6: MPI_Ineighbor_alltoallv(s, &one, &disp, MPI_BYTE, r, &one, &disp, MPI_BYTE, g, &rq); break;
      case 7: MPI_Ineighbor_alltoallw(s, &one, &adisp, &bt, r, &one, &adisp, &bt, g, &rq); break;
      case 8: MPI_Ialltoallw(s, &one, &one, &bt, r, &one, &one, &bt, MPI_COMM_SELF, &rq); break;
      }
      double t = now() - t0;
      MPI_Wait(&rq, MPI_STATUS_IGNORE);
      if (expect && t < 0.1)
        FAIL("MPI_%s returned in %.3f s with a receive pending: no drain", names[k], t);
      if (b[0] != k || b[BIG - 1] != k) FAIL("MPI_%s: receive data", names[k]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  free(b);
  MPI_Comm_free(&g);
}

static char *volatile as_buf;
static void *as_worker(void *arg) {
  (void)arg;
  long s = 0;
  for (size_t i = 0; i < BIG; i += 4096) s += as_buf[i];
  return (void *)s;
}
static void c_attr_sigmask(void) {
  as_buf = malloc(BIG);
  if (rank == 0) {
    memset(as_buf, 1, BIG);
    ms(200);
    MPI_Send(as_buf, BIG, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
  } else if (rank == 1) {
    MPI_Recv(as_buf, BIG, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    pthread_attr_t a;
    sigset_t all;
    sigfillset(&all);
    pthread_attr_init(&a);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
    pthread_attr_setsigmask_np(&a, &all);
#endif
    pthread_t t;
    void *sum;
    pthread_create(&t, &a, as_worker, NULL);
    pthread_join(t, &sum);
    pthread_attr_destroy(&a);
    if ((long)sum != BIG / 4096) FAIL("sum %ld", (long)sum);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(as_buf);
}

/* A rank that blocked every signal and installed a handler with a full
 * sa_mask before MPI_Init (when the masks were still its own): from
 * MPI_Init on, it reads a buffer in flight in its main thread, in a thread
 * it creates and in that handler. */
static char *volatile pm_buf;
static volatile long pm_sum;
static long pm_read(void) {
  long s = 0;
  for (size_t i = 0; i < BIG; i += 4096) s += pm_buf[i];
  return s;
}
static void pm_handler(int sig) {
  (void)sig;
  pm_sum = pm_read();
}
static void *pm_worker(void *arg) {
  (void)arg;
  return (void *)pm_read();
}
static void premask_setup(void) {
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = pm_handler;
  sigfillset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
}
static void c_premask(void) {
  sigset_t u;
  sigemptyset(&u);
  sigaddset(&u, SIGUSR1);
  pthread_sigmask(SIG_UNBLOCK, &u, NULL);
  pm_buf = malloc(BIG);
  for (int round = 0; round < 3; round++) {
    if (rank == 0) {
      memset(pm_buf, 1, BIG);
      ms(100);
      MPI_Send(pm_buf, BIG, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
    } else if (rank == 1) {
      MPI_Recv(pm_buf, BIG, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      long want = BIG / 4096, got;
      if (round == 0) {
        got = pm_read();
      } else if (round == 1) {
        pthread_t t;
        void *res;
        pthread_create(&t, NULL, pm_worker, NULL);
        pthread_join(t, &res);
        got = (long)res;
      } else {
        pm_sum = 0;
        raise(SIGUSR1);
        got = pm_sum;
      }
      if (got != want) FAIL("round %d: sum %ld", round, got);
      memset(pm_buf, 0, BIG);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  free(pm_buf);
}

/* Not a rank (no MPI_Init): masks are the program's. */
static int c_nonrank(void) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGBUS);
  sigprocmask(SIG_BLOCK, &s, NULL);
  kill(getpid(), SIGBUS);              /* held, not delivered */
  siginfo_t si;
  if (sigwaitinfo(&s, &si) != SIGBUS) FAIL("sigwaitinfo");
  sigset_t cur;
  pthread_sigmask(SIG_BLOCK, &s, NULL);
  pthread_sigmask(SIG_SETMASK, NULL, &cur);
  if (sigismember(&cur, SIGBUS) != 1) FAIL("SIGBUS not blocked by pthread_sigmask");
  printf("ov_regress: nonrank ok\n");
  return 0;
}

int main(int argc, char **argv) {
  which = argc > 1 ? argv[1] : "";
  if (!strcmp(which, "nonrank")) return c_nonrank();
  if (!strcmp(which, "premask")) premask_setup();
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (!strcmp(which, "small_send")) c_small_send();
  else if (!strcmp(which, "realloc_fds")) c_realloc_fds();
  else if (!strcmp(which, "copy_holes")) c_copy_holes();
  else if (!strcmp(which, "copy_repeat")) c_copy_repeat();
  else if (!strcmp(which, "populate")) c_populate();
  else if (!strcmp(which, "mprotect_held")) c_mprotect_held();
  else if (!strcmp(which, "madvise")) c_madvise();
  else if (!strcmp(which, "drained")) c_drained();
  else if (!strcmp(which, "attr_sigmask")) c_attr_sigmask();
  else if (!strcmp(which, "premask")) c_premask();
  else FAIL("unknown case");
  MPI_Finalize();
  if (rank == 0) printf("ov_regress: %s ok\n", which);
  return 0;
}
