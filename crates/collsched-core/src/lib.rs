//! collsched core: topology, traffic, Plan, verifier, simulator and the plan
//! producers (algorithms). Pure Rust, integer-exact planning, deterministic.
//!
//! The spine: `algo::plan_all_to_all` (or another producer) turns a demand on a
//! topology into a `plan::Plan`; `plan::verify`, `sim::simulate` and the
//! Python runtime consume any Plan.
pub mod error;
pub mod units;
pub mod topology;
pub mod traffic;
pub mod plan;
pub mod bound;
pub mod sim;
pub mod algo;
pub mod flow;
pub mod forest;
pub mod timeline;

pub use error::{Error, Result};
pub use plan::{Buf, Collective, Op, Plan, PlanBuilder, Segment, Transfer};
pub use topology::{Cluster, ScaleUp, Tier};
pub use traffic::Traffic;
