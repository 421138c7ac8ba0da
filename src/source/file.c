/* Memory-file-backed regions: the shareable blocks of locus_malloc_shareable
 * and the copy-on-write copies of locus_cow_copy (S. Valat, PhD thesis, 2014,
 * Ch.6: `mcow`, an explicit copy-on-write copy of a segment, on a stock
 * kernel: two private mappings of one memory file share its pages until
 * either side writes).
 *
 * A region is [header page: anonymous][file pages][PROT_NONE up to a slice]:
 * the header (region_t, then the block's large_t, then file_info_t at
 * FILE_INFO_OFF) never lies in the file, so a copy's header is its own. A
 * file (memfd) has one record (mfile_t): its descriptor, kept for later
 * copies, and a count of the regions that map it; the last region's free
 * closes it.
 *
 * Modes. A new shareable block maps its file MAP_SHARED: its writes go to
 * the file, at the cost of a plain page fault. The first copy *freezes* the
 * file: the source is mapped again MAP_PRIVATE over the same pages (same
 * contents, no copy), the copy MAP_PRIVATE too, and from then on nothing
 * writes the file; a write to either side faults a private page (the
 * copy-on-write cost). A copy of a private view maps the frozen file and
 * writes into it, from the source, only the pages the source changed since
 * (those /proc/self/pagemap shows as anonymous, present or swapped; every
 * page when pagemap cannot be read).
 *
 * Invariants: a file is written only through the one MAP_SHARED view it may
 * have (then `shared_at` names it), never after its first copy; a file's
 * refs counts the regions mapping it. fork(): a MAP_SHARED view would be
 * shared with the child, so the prepare handler freezes every file still in
 * shared mode (file_lock's fork hook): parent and child then hold private
 * views, as fork promises for memory of malloc. */
#include <errno.h>
#include <string.h>

#include "source/source.h"
#include "os/os.h"

typedef struct mfile_s {
  int fd;
  int refs;                     /* regions mapping it (under file_lock) */
  void *shared_at;              /* its MAP_SHARED view (a region's file pages), or NULL: frozen */
  size_t shared_len;
  struct mfile_s *next, *prev;  /* live files */
} mfile_t;

static void files_freeze_all(void);
LOCK_STATIC_FORK(file_lock, LOCK_RANK_USER_SOURCE + 1, "memory files (shareable blocks)", files_freeze_all, NULL)
static mfile_t *files, *free_recs;
static os_slab_t records;             /* file records (under file_lock) */

static mfile_t *rec_get(void) {
  mfile_t *f = free_recs;
  if (f) {
    free_recs = f->next;
    return f;
  }
  return os_slab_take(&records, sizeof *f, PAGE_SIZE);
}

file_info_t *file_info(region_t *r) { return (file_info_t *)((char *)r + FILE_INFO_OFF); }

_Atomic size_t file_overlap_min;
void (*_Atomic file_quiesce_hook)(void *start, size_t len);

void file_quiesce(region_t *r) {
  void (*q)(void *, size_t) = atomic_load_explicit(&file_quiesce_hook, memory_order_acquire);
  if (q) q((char *)r + PAGE_SIZE, file_info(r)->flen);
}

void *file_region_shadow(region_t *r) {
  file_info_t *fi = file_info(r);
  lock_acquire(&file_lock);
  mfile_t *f = fi->file;
  void *sh = NULL;
  if (f->shared_at == (char *)r + PAGE_SIZE) {      /* still the file's own view (not frozen) */
    sh = atomic_load(&fi->shadow);
    if (!sh) {
      sh = os_map_file(NULL, fi->flen, f->fd, fi->foff, true);
      if (sh) atomic_store_explicit(&fi->shadow, sh, memory_order_release);
    }
  }
  lock_release(&file_lock);
  return sh;
}

/* The view of f stops being shared: the same pages, mapped private (file_lock held). */
static bool freeze(mfile_t *f) {
  if (!f->shared_at) return true;
  if (!os_map_file(f->shared_at, f->shared_len, f->fd, 0, false)) return false;
  f->shared_at = NULL;
  return true;
}

static void files_freeze_all(void) {
  for (mfile_t *f = files; f; f = f->next) freeze(f);
}

static size_t region_span(size_t file_bytes) {
  size_t n = PAGE_SIZE + file_bytes;
  return n < SLICE_SIZE ? SLICE_SIZE : n;
}

