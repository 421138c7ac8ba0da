/* Node-wide shared read-only tables (locus.h, "Shared tables";
 * docs/sharing.md): one copy per NUMA node of a table that every process of
 * a user asks for by name (the MPI ranks of a node), instead of one copy per
 * process (Valat, PhD thesis, 2014, Ch.6).
 *
 * A table is a file of the tmpfs /dev/shm, named from the effective uid, the
 * node and the table's name: a header page, then the table. Each process
 * that maps it holds a shared lock on its own open file (an open file
 * description lock, which the kernel drops when the process dies):
 *   - a process that can take the lock exclusively is alone with the file:
 *     an empty file is new, and it initialises it (init on a writable
 *     mapping bound to the node, then the header's ready word, then the lock
 *     converted to shared and the table mapped read-only); a file with a
 *     length is stale (its last user crashed, or its initialiser died before
 *     the ready word): it unlinks it and starts again;
 *   - the others wait for a shared lock (asleep in the kernel, while an
 *     initialiser holds it exclusively), then read the header: ready, the
 *     table is mapped read-only; not ready, the initialiser died: they drop
 *     the lock and start again, after a short randomised sleep;
 *   - a process that leaves (release, exit) unmaps, drops its lock and tries
 *     the exclusive lock: granted, nobody else holds the file and it unlinks
 *     it (if the name still names that file).
 * After each lock taken, a file that was unlinked meanwhile (by the last
 * user, or as stale) is dropped and the name looked up again.
 *
 * In the process, a small table of slots (one per mapped table and node)
 * makes the threads asking for one name share one mapping: the first sets
 * its slot OPENING and does the work above without the slots' lock; the
 * others wait for the slot's state to change. */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "api/api.h"
#include "os/os.h"
#include "os/shm.h"
#include "os/topology.h"
#include "types.h"
#include "util/lock.h"

#define TABLES_MAX 64                  /* tables a process maps at once (EMFILE beyond) */
#define HEADER_MAGIC 0x6c6f6375735f7462ull   /* "locus_tb" */
#define READY_WORD 0x7265616479215f5full     /* written after init */
#define ATTEMPTS 2000                  /* rounds of the protocol before EAGAIN */

/* The directory of the tables' files (a unit test points it elsewhere). */
const char *shared_table_dir = OS_SHM_DIR;

typedef struct {                       /* at the start of the file's first page */
  uint64_t magic;
  uint64_t size;                       /* the table's bytes, as asked */
  int64_t node;
  _Atomic uint64_t ready;              /* READY_WORD once init returned */
} header_t;

enum { SLOT_FREE = 0, SLOT_BUSY, SLOT_READY };   /* BUSY: a thread opens or closes it */

typedef struct {
  atomic_int state;
  atomic_uint gen;                     /* bumped at each change of state */
  long owner;                          /* the thread that set BUSY */
  int node;
  int fd;                              /* holds the shared lock; -1: none (never unlinks) */
  int fork_fd;                         /* the next child's hold (fork), or -1 */
  size_t size, len;                    /* table bytes; mapping bytes (header page + table) */
  char *base;                          /* the read-only mapping */
  unsigned refs;                       /* successful calls not yet released */
  char name[LOCUS_SHARED_TABLE_NAME_MAX + 1];
  char path[512];
} slot_t;

static void tables_fork_prepare(void);
static void tables_fork_child(void);
LOCK_STATIC_FORK(tables_lock, LOCK_RANK_SHARED_TABLE, "shared tables", tables_fork_prepare, tables_fork_child)
static slot_t slots[TABLES_MAX];
static waitq_t slot_wq;

/* ---- names ------------------------------------------------------------------ */

/* dir/locus-table-<euid>-n<node>-<name>, the name's bytes other than
 * letters, digits, '.', '_' and '-' written %XX (so two names never share a
 * file). False when it does not fit. */
static bool table_path(char *out, size_t cap, const char *name, int node) {
  static const char hex[] = "0123456789abcdef";
  size_t n = fmt_buf(out, cap, "%s/locus-table-%u-n%d-", shared_table_dir, (unsigned)os_geteuid(), node);
  if (n >= cap) return false;
  for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
    bool plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                 *c == '.' || *c == '_' || *c == '-';
    if (n + 4 >= cap) return false;
    if (plain) {
      out[n++] = (char)*c;
    } else {
      out[n++] = '%';
      out[n++] = hex[*c >> 4];
      out[n++] = hex[*c & 15];
    }
  }
  out[n] = 0;
  return true;
}

