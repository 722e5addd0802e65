//! Per-thread reusable working memory for planning. Planning allocates several
//! arrays proportional to the matrix (piece streams, cursors, id lists); fresh
//! ones cost page faults on every call (large allocations are fresh mappings),
//! which at 320 GPUs was a quarter of the planning time. Reused, they stay
//! mapped and warm. Results never depend on what a buffer held before: every
//! user clears and refills what it reads.
use std::cell::Cell;
use std::thread::LocalKey;

/// Buffers larger than this (bytes of capacity, roughly) are not kept after a call,
/// so one huge plan does not pin its working memory for the thread's lifetime.
pub const KEEP_LIMIT_BYTES: usize = 512 << 20;

/// Run `f` with this thread's buffer from `slot` (a fresh one if it is lent out already,
/// e.g. re-entrantly, or was dropped for its size), then keep it for the next call.
pub fn with_reused<T: Default + Footprint, R>(slot: &'static LocalKey<Cell<Option<Box<T>>>>, f: impl FnOnce(&mut T) -> R) -> R {
    let mut buf = slot.with(|c| c.take()).unwrap_or_default();
    let r = f(&mut buf);
    if buf.footprint() <= KEEP_LIMIT_BYTES {
        slot.with(|c| c.set(Some(buf)));
    }
    r
}

/// Approximate bytes a buffer holds (its capacities).
pub trait Footprint {
    fn footprint(&self) -> usize;
}

/// Capacity of a Vec in bytes.
pub fn vec_bytes<T>(v: &Vec<T>) -> usize {
    v.capacity() * std::mem::size_of::<T>()
}