/* Reserves a region and maps its header page; NULL (errno) on failure. */
static region_t *region_reserve(size_t file_bytes) {
  size_t span = region_span(file_bytes);
  char *base = os_reserve(span);
  if (!base) return NULL;
  if (!os_map_fixed(base, PAGE_SIZE)) {
    int e = errno;
    os_unmap(base, span);
    errno = e;
    return NULL;
  }
  region_t *r = (region_t *)base;
  *r = (region_t){.size = span, .zeroed = 1, .node = NODE_NONE, .flags = REGION_FILE};
  return r;
}

region_t *file_region_new(size_t len) {
  size_t flen = align_up(len ? len : 1, PAGE_SIZE);
  int fd = os_memfd(flen);
  if (fd < 0) {
    errno = -fd;
    return NULL;
  }
  region_t *r = region_reserve(flen);
  char *pages = r ? os_map_file((char *)r + PAGE_SIZE, flen, fd, 0, true) : NULL;
  lock_acquire(&file_lock);
  mfile_t *f = pages ? rec_get() : NULL;
  if (f) {
    *f = (mfile_t){.fd = fd, .refs = 1, .shared_at = pages, .shared_len = flen, .next = files};
    if (files) files->prev = f;
    files = f;
  }
  lock_release(&file_lock);
  if (!f) {
    if (r) os_unmap(r, r->size);
    os_memfd_close(fd);
    errno = ENOMEM;
    return NULL;
  }
  *file_info(r) = (file_info_t){.file = f, .foff = 0, .flen = flen};
  return r;
}

/* Whether /proc/self/pagemap can be believed here: the region's header page,
 * anonymous and just written, must read present and not a file page (an
 * emulator such as qemu-user shows the host's entries, not the program's). */
static bool pagemap_sane(const region_t *r) {
  uint64_t e;
  return os_pagemap_read((uintptr_t)r / os_page_size(), 1, &e) == 1 && (e >> 63 & 1) && !(e >> 61 & 1);
}

/* Into dst, the kernel pages of [src, src + len) that the private view
 * changed since its file froze: those pagemap shows as anonymous (present
 * and not the file's page, or swapped out). Where pagemap cannot be read or
 * believed, each page is compared with the file's (a read-only view of it):
 * the changed ones are copied. */
static void copy_changed(char *dst, const char *src, size_t len, const region_t *from, int fd, size_t foff) {
  size_t kp = os_page_size(), n = len / kp;
  if (pagemap_sane(from)) {
    uint64_t e[512];
    bool ok = true;
    for (size_t done = 0; done < n && ok;) {
      size_t k = n - done < 512 ? n - done : 512;
      long got = os_pagemap_read(((uintptr_t)src + done * kp) / kp, k, e);
      if (got != (long)k) {
        ok = false;
        break;
      }
      for (size_t i = 0; i < k; i++)
        if (((e[i] >> 63 & 1) && !(e[i] >> 61 & 1)) || (e[i] >> 62 & 1))
          memcpy(dst + (done + i) * kp, src + (done + i) * kp, kp);
      done += k;
    }
    if (ok) return;
  }
  const char *file = os_map_file(NULL, len, fd, foff, false);
  for (size_t i = 0; i < n; i++)
    if (!file || memcmp(file + i * kp, src + i * kp, kp)) memcpy(dst + i * kp, src + i * kp, kp);
  if (file) os_unmap((void *)file, len);
}

region_t *file_region_copy(region_t *from, uintptr_t src, size_t len, size_t *inpage) {
  file_info_t *fi = file_info(from);
  uintptr_t pages = (uintptr_t)from + PAGE_SIZE;
  size_t so = fi->foff + (src - pages);           /* src's offset in the file */
  size_t po = so & ~(size_t)(PAGE_SIZE - 1);
  *inpage = so - po;
  size_t span = align_up(*inpage + len, PAGE_SIZE);
  file_quiesce(from);                              /* transfers on the source end first */
  lock_acquire(&file_lock);
  mfile_t *f = fi->file;
  bool ok = freeze(f);                             /* the source's writes stop reaching the file */
  if (ok) f->refs++;
  lock_release(&file_lock);
  if (!ok) return NULL;
  region_t *r = region_reserve(span);
  char *view = r ? os_map_file((char *)r + PAGE_SIZE, span, f->fd, po, false) : NULL;
  if (!view) {
    if (r) os_unmap(r, r->size);
    lock_acquire(&file_lock);
    f->refs--;                                     /* the source still maps it */
    lock_release(&file_lock);
    errno = ENOMEM;
    return NULL;
  }
  r->zeroed = 0;
  *file_info(r) = (file_info_t){.file = f, .foff = po, .flen = span};
  /* What the source wrote since the file froze is in its private pages only. */
  copy_changed(view, (const char *)(pages + (po - fi->foff)), span, from, f->fd, po);
  return r;
}

