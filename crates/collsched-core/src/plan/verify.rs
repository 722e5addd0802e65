//! The verifier: symbolic execution of a Plan. (Being built: see the verifier work item.)
use super::Plan;
use crate::error::Result;

/// What a successful verification measured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub transfers: usize,
    pub segments: usize,
    pub bytes_moved: u64,
}

pub fn verify(plan: &Plan) -> Result<VerifyReport> {
    plan.check_shape()?;
    Err(crate::error::Error::Unsupported("verifier not implemented yet".into()))
}
