//! A small bounded LRU of auto's decisions, keyed by everything a decision depends on
//! (the full matrix, the cluster spec and the options). A hit returns the decision the
//! same inputs produced before, so caching never changes a result, only its cost.
//! Entries also keep the plan auto returned, while all kept plans together stay under
//! `PLAN_BYTES`, so a hit costs hashing and comparing the matrix and cloning the plan
//! instead of planning the winner again; older entries beyond the budget keep only their
//! decision (a hit then replans the winner: the same plan, byte for byte).
use crate::plan::{Plan, Segment, Transfer};
use crate::traffic::Traffic;
use std::sync::Mutex;

/// How a decision was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// One candidate alone was predicted within the refinement margin.
    Model,
    /// Close calls, but refinement was turned off.
    ModelRefineOff,
    /// Close calls, but simulating them was estimated to cost more than the budget.
    ModelOverBudget { estimate_ns: u64 },
    /// Close calls, but the fluid model ran over its counted-work budget on one of them.
    FluidOverBudget { budget_ns: u64 },
    /// The close calls were simulated; the smallest simulated time won.
    Simulated,
    /// The close calls were evaluated with the integer fluid model; the smallest time won.
    Fluid,
}

/// What auto decided for one input: the winner's index in the candidate list,
/// each candidate's predicted time (None = the candidate does not support the input)
/// and refined time (None = not refined).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub winner: usize,
    pub predicted_ns: Vec<Option<u64>>,
    /// Refined time of each close call (fluid model or simulator, per `how`; None = not refined).
    pub simulated_ns: Vec<Option<u64>>,
    /// Lower bound of each candidate pruned without prediction (None = not pruned).
    pub pruned_ns: Vec<Option<u64>>,
    pub how: How,
}

/// Bytes of plans the cache keeps at most (the most recently used first).
pub const PLAN_BYTES: usize = 64 << 20;

/// Approximate heap size of a plan (its arrays and the matrix inside its collective).
pub fn plan_bytes(p: &Plan) -> usize {
    let matrix = match &p.collective {
        crate::plan::Collective::AllToAll { traffic } => traffic.data().len() * 8,
        _ => 0,
    };
    p.transfers.len() * std::mem::size_of::<Transfer>()
        + p.segments.len() * std::mem::size_of::<Segment>()
        + p.deps.len() * 4
        + p.scratch_bytes.len() * 8
        + p.meta.iter().map(|(k, v)| k.len() + v.len() + 64).sum::<usize>()
        + matrix
}

#[derive(Clone)]
struct Entry {
    hash: u64,
    traffic: Traffic,
    context: String,
    decision: Decision,
    /// The plan auto returned for it, if within the byte budget.
    plan: Option<Plan>,
}

/// Most recently used first; at most `capacity` entries.
pub struct Lru {
    capacity: usize,
    entries: Mutex<Vec<Entry>>,
}

impl Lru {
    pub const fn new(capacity: usize) -> Lru {
        Lru { capacity, entries: Mutex::new(Vec::new()) }
    }
    /// The decision for these inputs, and the plan returned with it if still kept.
    pub fn get(&self, traffic: &Traffic, context: &str) -> Option<(Decision, Option<Plan>)> {
        let hash = traffic.hash();
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let pos = e.iter().position(|x| x.hash == hash && x.context == context && x.traffic == *traffic)?;
        let hit = e.remove(pos);
        let found = (hit.decision.clone(), hit.plan.clone());
        e.insert(0, hit);
        Some(found)
    }
    /// Remember a decision and (budget permitting) the plan returned with it.
    pub fn put(&self, traffic: &Traffic, context: &str, decision: Decision, plan: Option<&Plan>) {
        let hash = traffic.hash();
        let plan = plan.filter(|p| plan_bytes(p) <= PLAN_BYTES).cloned();
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        e.retain(|x| !(x.hash == hash && x.context == context && x.traffic == *traffic));
        e.insert(0, Entry { hash, traffic: traffic.clone(), context: context.to_string(), decision, plan });
        e.truncate(self.capacity);
        // Keep plans of the most recent entries only, within the byte budget.
        let mut kept = 0usize;
        for x in e.iter_mut() {
            if let Some(p) = &x.plan {
                kept += plan_bytes(p);
                if kept > PLAN_BYTES {
                    x.plan = None;
                }
            }
        }
    }
    /// How many entries still keep their plan.
    pub fn plans_kept(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|x| x.plan.is_some()).count()
    }
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn clear(&self) {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn evicts_least_recently_used() {
        let lru = Lru::new(2);
        let t = |v| Traffic::new(1, vec![v]).unwrap();
        let d = |w| Decision { winner: w, predicted_ns: vec![], simulated_ns: vec![], pruned_ns: vec![], how: How::Model };
        lru.put(&t(1), "c", d(1), None);
        lru.put(&t(2), "c", d(2), None);
        assert_eq!(lru.get(&t(1), "c"), Some((d(1), None)));
        lru.put(&t(3), "c", d(3), None);
        assert_eq!(lru.get(&t(2), "c"), None);
        assert_eq!(lru.get(&t(1), "c"), Some((d(1), None)));
        assert_eq!(lru.get(&t(1), "other"), None);
        assert_eq!(lru.len(), 2);
    }
}
