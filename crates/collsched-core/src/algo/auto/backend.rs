//! The backend constants `choose` adds to each candidate's transfer time: what one call,
//! one step, one message and one staged byte cost on the host, and what planning costs
//! per transfer. Kept as data (`calibration.json`, the defaults; `collsched calibrate`
//! writes the same format for the user's cluster), not as constants in code.
use crate::error::Result;
use crate::invalid;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// One backend's host costs (microseconds) and its duplex behaviour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backend {
    /// Fixed cost of one collsched call that runs a plan (plan-hash check, program lookup).
    pub call_us: f64,
    /// Fixed cost of torch's own `all_to_all_single` (`native`).
    pub native_call_us: f64,
    /// Each step of a plan: one `batch_isend_irecv` and its wait.
    pub step_us: f64,
    /// Each message a rank posts or receives.
    pub message_us: f64,
    /// Gathering and scattering multi-segment messages and local copies, per MiB.
    pub copy_us_per_mib: f64,
    /// How much of a pair's reverse direction `native` serialises behind the forward one:
    /// 1 = the two directions of a pair move one after the other (Gloo, issue 32), 0 = full duplex.
    pub half_duplex: f64,
}

/// Every backend's constants and the planners' cost per transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    pub format: u32,
    /// Where the numbers come from (free text, shown by `collsched calibrate`).
    pub source: String,
    pub backends: BTreeMap<String, Backend>,
    /// Host time to plan one transfer of the whole plan, per planned candidate (ns).
    pub planning_ns_per_transfer: BTreeMap<String, f64>,
}

const DEFAULTS: &str = include_str!("calibration.json");

impl Calibration {
    /// The built-in defaults (`calibration.json`).
    pub fn defaults() -> &'static Calibration {
        static D: OnceLock<Calibration> = OnceLock::new();
        D.get_or_init(|| Calibration::from_json(DEFAULTS).expect("built-in calibration.json is valid"))
    }

    /// The defaults as JSON text (what `collsched calibrate` starts from).
    pub fn defaults_json() -> &'static str {
        DEFAULTS
    }

    /// Parse and check a calibration: every constant finite and ≥ 0, `half_duplex` in
    /// [0, 1], a planning cost for every planned candidate.
    pub fn from_json(text: &str) -> Result<Calibration> {
        let c: Calibration = match serde_json::from_str(text) {
            Ok(c) => c,
            Err(e) => return invalid!("calibration: not a valid calibration JSON: {e}"),
        };
        if c.format != 1 {
            return invalid!("calibration: format {} is not supported (expected 1)", c.format);
        }
        if c.backends.is_empty() {
            return invalid!("calibration: 'backends' is empty");
        }
        let bad = |what: String, v: f64| -> Result<()> {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                invalid!("calibration: {what} must be a finite number ≥ 0, got {v}")
            }
        };
        for (name, b) in &c.backends {
            for (k, v) in [("call_us", b.call_us), ("native_call_us", b.native_call_us), ("step_us", b.step_us), ("message_us", b.message_us), ("copy_us_per_mib", b.copy_us_per_mib)] {
                bad(format!("backends.{name}.{k}"), v)?;
            }
            if !(0.0..=1.0).contains(&b.half_duplex) {
                return invalid!("calibration: backends.{name}.half_duplex must be in [0, 1], got {}", b.half_duplex);
            }
        }
        for name in super::PLANNED {
            match c.planning_ns_per_transfer.get(*name) {
                Some(&v) => bad(format!("planning_ns_per_transfer.{name}"), v)?,
                None => return invalid!("calibration: planning_ns_per_transfer has no entry for '{name}'"),
            }
        }
        Ok(c)
    }

    /// The constants of backend `name`, or an error naming the known ones.
    pub fn backend(&self, name: &str) -> Result<&Backend> {
        match self.backends.get(name) {
            Some(b) => Ok(b),
            None => {
                let known: Vec<&str> = self.backends.keys().map(String::as_str).collect();
                invalid!("unknown backend '{name}' (expected one of: {})", known.join(", "))
            }
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a calibration serialises")
    }

    /// A digest ranks compare so that all of them choose with the same constants.
    pub fn digest(&self) -> u64 {
        let mut h = crate::plan::hash::Fnv64::new();
        h.write(serde_json::to_string(self).expect("a calibration serialises").as_bytes());
        h.finish()
    }
}
