//! Phase timestamps of one plan, for finding where a thread waits (see
//! `examples/fast_timeline.rs`). Off unless `start` was called: a mark then costs one
//! relaxed atomic load, so the marks stay in the planner.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

static ON: AtomicBool = AtomicBool::new(false);
static MARKS: Mutex<Vec<(&'static str, Instant)>> = Mutex::new(Vec::new());

/// Record that `phase` ended now (on whichever thread), if recording.
#[inline(always)]
pub fn mark(phase: &'static str) {
    if ON.load(Ordering::Relaxed) {
        record(phase);
    }
}

#[cold]
fn record(phase: &'static str) {
    if let Ok(mut m) = MARKS.lock() {
        m.push((phase, Instant::now()));
    }
}

/// Start recording, forgetting earlier marks.
pub fn start() {
    if let Ok(mut m) = MARKS.lock() {
        m.clear();
        m.push(("start", Instant::now()));
    }
    ON.store(true, Ordering::Relaxed);
}

/// Stop recording; the marks since `start`, as (phase, time since `start`).
pub fn stop() -> Vec<(&'static str, std::time::Duration)> {
    ON.store(false, Ordering::Relaxed);
    let m = MARKS.lock().map(|m| m.clone()).unwrap_or_default();
    let Some(&(_, t0)) = m.first() else { return Vec::new() };
    m[1..].iter().map(|&(phase, t)| (phase, t - t0)).collect()
}
