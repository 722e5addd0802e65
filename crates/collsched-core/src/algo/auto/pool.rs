//! Per-thread reuse of the cost model's working arrays. At 320 GPUs one prediction
//! needs ~20 arrays of 0.2–2 MB; allocating them afresh each call costs page faults
//! (the allocator hands large blocks back to the OS between calls), which measured as
//! much as the model's own arithmetic. Buffers come back here when the model is done
//! and are reused by the next call on the same thread. Contents never carry over: every
//! buffer is cleared and refilled, so results cannot depend on the pool.
use std::cell::RefCell;

/// Buffers kept per element type, and the most bytes kept per element type.
const KEEP: usize = 32;
const KEEP_BYTES: usize = 24 << 20;

pub trait Pooled: Copy + 'static {
    fn with<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> R;
}

macro_rules! pooled {
    ($t:ty, $name:ident) => {
        thread_local! {
            static $name: RefCell<Vec<Vec<$t>>> = const { RefCell::new(Vec::new()) };
        }
        impl Pooled for $t {
            fn with<R>(f: impl FnOnce(&mut Vec<Vec<$t>>) -> R) -> R {
                $name.with(|p| f(&mut p.borrow_mut()))
            }
        }
    };
}
pooled!(u64, POOL_U64);
pooled!(u32, POOL_U32);
pooled!(usize, POOL_USIZE);
pooled!(bool, POOL_BOOL);
pooled!(super::cost::SlotTerms, POOL_TERMS);

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
