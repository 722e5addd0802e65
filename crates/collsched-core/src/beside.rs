//! Fork-join of two jobs on a persistent helper thread: `join(a, b)` runs `a` on the calling
//! thread's helper while `b` runs on the calling thread, and returns both results.
//!
//! Why not `std::thread::scope`: a fresh thread per call costs its start-up and, worse, starts
//! with cold per-thread working memory (`crate::reuse`), so at 64 GPUs two scoped threads were
//! slower than one. The helper lives as long as its calling thread and keeps its pools warm.
//! It is kept off the CPU of its caller (`placement`): woken after idle time, Linux may
//! otherwise run it on the caller's CPU, and the two then take turns on one core.
//!
//! Safety of borrowing: `a` may borrow from the caller's stack. `join` does not return (nor
//! unwind) before `a` has finished or was dropped unrun, exactly as a scope would.
//! After `fork()`, the child has no helper thread: the helper is tied to the process id and
//! a child starts its own (the parent's channel is leaked, never touched).
use std::cell::RefCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

mod placement;
use placement::Placement;

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Helper {
    pid: u32,
    jobs: SyncSender<Job>,
    placement: Placement,
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
    !on_helper() && !IN_JOIN.with(|j| j.get()) && cores() > 1
}

/// The cores this process may use, read once: `available_parallelism` reads the cgroup
/// quota from files on every call (10–15 µs on Linux), too slow for a per-plan question.
pub fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// How long a waiting side of `join` polls before it sleeps. Waking a sleeping thread
/// took 25–60 µs on the 2-vCPU container (futex wake plus the hypervisor's scheduling),
/// several times per `auto` call; a short poll on an otherwise idle core avoids it.
const CALLER_SPIN: std::time::Duration = std::time::Duration::from_micros(500);
/// The helper polls this long for its next job after each one (auto forks twice in a row).
const HELPER_SPIN: std::time::Duration = std::time::Duration::from_micros(200);

/// `rx.recv()`, polling for up to `spin` first.
fn recv_soon<T>(rx: &Receiver<T>, spin: std::time::Duration) -> Result<T, std::sync::mpsc::RecvError> {
    let start = std::time::Instant::now();
    loop {
        for _ in 0..64 {
            match rx.try_recv() {
                Ok(x) => return Ok(x),
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return Err(std::sync::mpsc::RecvError),
                Err(std::sync::mpsc::TryRecvError::Empty) => std::hint::spin_loop(),
            }
        }
        if start.elapsed() >= spin {
            return rx.recv();
        }
    }
}

/// The next value a job running on the helper sends this thread, or None once it has
/// dropped its sender: polls as `join` does before it sleeps. Wait this way only for a
/// job that has started (one not started may run on this thread after its `b`).
pub(crate) fn recv_polling<T>(rx: &Receiver<T>) -> Option<T> {
    recv_soon(rx, CALLER_SPIN).ok()
}

fn serve(jobs: Receiver<Job>) {
    IS_HELPER.with(|h| h.set(true));
    // Ends when the calling thread exits (its sender is dropped).
    while let Ok(job) = recv_soon(&jobs, HELPER_SPIN) {
        job();
    }
}

/// Wake the calling thread's helper (if it has one and it is idle) so that it is polling by
/// the time the next `join` hands it a job: call this a little before a `join` that follows
/// an idle period. Never blocks and never starts a helper.
pub fn wake() {
    if !worth_forking() {
        return;
    }
    HELPER.with(|h| {
        if let Some(x) = h.borrow().as_ref().filter(|x| x.pid == std::process::id() && x.placement.keep_off_caller()) {
            // A full queue means the helper has work queued already: nothing to do. `join`
            // never waits for the helper to take this one (it hands over with `try_send`).
            let _ = x.jobs.try_send(Box::new(|| {}));
        }
    });
}

/// The calling thread's helper channel, started on first use (or after a fork); None if
/// there is no helper to be had, or it could run only on this thread's CPU.
fn helper_jobs() -> Option<SyncSender<Job>> {
    HELPER.with(|h| {
        let mut h = h.borrow_mut();
        let pid = std::process::id();
        if h.as_ref().is_some_and(|x| x.pid != pid) {
            // A forked child: the helper thread does not exist here. Leak the old channel.
            std::mem::forget(h.take());
        }
        if h.is_none() {
            let (tx, rx) = sync_channel::<Job>(4);
            let (placement, place) = Placement::for_new_helper();
            let spawned = std::thread::Builder::new().name("collsched-helper".into()).spawn(move || {
                place();
                serve(rx)
            });
            if spawned.is_err() {
                return None; // no thread to be had: the caller runs both jobs itself
            }
            *h = Some(Helper { pid, jobs: tx, placement });
        }
        h.as_ref().filter(|x| x.placement.keep_off_caller()).map(|x| x.jobs.clone())
    })
}

