//! ForestColl (NSDI'26): throughput-optimal spanning-tree schedules for allgather,
//! reduce-scatter and allreduce on any Eulerian topology of compute and switch nodes.
//!
//! Pipeline: `optimal` (exact 1/x*, k, y) -> scaled integer graph -> `split` (switch
//! removal by edge splitting, keeping optimality) -> `pack` (spanning out-trees with
//! multiplicities) -> trees mapped back onto physical routes (`schedule`) -> `plan`.
//! `fixed_k` gives the best schedule for a chosen number of trees per root.
pub mod fixed_k;
pub mod optimal;
pub mod pack;
pub mod plan;
pub mod ratio;
pub mod schedule;
pub mod split;

pub use fixed_k::fixed_k_scale;
pub use optimal::{optimal, Optimum};
pub use pack::Growth;
pub use plan::{
    auto_chunks, auto_chunks_default, default_piece_latency_ns, plan_allgather, plan_allgather_with, plan_allreduce, plan_allreduce_with, plan_reduce_scatter, plan_reduce_scatter_with, predicted_time,
    predicted_time_chunks, PlanOptions,
};
pub use ratio::Ratio;
pub use schedule::{schedule, schedule_with, ForestOptions, ForestSchedule, ForestTree, KChoice, TreeEdge, INTERLEAVE_MAX_COMPUTE};
