//! Keeping the helper thread off its caller's CPU.
//!
//! Why: when the helper has slept (plans with idle time between them, as in a training
//! step), Linux may wake it on the CPU of the thread that wakes it. On the 2-vCPU container
//! the two then shared one CPU for hundreds of microseconds while the other stayed idle:
//! FAST at 16 servers took 1.9–2.1 ms with its helper against 1.5 ms without one, and
//! 0.9–1.0 ms once the helper was kept off the caller's CPU. So each hand-over checks the
//! caller's CPU (a vDSO read) and, when it differs from the one the helper was last kept
//! off, sets the helper's affinity to the caller's CPUs less that one (one system call).
//! The helper stays within the CPUs the caller may use: a caller pinned to one CPU gets no
//! helper. Elsewhere than Linux this does nothing.

#[cfg(target_os = "linux")]
mod imp {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::Arc;

    /// The caller's side: the helper's thread id and the CPU it is kept off.
    pub struct Placement {
        /// 0 until the helper has started and published its id.
        tid: Arc<AtomicI32>,
        /// The CPU the helper's affinity leaves out; -1 for none yet.
        off: Cell<i32>,
    }

    /// The caller's CPU, or None if the kernel does not say.
    pub(super) fn current_cpu() -> Option<i32> {
        // SAFETY: no arguments, no memory touched.
        let cpu = unsafe { libc::sched_getcpu() };
        (cpu >= 0).then_some(cpu)
    }

    /// Where the helper may run, seen from a caller on one CPU.
    enum Others {
        /// The caller's allowed CPUs less its own.
        Cpus(libc::cpu_set_t),
        /// None: the caller may use only the CPU it is on.
        NoneLeft,
        /// Not known (the mask cannot be read, e.g. more CPUs than a cpu_set_t holds):
        /// the scheduler places the helper, as without this module.
        Unknown,
    }

    /// The calling thread's allowed CPUs other than `cpu`.
    fn others_than(cpu: i32) -> Others {
        if cpu < 0 || cpu as usize >= libc::CPU_SETSIZE as usize {
            return Others::Unknown; // CPU_CLR would index past the set
        }
        // SAFETY: cpu_set_t is plain bits (all-zero is the empty set), filled in by the
        // kernel for this thread (pid 0); CPU_CLR (with `cpu` checked in range above) and
        // CPU_COUNT only touch the set.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                return Others::Unknown;
            }
            libc::CPU_CLR(cpu as usize, &mut set);
            if libc::CPU_COUNT(&set) > 0 { Others::Cpus(set) } else { Others::NoneLeft }
        }
    }

    /// Set thread `tid`'s affinity (0: the calling thread); whether the kernel took it.
    pub(super) fn set_affinity(tid: i32, set: &libc::cpu_set_t) -> bool {
        // SAFETY: `set` is a valid cpu_set_t of the size passed; an unknown or exited
        // thread id only makes the call fail.
        unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), set) == 0 }
    }

    impl Placement {
        /// For a helper about to be started from this thread: the CPU to keep it off and
        /// the job that the new thread runs first (publish its id and leave that CPU).
        pub fn for_new_helper() -> (Placement, impl FnOnce() + Send + 'static) {
            let tid = Arc::new(AtomicI32::new(0));
            let cpu = current_cpu().unwrap_or(-1);
            let mask = match others_than(cpu) {
                Others::Cpus(set) => Some(set),
                Others::NoneLeft | Others::Unknown => None,
            };
            // Kept off `cpu` only if it has somewhere else to go (else `keep_off_caller`
            // looks again at the first hand-over).
            let off = if mask.is_some() { cpu } else { -1 };
            let theirs = tid.clone();
            let start = move || {
                if let Some(set) = mask {
                    set_affinity(0, &set);
                }
                // SAFETY: gettid has no arguments and touches no memory.
                let id = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
                theirs.store(id, Ordering::Release);
            };
            (Placement { tid, off: Cell::new(off) }, start)
        }

        /// Before handing the helper a job: keep it off the CPU this thread runs on now.
        /// False if it has no other CPU to run on (this thread may use only this one).
        pub fn keep_off_caller(&self) -> bool {
            let Some(cpu) = current_cpu() else { return true };
            if cpu == self.off.get() {
                return true;
            }
            let set = match others_than(cpu) {
                Others::Cpus(set) => set,
                Others::NoneLeft => return false,
                Others::Unknown => return true,
            };
            let tid = self.tid.load(Ordering::Acquire);
            // Not started yet: it leaves the CPU it was started from; a move since is rare.
            if tid != 0 && set_affinity(tid, &set) {
                self.off.set(cpu);
            }
            true
        }

        /// The CPU the helper is kept off (tests).
        #[cfg(test)]
        pub fn kept_off(&self) -> i32 {
            self.off.get()
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    /// Nothing to place: the scheduler decides.
    pub struct Placement;

    impl Placement {
        pub fn for_new_helper() -> (Placement, impl FnOnce() + Send + 'static) {
            (Placement, || {})
        }
        pub fn keep_off_caller(&self) -> bool {
            true
        }
    }
}

pub(super) use imp::Placement;

/// This thread's allowed CPUs (tests).
#[cfg(all(test, target_os = "linux"))]
pub(super) fn allowed_cpus() -> Vec<i32> {
    // SAFETY: as in `others_than`; CPU_ISSET only reads the set, below its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
        (0..libc::CPU_SETSIZE).filter(|&c| libc::CPU_ISSET(c as usize, &set)).collect()
    }
}

/// Restrict this thread to `cpus` (tests).
#[cfg(all(test, target_os = "linux"))]
pub(super) fn restrict_to(cpus: &[i32]) {
    // SAFETY: all-zero is the empty set; CPU_SET only touches the set (CPUs the kernel
    // reported, below its size).
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c as usize, &mut set);
        }
        set
    };
    assert!(imp::set_affinity(0, &set));
}

/// The CPU this thread runs on (tests).
#[cfg(all(test, target_os = "linux"))]
pub(super) fn cpu_now() -> i32 {
    imp::current_cpu().expect("the kernel reports the CPU")
}