/* The calling thread's node: its binding's (locus_thread_node), else the
 * node of the CPU it runs on, if memory may come from there; else the
 * lowest allowed node. */
static int table_node(void) {
  int node = topology_thread_node();
  if (node < 0) node = os_current_node();
  if (node >= 0 && topology_node_allowed(node)) return node;
  uint64_t m = topology_allowed_mask();
  return m ? __builtin_ctzll(m) : 0;
}

/* ---- the file protocol (no lock of the process held) -------------------------- */

/* Whether fd's file is still linked under path. */
static bool same_file(int fd, const char *path) {
  os_file_info_t a, b;
  return os_file_info(fd, NULL, &a) && a.nlink > 0 && os_file_info(-1, path, &b) && a.dev == b.dev &&
         a.ino == b.ino;
}

/* Maps the table read-only through a read-only descriptor (so that the
 * mapping cannot be made writable with mprotect). */
static int map_readonly(slot_t *s) {
  int rfd = os_shm_open(s->path, false, false);
  if (rfd < 0) return -rfd;
  os_file_info_t a, b;
  if (!os_file_info(rfd, NULL, &a) || !os_file_info(s->fd, NULL, &b) || a.ino != b.ino || a.dev != b.dev) {
    os_close(rfd);
    return EAGAIN;
  }
  s->base = os_shm_map(rfd, s->len, false);
  int err = errno;
  os_close(rfd);
  return s->base ? 0 : err;
}

/* The initialiser: fd is locked exclusively and its file empty. */
static int initialise(slot_t *s, void (*init)(void *, size_t, void *), void *arg) {
  size_t page = os_page_size();
  int r = os_file_resize(s->fd, (int64_t)s->len);
  char *w = r ? NULL : os_shm_map(s->fd, s->len, true);
  if (!r && !w) r = -errno;
  if (!r) {
    /* Bound to the node before the first touch (the file's shared policy),
     * then every page allocated now: a full tmpfs is ENOMEM here, not a
     * SIGBUS in init. */
    uint64_t mask[OS_NODE_WORDS] = {0};
    if (s->node < OS_NODE_WORDS * 64) {
      mask[s->node / 64] = 1ull << (s->node % 64);
      os_set_policy(w, s->len, OS_POLICY_BIND, mask);
    }
    r = os_file_allocate(s->fd, (int64_t)s->len);
    if (r == -EOPNOTSUPP) r = 0;
  }
  if (r) {
    if (w) os_release(w, s->len);
    os_unlink(s->path);                /* ours: locked exclusively, linked */
    return r == -ENOSPC ? ENOMEM : -r;
  }
  header_t *h = (header_t *)w;
  h->magic = HEADER_MAGIC;
  h->size = s->size;
  h->node = s->node;
  if (init) init(w + page, s->size, arg);
  atomic_store_explicit(&h->ready, READY_WORD, memory_order_release);
  os_release(w, s->len);
  if ((r = os_file_lock(s->fd, OS_LOCK_SHARED, false)) != 0) return -r;   /* converts: no gap */
  return map_readonly(s);
}

/* Finds or makes the file and maps it (s: name, node, size, len, path set).
 * 0, or an errno; on success s->fd holds the shared lock. */
static int attach(slot_t *s, void (*init)(void *, size_t, void *), void *arg) {
  uint64_t pause_ns = 500000;
  uint32_t euid = os_geteuid();
  for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
    int fd = os_shm_open(s->path, true, true);
    if (fd < 0) return fd == -ENOENT ? ENOSYS : -fd;
    s->fd = fd;
    os_file_info_t fi;
    if (!os_file_info(fd, NULL, &fi) || fi.uid != euid) {
      os_close(fd);
      s->fd = -1;
      return EACCES;                   /* another user's file under our name */
    }
    int r;
    if (os_file_lock(fd, OS_LOCK_EXCL, false) == 0) {
      /* Alone with the file. */
      if (same_file(fd, s->path) && os_file_info(fd, NULL, &fi)) {
        if (fi.size == 0) {
          r = initialise(s, init, arg);
          if (!r) return 0;
          os_close(fd);
          s->fd = -1;
          return r;
        }
        os_unlink(s->path);            /* stale: nobody maps it */
      }
      os_close(fd);
      s->fd = -1;
      continue;
    }
    /* Somebody holds it: an initialiser (exclusive) or users (shared). */
    if ((r = os_file_lock(fd, OS_LOCK_SHARED, true)) != 0) {
      os_close(fd);
      s->fd = -1;
      return -r;
    }
    header_t h;
    if (same_file(fd, s->path) && os_file_info(fd, NULL, &fi)) {
      if (fi.size >= (int64_t)sizeof h && os_pread(fd, &h, sizeof h, 0) == (long)sizeof h &&
          atomic_load_explicit(&h.ready, memory_order_acquire) == READY_WORD) {
        if (h.magic != HEADER_MAGIC || h.size != s->size || fi.size != (int64_t)s->len) r = EEXIST;
        else r = map_readonly(s);
        if (!r) return 0;
        os_close(fd);
        s->fd = -1;
        if (r != EAGAIN) return r;
        continue;
      }
      /* Not ready with no initialiser left: it died. Let one of us (the
       * first to find it alone) start again. */
      os_close(fd);
      s->fd = -1;
      os_sleep_ns(pause_ns / 2 + os_random() % pause_ns);
      if (pause_ns < 20000000) pause_ns *= 2;
      continue;
    }
    os_close(fd);                      /* unlinked meanwhile */
    s->fd = -1;
  }
  return EAGAIN;
}

