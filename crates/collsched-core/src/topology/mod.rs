//! Topologies: the two-tier `Cluster` used by the all-to-all algorithms, its
//! named presets, and (for ForestColl) general capacitated graphs.
pub mod cluster;
pub mod graph;
pub mod hardware;
pub mod presets;

pub use cluster::{Cluster, ScaleUp, Tier};
pub use hardware::HardwareTerms;
