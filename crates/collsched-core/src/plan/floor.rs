//! The least any planner spends writing a plan of a given size: filling that many bytes of
//! already-mapped memory on this thread. `benchmarks/fast_planning.py` prints it beside the planners' times, so a
//! planning-time target can be read against what the plan's size alone costs here.
use std::time::{Duration, Instant};

/// Median over `reps` (at least one) of the time to fill `bytes` of memory on this thread,
/// after one untimed fill that maps the
/// pages (a planner in a loop writes into recycled, mapped arrays: `plan::recycle`).
pub fn write_floor(bytes: usize, reps: usize) -> Duration {
    let mut buf = vec![0u64; bytes.div_ceil(8)];
    fill_split(&mut buf, 1);
    let mut times: Vec<Duration> = (0..reps.max(1) as u64)
        .map(|r| {
            let t0 = Instant::now();
            fill_split(&mut buf, r);
            let t = t0.elapsed();
            std::hint::black_box(&buf);
            t
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// Set every word of `buf` to `value`.
fn fill_split(buf: &mut [u64], value: u64) {
    buf.fill(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_halves_are_filled() {
        for len in [0usize, 1, 2, 7, 100_001] {
            let mut buf = vec![3u64; len];
            fill_split(&mut buf, 9);
            assert!(buf.iter().all(|&x| x == 9), "len {len}");
        }
    }

    #[test]
    fn nothing_to_fill_and_no_reps_still_measure() {
        // Zero reps count as one, so there is a median to return.
        assert!(write_floor(0, 0) < Duration::from_secs(1));
        assert!(write_floor(24, 0) < Duration::from_secs(1));
    }
}
