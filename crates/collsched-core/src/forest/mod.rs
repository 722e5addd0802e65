//! ForestColl (NSDI'26): throughput-optimal spanning-tree schedules for allgather,
//! reduce-scatter and allreduce on any Eulerian topology with compute and switch nodes.
pub mod ratio;
pub mod optimal;

pub use optimal::{optimal, Optimum};
pub use ratio::Ratio;

#[cfg(test)]
mod quick_tests {
    use super::*;
    use crate::topology::graph::Graph;
    #[test]
    fn paper_optima() {
        let m = optimal(&Graph::parse_preset("mi250:2").unwrap()).unwrap();
        assert_eq!(m.k, 83);
        assert_eq!(m.algbw, Ratio::new(5312_000_000_000, 15));
        let a = optimal(&Graph::parse_preset("a100:2").unwrap()).unwrap();
        assert_eq!(a.k, 13);
        assert_eq!(a.x, Ratio::new(325_000_000_000, 15));
        let a16 = optimal(&Graph::parse_preset("a100:16").unwrap()).unwrap();
        assert_eq!(a16.k, 1);
    }
}
pub mod fixed_k;
pub mod pack;
pub mod schedule;
pub mod split;

pub use fixed_k::fixed_k_scale;
pub use schedule::{schedule, ForestSchedule, ForestTree, KChoice, TreeEdge};

pub mod plan;
pub use plan::{plan_allgather, plan_allreduce, plan_reduce_scatter, predicted_time};
