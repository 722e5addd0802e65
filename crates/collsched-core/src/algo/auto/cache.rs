//! A small bounded LRU of auto's decisions, keyed by everything a decision depends on
//! (the full matrix, the cluster spec and the options). A hit returns the decision the
//! same inputs produced before, so caching never changes a result, only its cost.
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

#[derive(Clone)]
struct Entry {
    hash: u64,
    traffic: Traffic,
    context: String,
    decision: Decision,
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
    pub fn get(&self, traffic: &Traffic, context: &str) -> Option<Decision> {
        let hash = traffic.hash();
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let pos = e.iter().position(|x| x.hash == hash && x.context == context && x.traffic == *traffic)?;
        let hit = e.remove(pos);
        let d = hit.decision.clone();
        e.insert(0, hit);
        Some(d)
    }
    pub fn put(&self, traffic: &Traffic, context: &str, decision: Decision) {
        let hash = traffic.hash();
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        e.retain(|x| !(x.hash == hash && x.context == context && x.traffic == *traffic));
        e.insert(0, Entry { hash, traffic: traffic.clone(), context: context.to_string(), decision });
        e.truncate(self.capacity);
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
        lru.put(&t(1), "c", d(1));
        lru.put(&t(2), "c", d(2));
        assert_eq!(lru.get(&t(1), "c"), Some(d(1)));
        lru.put(&t(3), "c", d(3));
        assert_eq!(lru.get(&t(2), "c"), None);
        assert_eq!(lru.get(&t(1), "c"), Some(d(1)));
        assert_eq!(lru.get(&t(1), "other"), None);
        assert_eq!(lru.len(), 2);
    }
}