/// Run `a` on the helper thread and `b` here; both results, or a panic resumed (`a`'s
/// first: a `b` that waits for `a` fails because `a` did) once neither runs any more. `a`
/// runs here first when no helper can take it (none, or its queue full), so `b` may wait
/// for something `a` produces; and it is taken back when the helper has not started it by
/// the time `b` is done (a helper whose core was idle took up to 1 ms to wake on the 2-vCPU
/// container): never slower than running both here, apart from handing `a` over.
pub fn join<RA: Send, RB>(a: impl FnOnce() -> RA + Send, b: impl FnOnce() -> RB) -> (RA, RB) {
    let (done_tx, done_rx) = sync_channel::<std::thread::Result<RA>>(1);
    // Whoever takes `a` out of the slot first runs it.
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(a)));
    let theirs = slot.clone();
    let job = Box::new(move || {
        let taken = theirs.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(a) = taken {
            let _ = done_tx.send(catch_unwind(AssertUnwindSafe(a)));
        }
    }) as Box<dyn FnOnce() + Send + '_>;
    // SAFETY: the job only borrows what `a` borrows, and touches it only if it takes `a`
    // out of the slot. If the helper takes it, this function waits on `done_rx` until the
    // job has sent its result (or was dropped: recv errors), on every path including a panic
    // of `b`. If this thread takes `a` back, a job the helper runs later finds the slot
    // empty and only drops an empty slot, a sender that never sent and an `Arc`: nothing
    // it borrows is touched after this function returns.
    let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Job>(job) };
    // A full queue (a helper that has not woken for earlier jobs) or a gone helper: the job
    // is dropped unrun and `a` stays in the slot.
    let handed = match helper_jobs() {
        Some(jobs) => jobs.try_send(job).is_ok(),
        None => false,
    };
    let was_in_join = IN_JOIN.with(|j| j.replace(true));
    let take = || slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    let (ra, rb) = if handed {
        let rb = catch_unwind(AssertUnwindSafe(b));
        let ra = match (take(), &rb) {
            // Not started by the helper: run it here (unless `b` panicked: drop it unrun).
            (Some(a), Ok(_)) => Some(catch_unwind(AssertUnwindSafe(a))),
            (Some(_), Err(_)) => None,
            (None, _) => Some(recv_soon(&done_rx, CALLER_SPIN).expect("a job that took its work sends its result")),
        };
        (ra, Some(rb))
    } else {
        // Not handed over: `a` first, then `b` (unless `a` panicked), so that a `b` waiting
        // for `a` cannot wait forever.
        let ra = catch_unwind(AssertUnwindSafe(take().expect("a job not handed over keeps its work")));
        let rb = ra.is_ok().then(|| catch_unwind(AssertUnwindSafe(b)));
        (Some(ra), rb)
    };
    IN_JOIN.with(|j| j.set(was_in_join));
    match (ra, rb) {
        (Some(Ok(ra)), Some(Ok(rb))) => (ra, rb),
        (Some(Err(p)), _) | (_, Some(Err(p))) => resume_unwind(p),
        (None, _) | (_, None) => unreachable!("a job is left unrun only after the other panicked"),
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
        // The helper persists: a second call reuses it (here `b` waits until `a` has
        // started, so that `a` is not taken back).
        let started = std::sync::atomic::AtomicBool::new(false);
        let (x, y) = join(
            || {
                started.store(true, std::sync::atomic::Ordering::SeqCst);
                std::thread::current().name().map(String::from)
            },
            || {
                let t0 = std::time::Instant::now();
                while !started.load(std::sync::atomic::Ordering::SeqCst) && t0.elapsed().as_secs() < 10 {
                    std::thread::yield_now();
                }
                7
            },
        );
        assert_eq!((x.as_deref(), y), (Some("collsched-helper"), 7));
    }

    #[test]
    fn a_job_the_busy_helper_has_not_started_is_taken_back() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        // Keep this thread's helper busy until the join below has returned.
        let gate = Arc::new(AtomicBool::new(false));
        let held = gate.clone();
        let Some(jobs) = super::helper_jobs() else { return }; // no threads here: nothing to test
        jobs.send(Box::new(move || {
            let t0 = std::time::Instant::now();
            while !held.load(Ordering::SeqCst) && t0.elapsed().as_secs() < 10 {
                std::thread::yield_now();
            }
        }))
        .unwrap();
        let data = [1u64, 2, 3];
        let here = std::thread::current().id();
        let (a, b) = join(|| (std::thread::current().id(), data.iter().sum::<u64>()), || data.len());
        assert_eq!(a, (here, 6), "run on the calling thread");
        assert_eq!(b, 3);
        gate.store(true, Ordering::SeqCst);
        // The helper later finds the taken job empty and goes on serving.
        assert_eq!(join(|| 2, || 3), (2, 3));
    }

    #[test]
    fn a_caller_job_waiting_for_the_helper_job_completes_when_the_queue_is_full() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let Some(jobs) = super::helper_jobs() else { return }; // no threads here: nothing to test
        // A helper busy until released, with its queue full behind it: `a` cannot be handed over.
        let gate = Arc::new(AtomicBool::new(false));
        let held = gate.clone();
        jobs.send(Box::new(move || {
            let t0 = std::time::Instant::now();
            while !held.load(Ordering::SeqCst) && t0.elapsed().as_secs() < 10 {
                std::thread::yield_now();
            }
        }))
        .unwrap();
        let mut queued = 0;
        let t0 = std::time::Instant::now();
        while t0.elapsed().as_secs() < 10 {
            match jobs.try_send(Box::new(|| {})) {
                Ok(()) => queued += 1,
                Err(_) if queued > 0 => break, // full
                Err(_) => std::thread::yield_now(),
            }
        }
        // `b` waits (at most 10 s, so a regression fails instead of hanging) for `a`'s value.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (a, got) = join(move || tx.send(5u32).is_ok(), || rx.recv_timeout(std::time::Duration::from_secs(10)).ok());
        gate.store(true, Ordering::SeqCst);
        assert_eq!((a, got), (true, Some(5)));
        assert_eq!(join(|| 2, || 3), (2, 3));
    }

    /// `join` where `b` waits (at most 10 s) until the helper has started `a`, so that `a`
    /// is not taken back; `a`'s result.
    #[cfg(target_os = "linux")]
    fn on_helper<R: Send>(a: impl FnOnce() -> R + Send) -> R {
        use std::sync::atomic::{AtomicBool, Ordering};
        let started = AtomicBool::new(false);
        join(
            || {
                started.store(true, Ordering::SeqCst);
                a()
            },
            || {
                let t0 = std::time::Instant::now();
                while !started.load(Ordering::SeqCst) && t0.elapsed().as_secs() < 10 {
                    std::thread::yield_now();
                }
            },
        )
        .0
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_helper_runs_off_its_callers_cpu_within_its_callers_cpus() {
        use super::placement::{allowed_cpus, cpu_now, restrict_to};
        let cpus = allowed_cpus();
        if cpus.len() < 2 {
            return; // one CPU: no helper to place
        }
        // A fresh thread (so a fresh helper) allowed two CPUs, then moved to the other one:
        // the helper follows, each time away from where its caller hands it a job.
        std::thread::spawn(move || {
            let pair = [cpus[0], cpus[1]];
            restrict_to(&pair);
            for round in 0..4 {
                restrict_to(&pair[round % 2..round % 2 + 1]);
                restrict_to(&pair);
                let before = cpu_now();
                let (name, mask) = on_helper(|| (std::thread::current().name().map(String::from), allowed_cpus()));
                assert_eq!(name.as_deref(), Some("collsched-helper"));
                let off = super::HELPER.with(|h| h.borrow().as_ref().unwrap().placement.kept_off());
                // Kept off the CPU the caller ran on (unless the scheduler moved the caller
                // during the join, then the CPU it ran on at the hand-over is unknown).
                if cpu_now() == before {
                    assert_eq!(off, before, "round {round}");
                }
                assert!(pair.contains(&off), "kept off {off}, not one of {pair:?}");
                let other = pair[usize::from(off == pair[0])];
                assert_eq!(mask, vec![other], "round {round}: the helper may run on {mask:?}");
            }
        })
        .join()
        .unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_caller_allowed_one_cpu_runs_both_jobs_itself() {
        use super::placement::{allowed_cpus, restrict_to};
        let cpus = allowed_cpus();
        std::thread::spawn(move || {
            restrict_to(&cpus[..1]);
            // Even when `b` waits for `a` to start (a helper would get to run it then).
            assert_eq!(on_helper(|| std::thread::current().id()), std::thread::current().id());
        })
        .join()
        .unwrap();
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
        assert_eq!(super::cores() > 1, cores);
        assert_eq!(super::worth_forking(), cores);
        let (on_helper, inside) = join(super::worth_forking, super::worth_forking);
        assert!(!on_helper && !inside);
        // Restored after the join, also after a panic inside it.
        assert_eq!(super::worth_forking(), cores);
        let _ = std::panic::catch_unwind(|| join(|| 1, || panic!("inside")));
        assert_eq!(super::worth_forking(), cores);
    }
}
