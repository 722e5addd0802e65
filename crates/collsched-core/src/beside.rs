//! Fork-join of two jobs on a persistent helper thread: `join(a, b)` runs `a` on the calling
//! thread's helper while `b` runs on the calling thread, and returns both results.
//!
//! Why not `std::thread::scope`: a fresh thread per call costs its start-up and, worse, starts
//! with cold per-thread working memory (`crate::reuse`), so at 64 GPUs two scoped threads were
//! slower than one. The helper lives as long as its calling thread and keeps its pools warm.
//!
//! Safety of borrowing: `a` may borrow from the caller's stack. `join` does not return (nor
//! unwind) before `a` has finished or was dropped unrun, exactly as a scope would.
//! After `fork()`, the child has no helper thread: the helper is tied to the process id and
//! a child starts its own (the parent's channel is leaked, never touched).
use std::cell::RefCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Helper {
    pid: u32,
    jobs: SyncSender<Job>,
}

thread_local! {
    static HELPER: RefCell<Option<Helper>> = const { RefCell::new(None) };
    static IS_HELPER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Set while this thread is inside `join` (its helper may be busy with that call's job).
    static IN_JOIN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is a helper. Work already running beside another job (e.g. a
/// candidate planned by `auto` on the helper) should not fork again: a third thread on a
/// two-core machine only competes with the other two.
pub fn on_helper() -> bool {
    IS_HELPER.with(|h| h.get())
}

/// Whether splitting work over `join` can pay: more than one core, not already on a helper,
/// and not inside a `join` of this thread (whose job may still occupy the helper: a second
/// job would queue behind it and this thread would wait for both).
pub fn worth_forking() -> bool {
    !on_helper() && !IN_JOIN.with(|j| j.get()) && std::thread::available_parallelism().is_ok_and(|c| c.get() > 1)
}

fn serve(jobs: Receiver<Job>) {
    IS_HELPER.with(|h| h.set(true));
    // Ends when the calling thread exits (its sender is dropped).
    while let Ok(job) = jobs.recv() {
        job();
    }
}

/// The calling thread's helper channel, started on first use (or after a fork).
fn helper_jobs() -> Option<SyncSender<Job>> {
    HELPER.with(|h| {
        let mut h = h.borrow_mut();
        let pid = std::process::id();
        if h.as_ref().is_some_and(|x| x.pid != pid) {
            // A forked child: the helper thread does not exist here. Leak the old channel.
            std::mem::forget(h.take());
        }
        if h.is_none() {
            let (tx, rx) = sync_channel::<Job>(1);
            let spawned = std::thread::Builder::new().name("collsched-helper".into()).spawn(move || serve(rx));
            if spawned.is_err() {
                return None; // no thread to be had: the caller runs both jobs itself
            }
            *h = Some(Helper { pid, jobs: tx });
        }
        h.as_ref().map(|x| x.jobs.clone())
    })
}

/// Run `a` on the helper thread and `b` here; both results, or the first panic resumed
/// (after both have finished). Falls back to running `a` here when no helper can run it.
pub fn join<RA: Send, RB>(a: impl FnOnce() -> RA + Send, b: impl FnOnce() -> RB) -> (RA, RB) {
    let (done_tx, done_rx) = sync_channel::<std::thread::Result<RA>>(1);
    let job = Box::new(move || {
        let _ = done_tx.send(catch_unwind(AssertUnwindSafe(a)));
    }) as Box<dyn FnOnce() + Send + '_>;
    // SAFETY: the job only borrows what `a` borrows. Below, this function waits on `done_rx`
    // until the job has run (it sends before finishing) or has been dropped unrun (its
    // sender dropped: recv errors), on every path including a panic of `b`, so nothing
    // the job borrows ends before the job does.
    let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Job>(job) };
    match helper_jobs() {
        Some(jobs) => {
            if let Err(unsent) = jobs.send(job) {
                (unsent.0)(); // the helper is gone: run it here
            }
        }
        None => job(),
    }
    let was_in_join = IN_JOIN.with(|j| j.replace(true));
    let rb = catch_unwind(AssertUnwindSafe(b));
    let ra = done_rx.recv().expect("the helper runs every job it receives to completion");
    IN_JOIN.with(|j| j.set(was_in_join));
    match (ra, rb) {
        (Ok(ra), Ok(rb)) => (ra, rb),
        (Err(p), _) | (_, Err(p)) => resume_unwind(p),
    }
}

#[cfg(test)]
mod tests {
    use super::join;

    #[test]
    fn both_jobs_run_and_may_borrow() {
        let data: Vec<u64> = (0..1000).collect();
        let (a, b) = join(|| data[..500].iter().sum::<u64>(), || data[500..].iter().sum::<u64>());
        assert_eq!(a + b, 999 * 1000 / 2);
        // The helper persists: a second call reuses it.
        let (x, y) = join(|| std::thread::current().name().map(String::from), || 7);
        assert_eq!((x.as_deref(), y), (Some("collsched-helper"), 7));
    }

    #[test]
    fn a_panic_on_either_side_reaches_the_caller_after_both_finish() {
        let r = std::panic::catch_unwind(|| join(|| panic!("helper side"), || 1));
        assert!(r.is_err());
        let r = std::panic::catch_unwind(|| join(|| 1, || panic!("caller side")));
        assert!(r.is_err());
        // Still usable afterwards.
        assert_eq!(join(|| 2, || 3), (2, 3));
    }

    #[test]
    fn no_forking_from_a_helper_or_inside_a_join() {
        let cores = std::thread::available_parallelism().is_ok_and(|c| c.get() > 1);
        assert_eq!(super::worth_forking(), cores);
        let (on_helper, inside) = join(super::worth_forking, super::worth_forking);
        assert!(!on_helper && !inside);
        // Restored after the join, also after a panic inside it.
        assert_eq!(super::worth_forking(), cores);
        let _ = std::panic::catch_unwind(|| join(|| 1, || panic!("inside")));
        assert_eq!(super::worth_forking(), cores);
    }
}