#define FILE_KEEP 16
#define FILE_KEEP_BYTES (256 * MiB)
static region_t *kept[FILE_KEEP];     /* under file_lock */
static int nkept;
static size_t kept_bytes;

static void region_release(region_t *r);

/* Each memory file holds a descriptor: at most FILE_OVERLAP_FILES overlap
 * regions live at once, so that a program with many buffers keeps its own
 * descriptors (beyond, blocks are ordinary: not guarded). */
#define FILE_OVERLAP_FILES 256
static atomic_int overlap_files;

region_t *file_region_new_overlap(size_t len) {
  if (atomic_fetch_add(&overlap_files, 1) >= FILE_OVERLAP_FILES) {
    atomic_fetch_sub(&overlap_files, 1);
    errno = EMFILE;
    return NULL;
  }
  region_t *r = file_region_new(len);
  if (r) file_info(r)->overlap = true;
  else atomic_fetch_sub(&overlap_files, 1);
  return r;
}

region_t *file_region_take(size_t len) {
  size_t flen = align_up(len ? len : 1, PAGE_SIZE);
  region_t *r = NULL, *stale[FILE_KEEP];
  int nstale = 0;
  lock_acquire(&file_lock);
  int best = -1;
  for (int i = 0; i < nkept; i++) {
    file_info_t *fi = file_info(kept[i]);
    if (fi->file->shared_at != (char *)kept[i] + PAGE_SIZE) {   /* frozen by a fork: of no use */
      stale[nstale++] = kept[i];
      kept_bytes -= fi->flen;
      kept[i--] = kept[--nkept];
      continue;
    }
    if (fi->flen >= flen && fi->flen / 2 <= flen && (best < 0 || fi->flen < file_info(kept[best])->flen)) best = i;
  }
  if (best >= 0) {
    r = kept[best];
    kept_bytes -= file_info(r)->flen;
    kept[best] = kept[--nkept];
  }
  lock_release(&file_lock);
  for (int i = 0; i < nstale; i++) region_release(stale[i]);
  if (r) r->zeroed = 0;
  return r;
}

void file_keep_flush(void) {
  for (;;) {
    lock_acquire(&file_lock);
    region_t *r = nkept ? kept[--nkept] : NULL;
    if (r) kept_bytes -= file_info(r)->flen;
    lock_release(&file_lock);
    if (!r) return;
    region_release(r);
  }
}

void file_region_free(region_t *r) {
  file_info_t *fi = file_info(r);
  if (fi->overlap && atomic_load_explicit(&file_overlap_min, memory_order_relaxed)) {
    lock_acquire(&file_lock);
    bool keep = nkept < FILE_KEEP && kept_bytes + fi->flen <= FILE_KEEP_BYTES && fi->file->refs == 1 &&
                fi->file->shared_at == (char *)r + PAGE_SIZE;
    if (keep) {
      kept[nkept++] = r;
      kept_bytes += fi->flen;
    }
    lock_release(&file_lock);
    if (keep) return;
  }
  region_release(r);
}

static void region_release(region_t *r) {
  if (file_info(r)->overlap) atomic_fetch_sub(&overlap_files, 1);
  mfile_t *f = file_info(r)->file;
  void *pages = (char *)r + PAGE_SIZE;
  lock_acquire(&file_lock);
  if (f->shared_at == pages) f->shared_at = NULL;  /* its shared view goes: nothing writes the file */
  bool last = --f->refs == 0;
  if (last) {
    if (f->prev) f->prev->next = f->next;
    else files = f->next;
    if (f->next) f->next->prev = f->prev;
    f->next = free_recs;
    free_recs = f;
  }
  int fd = f->fd;
  lock_release(&file_lock);
  void *sh = atomic_load(&file_info(r)->shadow);
  if (sh) os_unmap(sh, file_info(r)->flen);
  os_unmap(r, r->size);
  if (last) os_memfd_close(fd);
}
