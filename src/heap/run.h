/* The life of a small run, as a state machine. The types (run_t, TF_*) are in
 * heap.h; the transitions' callers in small.c. Included by heap.h, where the
 * owner's fast path (small_free_run) reads the state.
 *
 * States. `run_t.state` is the owner's view; where the run is says the rest:
 *   FREE      RUN_FREE: the slot is unused (its bit set in the chunk's
 *             free_runs), capacity 0: no pointer into it is valid.
 *   CURRENT   RUN_ACTIVE and h->cur[cls]: the owner pops from it without the
 *             lock, in its pop window (heap_pop_enter .. heap_pop_leave).
 *   PARTIAL   RUN_ACTIVE and on h->partial[cls] (oldest first).
 *   FULL      RUN_FULL, on no list: used up, or on its way to a retire (a run
 *             leaving cur[] or the partial list to be retired is FULL, so
 *             that the retire does not unlink it from a list it is not on).
 *             locus_empty_run, the sentinel of an empty cur[], is FULL for
 *             ever. CURRENT <-> PARTIAL moves a run between cur[] and the
 *             partial list: the state stays RUN_ACTIVE.
 * A FULL run has a notification state in thread_free (bits 62-63):
 *   0 -> TF_FULL        the owner marks the run full (run_mark_full: a CAS
 *                       from 0, which fails when remote frees came meanwhile)
 *   TF_FULL -> TF_NOTIFYING   the first remote free into it (tf_push_state)
 *   TF_NOTIFYING -> 0   that free, once the run is on the owner heap's notify
 *                       stack (small_notify: run_notify_end)
 *   TF_FULL -> 0        the owner takes the run back itself (run_unfull)
 * Each has its function below (run_tf_mark_full, tf_push_state in the remote
 * free's CAS, run_notify_end, run_tf_unfull).
 *
 * Actors.
 *   owner        the heap's thread; or, for a heap without one (orphan), the
 *                thread holding its lock. Pops, frees into the run, marks it
 *                full, takes it back, retires it.
 *   remote freer another thread's free: pushes onto thread_free with one
 *                CAS; the first into a FULL run tells the owner
 *                (TF_NOTIFYING, the notify stack); the free of a run's last
 *                handed-out block takes the owner's lock and may retire the
 *                run (small_free_last), or take back an idle owner's
 *                current runs (reclaim_current).
 *   collector    a thread holding the heap's lock to collect it: the owner's
 *                exit, the adoption or collection of an orphan, fork's child
 *                (small_collect_all, small_fork_child).
 *
 * Transitions of `state`, one function each (below), which asserts its start
 * state in the LOCUS_DEBUG build:
 *   run_enter_current   FREE -> CURRENT           run_new (owner, lock)
 *   run_enter_full      CURRENT|PARTIAL -> FULL   run_mark_full, before a retire
 *                                                 (owner, collector, remote freer)
 *   run_leave_full      FULL -> PARTIAL           run_unfull (the owner's free),
 *                                                 notify_drain (whoever holds the lock)
 *   run_enter_free      PARTIAL|FULL -> FREE      small_run_retire (a current
 *                                                 run is unhooked first:
 *                                                 run_unhook_current makes it FULL)
 *
 * Why it is correct.
 * 1. `state` is written under the heap's lock only; the owner alone reads it
 *    without the lock (small_free_run), and acts right on either value:
 *    RUN_FULL takes the lock and decides again (small_free_update);
 *    RUN_ACTIVE pushes onto the run's own `free`, which only the owner
 *    touches while it holds one of the run's blocks. So the accesses are
 *    atomic (for the language and the thread sanitizer) and unordered.
 * 2. A run is on the notify stack at most once: only the free that turns
 *    TF_FULL into TF_NOTIFYING pushes it, and the owner sets TF_FULL again
 *    only after it saw TF_NOTIFYING end and drained the stack. No remote
 *    free waits for the notifier (others push on, leaving TF_NOTIFYING);
 *    only the owner's marking full and retire wait for the end of
 *    TF_NOTIFYING, a bounded wait that the notifier wakes.
 * 3. A retire needs `used` == 0, the run not current, and the lock. It waits
 *    for a notification in flight to end, then drains the notify stack:
 *    nothing points to the slot afterwards. A slot is retired once (asserted:
 *    a second retire would give its chunk to two heaps): `used` is never read
 *    back after the owner's decrement is visible (run_used_dec), because a
 *    remote free may then take the run's last blocks and retire it; that
 *    read-back, at -O0, once retired a run twice.
 * 4. The owner never touches a run after publishing a decrement of `used` to
 *    a value above 0 without the lock: the full case is decided before the
 *    decrement, while the block being freed keeps the run alive.
 * 5. A current run leaves cur[] without its owner only when the owner is
 *    idle (reclaim_current): h->pop stayed HEAP_PROBED for HEAP_IDLE_NS,
 *    then, after cur[] is unhooked, os_membarrier makes the owner's window
 *    entry visible if it was in a pop that read the old cur[]; still probed,
 *    nobody pops from the run, which the owner holds no block of, and it is
 *    retired (else hooked back). */
