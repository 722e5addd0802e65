//! Being built.
use crate::error::{Error, Result};
use crate::plan::{Options, Plan};
use crate::topology::Cluster;
use crate::traffic::Traffic;

pub fn plan(_traffic: &Traffic, _cluster: &Cluster, _opts: &Options) -> Result<Plan> {
    Err(Error::Unsupported("auto is not implemented yet".into()))
}