/* Drops this process's hold on the file (the mapping stays as it is):
 * nobody else holding it, the file is unlinked. */
static void close_fork_fd(slot_t *s) {
  if (s->fork_fd >= 0) os_close(s->fork_fd);
  s->fork_fd = -1;
}

static void leave(slot_t *s) {
  close_fork_fd(s);                    /* its lock would make this process look not last */
  if (s->fd < 0) return;
  os_file_lock(s->fd, OS_LOCK_NONE, false);
  if (os_file_lock(s->fd, OS_LOCK_EXCL, false) == 0 && same_file(s->fd, s->path)) os_unlink(s->path);
  os_close(s->fd);
  s->fd = -1;
}

/* ---- the process's slots ------------------------------------------------------ */

typedef struct {
  slot_t *s;
  unsigned gen;
} slot_wait_t;

static bool slot_changed(const void *arg) {
  const slot_wait_t *w = arg;
  return atomic_load_explicit(&w->s->gen, memory_order_acquire) != w->gen;
}

/* Sets a BUSY slot's new state (tables_lock held) and wakes its waiters. */
static void slot_set(slot_t *s, int state) {
  atomic_store_explicit(&s->state, state, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
}

LOCUS_EXPORT void *locus_shared_table(const char *name, size_t size, void (*init)(void *table, size_t size, void *arg),
                                      void *arg) {
  locus_init();
  size_t namelen = name ? strnlen(name, LOCUS_SHARED_TABLE_NAME_MAX + 1) : 0;
  if (!name || namelen == 0 || namelen > LOCUS_SHARED_TABLE_NAME_MAX || strchr(name, '/') || size == 0) {
    errno = EINVAL;
    return NULL;
  }
  size_t page = os_page_size();
  if (size > (size_t)PTRDIFF_MAX / 2) {
    errno = ENOMEM;
    return NULL;
  }
  if (!os_dir_exists(shared_table_dir)) {
    errno = ENOSYS;
    return NULL;
  }
  int node = table_node();
  long me = os_gettid();
  slot_t *s;
  lock_acquire(&tables_lock);
  for (;;) {
    slot_t *free_slot = NULL;
    s = NULL;
    for (int i = 0; i < TABLES_MAX; i++) {
      slot_t *t = &slots[i];
      int st = atomic_load_explicit(&t->state, memory_order_relaxed);
      if (st == SLOT_FREE) {
        if (!free_slot) free_slot = t;
      } else if (t->node == node && !strcmp(t->name, name)) {
        s = t;
        break;
      }
    }
    if (!s) {
      s = free_slot;
      break;
    }
    if (atomic_load_explicit(&s->state, memory_order_relaxed) == SLOT_READY) {
      int err = s->size != size ? EEXIST : 0;
      if (!err) s->refs++;
      lock_release(&tables_lock);
      if (err) errno = err;
      return err ? NULL : s->base + page;
    }
    if (s->owner == me) {              /* init asking for its own table */
      lock_release(&tables_lock);
      errno = EDEADLK;
      return NULL;
    }
    slot_wait_t w = {s, atomic_load_explicit(&s->gen, memory_order_relaxed)};
    lock_release(&tables_lock);
    waitq_wait(&slot_wq, slot_changed, &w);
    lock_acquire(&tables_lock);
  }
  if (!s) {
    lock_release(&tables_lock);
    errno = EMFILE;
    return NULL;
  }
  s->owner = me;
  s->node = node;
  s->size = size;
  s->len = page + ((size + page - 1) & ~(page - 1));
  s->fd = -1;
  s->fork_fd = -1;
  s->base = NULL;
  memcpy(s->name, name, namelen + 1);
  slot_set(s, SLOT_BUSY);
  bool fits = table_path(s->path, sizeof s->path, name, node);
  lock_release(&tables_lock);

  int err = fits ? attach(s, init, arg) : ENAMETOOLONG;

  lock_acquire(&tables_lock);
  s->owner = 0;
  if (!err) s->refs = 1;
  slot_set(s, err ? SLOT_FREE : SLOT_READY);
  lock_release(&tables_lock);
  waitq_wake(&slot_wq);
  if (err) {
    errno = err;
    return NULL;
  }
  return s->base + page;
}

LOCUS_EXPORT int locus_shared_table_release(void *table) {
  size_t page = os_page_size();
  slot_t *s = NULL;
  if (table) {
    lock_acquire(&tables_lock);
    for (int i = 0; i < TABLES_MAX && !s; i++)
      if (atomic_load_explicit(&slots[i].state, memory_order_relaxed) == SLOT_READY &&
          slots[i].base + page == (char *)table)
        s = &slots[i];
    if (s && --s->refs > 0) {
      lock_release(&tables_lock);
      return 0;
    }
    if (s) {
      s->owner = os_gettid();
      slot_set(s, SLOT_BUSY);
    }
    lock_release(&tables_lock);
  }
  if (!s) {
    errno = EINVAL;
    return -1;
  }
  os_release(s->base, s->len);         /* unmapped before the lock goes */
  leave(s);
  lock_acquire(&tables_lock);
  s->owner = 0;
  s->base = NULL;
  slot_set(s, SLOT_FREE);
  lock_release(&tables_lock);
  waitq_wake(&slot_wq);
  return 0;
}

/* At exit: the process leaves every table it still maps, unlinking those it
 * was the last user of. The mappings stay (a later destructor may still read
 * a table); a slot left without its lock only unmaps at its release. */
__attribute__((destructor)) static void shared_tables_at_exit(void) {
  lock_acquire(&tables_lock);
  for (int i = 0; i < TABLES_MAX; i++)
    if (atomic_load_explicit(&slots[i].state, memory_order_relaxed) == SLOT_READY) leave(&slots[i]);
  lock_release(&tables_lock);
}

/* fork(): a child must hold its own lock from the start, or its parent,
 * leaving right after the fork, could find itself alone and unlink a table
 * the child maps. The prepare handler opens the file again (a new open file
 * description, which the child inherits) and locks it shared; the child
 * keeps that one and closes its copy of the parent's. The parent's copy of
 * the new one is closed at its next fork, release or exit (one descriptor
 * per table meanwhile). Where it fails (no descriptor left) the child keeps
 * the mapping without a lock and never unlinks. */
static void tables_fork_prepare(void) {
  for (int i = 0; i < TABLES_MAX; i++) {
    slot_t *s = &slots[i];
    if (atomic_load_explicit(&s->state, memory_order_relaxed) != SLOT_READY || s->fd < 0) continue;
    close_fork_fd(s);
    int fd = os_shm_open(s->path, false, true);
    os_file_info_t a, b;
    bool ok = fd >= 0 && os_file_info(fd, NULL, &a) && os_file_info(s->fd, NULL, &b) && a.dev == b.dev &&
              a.ino == b.ino && os_file_lock(fd, OS_LOCK_SHARED, false) == 0;
    if (!ok && fd >= 0) os_close(fd);
    s->fork_fd = ok ? fd : -1;
  }
}

/* The child (tables_lock reset). A slot another thread was opening or
 * closing is given up. */
static void tables_fork_child(void) {
  waitq_reset(&slot_wq);
  for (int i = 0; i < TABLES_MAX; i++) {
    slot_t *s = &slots[i];
    int st = atomic_load_explicit(&s->state, memory_order_relaxed);
    if (st == SLOT_BUSY) {
      if (s->fd >= 0) os_close(s->fd);
      if (s->base) os_release(s->base, s->len);
      s->fd = -1;
      s->base = NULL;
      s->owner = 0;
      slot_set(s, SLOT_FREE);
      continue;
    }
    if (st != SLOT_READY) continue;
    if (s->fd >= 0) os_close(s->fd);   /* the parent's open file keeps its lock */
    s->fd = s->fork_fd;
    s->fork_fd = -1;
  }
}