#ifndef LOCUS_RUN_H
#define LOCUS_RUN_H

/* The owner's view, read without the lock (argument 1). */
static ALWAYS_INLINE unsigned run_state(const run_t *run) { return __atomic_load_n(&run->state, __ATOMIC_RELAXED); }
static ALWAYS_INLINE void run_state_store(run_t *run, unsigned st) {
  __atomic_store_n(&run->state, (uint8_t)st, __ATOMIC_RELAXED);
}

/* FREE -> CURRENT: a new run (its slot taken from the chunk's bitmap). */
static ALWAYS_INLINE void run_enter_current(run_t *run) {
  LOCUS_ASSERT(run_state(run) == RUN_FREE);
  run_state_store(run, RUN_ACTIVE);
}
/* CURRENT or PARTIAL -> FULL: used up (TF_FULL set or being set), or on its
 * way to a retire; the caller took it off cur[] or the partial list. */
static ALWAYS_INLINE void run_enter_full(run_t *run) {
  LOCUS_ASSERT(run_state(run) == RUN_ACTIVE);
  run_state_store(run, RUN_FULL);
}
/* FULL -> PARTIAL: blocks came back; the caller pushes it on the partial list. */
static ALWAYS_INLINE void run_leave_full(run_t *run) {
  LOCUS_ASSERT(run_state(run) == RUN_FULL);
  run_state_store(run, RUN_ACTIVE);
}
/* PARTIAL or FULL -> FREE: the retire (argument 3); never current. */
static ALWAYS_INLINE void run_enter_free(run_t *run) {
  LOCUS_ASSERT(run_state(run) != RUN_FREE);
  run_state_store(run, RUN_FREE);
}

/* 0 -> TF_FULL, by the owner marking the run full, from `tf` (no remote free
 * pending, no notification in flight: run_mark_full saw both); fails when
 * remote frees came meanwhile. */
static inline bool run_tf_mark_full(run_t *run, uintptr_t tf) {
  LOCUS_ASSERT(!(tf & (TF_STATE_MASK | TF_COUNT_MASK)));
  return atomic_compare_exchange_strong_explicit(&run->thread_free, &tf, TF_FULL, memory_order_acq_rel,
                                                 memory_order_relaxed);
}
/* TF_FULL -> 0, by the owner taking a full run back itself; a notification
 * already in flight (TF_NOTIFYING) is left to end, and notify_drain then
 * ignores the run, which is no longer full. */
static inline void run_tf_unfull(run_t *run) {
  uintptr_t tf = atomic_load_explicit(&run->thread_free, memory_order_relaxed);
  while ((tf & TF_STATE_MASK) == TF_FULL &&
         !atomic_compare_exchange_weak_explicit(&run->thread_free, &tf, tf & ~TF_STATE_MASK,
                                                memory_order_relaxed, memory_order_relaxed)) {
  }
}
/* The notification state a remote free pushes with: TF_FULL becomes
 * TF_NOTIFYING (this free tells the owner: small_notify), TF_NOTIFYING stays
 * (another free is telling it), 0 stays. */
static ALWAYS_INLINE uintptr_t tf_push_state(uintptr_t old) { return (old & TF_STATE_MASK) ? TF_NOTIFYING : 0; }
/* TF_NOTIFYING -> 0, by the free that set it, once the run is on the
 * owner's notify stack; a release: the push happens before. */
static ALWAYS_INLINE void run_notify_end(run_t *run) {
  uintptr_t old = atomic_fetch_and_explicit(&run->thread_free, ~TF_STATE_MASK, memory_order_release);
  LOCUS_ASSERT((old & TF_STATE_MASK) == TF_NOTIFYING);
  (void)old;
}

#endif /* LOCUS_RUN_H */
