//! Commits counted per stored procedure (the transaction's kind: `NewOrder`, `Payment`, `kv`,
//! ...), for the servers' `luigi_procedure_commits_total{procedure}`. One copy for every
//! protocol's leader. Bounded by the procedure registry: a leader executes only procedures it
//! has (an unknown one is refused at admission), so there is one entry per registered
//! procedure at most.

use std::collections::BTreeMap;

/// Commits per procedure name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcedureCommits {
    by_name: BTreeMap<String, u64>,
}

impl ProcedureCommits {
    /// Counts one commit of `procedure`.
    pub fn committed(&mut self, procedure: &str) {
        match self.by_name.get_mut(procedure) {
            Some(n) => *n = n.saturating_add(1),
            None => {
                self.by_name.insert(procedure.to_string(), 1);
            }
        }
    }

    /// Adds `other`'s counts to these (saturating).
    pub fn add(&mut self, other: &ProcedureCommits) {
        for (name, n) in &other.by_name {
            let have = self.by_name.entry(name.clone()).or_insert(0);
            *have = have.saturating_add(*n);
        }
    }

    /// The commits of `procedure` (0 if none).
    pub fn get(&self, procedure: &str) -> u64 {
        self.by_name.get(procedure).copied().unwrap_or(0)
    }

    /// Every procedure with its commits, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.by_name.iter().map(|(name, n)| (name.as_str(), *n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_are_counted_per_procedure_and_added_saturating() {
        let mut a = ProcedureCommits::default();
        a.committed("NewOrder");
        a.committed("NewOrder");
        a.committed("Payment");
        let mut b = ProcedureCommits::default();
        b.committed("Payment");
        b.by_name.insert("Delivery".into(), u64::MAX);
        a.add(&b);
        a.add(&b);
        assert_eq!((a.get("NewOrder"), a.get("Payment"), a.get("Delivery"), a.get("kv")), (2, 3, u64::MAX, 0));
        let names: Vec<&str> = a.iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["Delivery", "NewOrder", "Payment"]);
    }
}
