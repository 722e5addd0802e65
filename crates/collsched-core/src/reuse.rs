//! Per-thread reuse of planning's working memory. Planning allocates arrays
//! proportional to the matrix on every call; fresh large allocations are fresh
//! mappings (the allocator hands them back to the OS between calls), so each call
//! paid a page fault per 4 KiB — at 320 GPUs a quarter of FAST's planning time and as
//! much as the auto cost model's arithmetic. Two shapes of reuse:
//! - `with_reused`: a whole working struct per thread (FAST's balancing and assembly);
//! - `empty` / `filled` / `give`: loose typed arrays from a per-type pool (auto's model).
//!
//! Contents never carry over: every user clears and refills what it reads, so results
//! cannot depend on what a buffer held before. (Plan arrays themselves are recycled
//! across threads by `plan::recycle`.)
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

// ---- typed array pools ----

/// Buffers kept per element type, and the most bytes kept per element type.
const KEEP: usize = 32;
const KEEP_BYTES: usize = 24 << 20;

pub trait Pooled: Copy + 'static {
    fn with<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> R;
}

/// Make element type `$t` poolable (one thread-local pool per type).
macro_rules! pooled {
    ($t:ty, $name:ident) => {
        thread_local! {
            static $name: std::cell::RefCell<Vec<Vec<$t>>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        impl $crate::reuse::Pooled for $t {
            fn with<R>(f: impl FnOnce(&mut Vec<Vec<$t>>) -> R) -> R {
                $name.with(|p| f(&mut p.borrow_mut()))
            }
        }
    };
}
pub(crate) use pooled;
pooled!(u64, POOL_U64);
pooled!(u32, POOL_U32);
pooled!(usize, POOL_USIZE);
pooled!(bool, POOL_BOOL);

/// An empty buffer with room for `cap` elements.
pub fn empty<T: Pooled>(cap: usize) -> Vec<T> {
    // Best fit: the smallest kept buffer that is large enough, else the largest.
    let mut v = T::with(|p| {
        let fit = (0..p.len()).filter(|&i| p[i].capacity() >= cap).min_by_key(|&i| p[i].capacity());
        let i = fit.or_else(|| (0..p.len()).max_by_key(|&i| p[i].capacity()))?;
        Some(p.swap_remove(i))
    })
    .unwrap_or_default();
    v.clear();
    v.reserve(cap);
    v
}

/// A buffer of `len` copies of `fill`.
pub fn filled<T: Pooled>(len: usize, fill: T) -> Vec<T> {
    let mut v = empty(len);
    v.resize(len, fill);
    v
}

/// Return a buffer for reuse (dropped if the pool is full).
pub fn give<T: Pooled>(mut v: Vec<T>) {
    let bytes = |v: &Vec<T>| v.capacity() * std::mem::size_of::<T>();
    T::with(|p| {
        let kept: usize = p.iter().map(bytes).sum();
        if p.len() < KEEP && kept + bytes(&v) <= KEEP_BYTES {
            v.clear();
            p.push(v);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn reused_buffers_come_back_filled_fresh() {
        let mut a = filled(1000, 7u64);
        a[3] = 9;
        give(a);
        let b = filled(500, 1u64);
        assert_eq!(b.len(), 500);
        assert!(b.iter().all(|&x| x == 1));
        assert!(b.capacity() >= 1000, "reused");
        let c: Vec<u64> = empty(10);
        assert!(c.is_empty());
    }
}
