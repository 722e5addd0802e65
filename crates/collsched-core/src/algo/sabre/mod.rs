//! Being built.
use crate::error::{Error, Result};
use crate::plan::{Options, Plan};
use crate::topology::Cluster;
use crate::traffic::Traffic;

pub fn plan(_traffic: &Traffic, _cluster: &Cluster, _opts: &Options) -> Result<Plan> {
    Err(Error::Unsupported("sabre is not implemented yet".into()))
}

pub fn plan_skewed(_traffic: &Traffic, _cluster: &Cluster, _opts: &Options) -> Result<Plan> {
    Err(Error::Unsupported("sabre_skewed is not implemented yet".into()))
}

pub fn plan_light(_traffic: &Traffic, _cluster: &Cluster, _opts: &Options) -> Result<Plan> {
    Err(Error::Unsupported("sabre_light is not implemented yet".into()))
}
