//! Benchmarks of `collsched-core`: `cargo bench -p collsched-bench` (benches/). The library is
//! empty; the crate exists so that the core's tests build without the benchmarks' dependencies.
