//! Which transfers with an unknown outcome took effect: an exact subset search over the
//! balances.

/// Outcome of the search for a subset of unknown transfers explaining the balances.
pub enum Subset {
    /// These transfers (indexes) took effect.
    Found(Vec<usize>),
    /// No subset explains the balances.
    Impossible,
    /// The search ran out of budget.
    GaveUp,
}

/// The search's state: which transfers are decided, and what is left to explain.
struct Search<'a> {
    transfers: &'a [(usize, usize, i64)],
    /// Transfers touching each account, largest amounts first.
    touching: Vec<Vec<usize>>,
    decided: Vec<Option<bool>>,
    /// What the undecided transfers must still add to each account.
    left: Vec<i64>,
    nodes: u64,
    budget: u64,
}

impl Search<'_> {
    /// The signed effect of transfer `t` on account `a`.
    fn effect(&self, t: usize, a: usize) -> i64 {
        let (from, _, amount) = self.transfers[t];
        if from == a {
            -amount
        } else {
            amount
        }
    }

    fn set(&mut self, t: usize, applied: bool) {
        self.decided[t] = Some(applied);
        if applied {
            let (from, to, amount) = self.transfers[t];
            self.left[from] += amount;
            self.left[to] -= amount;
        }
    }

    fn unset(&mut self, t: usize) {
        if self.decided[t].take() == Some(true) {
            let (from, to, amount) = self.transfers[t];
            self.left[from] -= amount;
            self.left[to] += amount;
        }
    }

    /// Some(true): found (in `decided`); Some(false): no solution here; None: out of budget.
    fn go(&mut self) -> Option<bool> {
        self.nodes += 1;
        if self.nodes > self.budget {
            return None;
        }
        let mut best: Option<(usize, Vec<usize>)> = None;
        for a in 0..self.left.len() {
            let free: Vec<usize> = self.touching[a].iter().copied().filter(|t| self.decided[*t].is_none()).collect();
            let lo: i64 = free.iter().map(|t| self.effect(*t, a).min(0)).sum();
            let hi: i64 = free.iter().map(|t| self.effect(*t, a).max(0)).sum();
            if self.left[a] < lo || self.left[a] > hi {
                return Some(false);
            }
            if !free.is_empty() && best.as_ref().is_none_or(|(_, b)| free.len() < b.len()) {
                best = Some((a, free));
            }
        }
        match best {
            None => Some(true), // every transfer decided, every account's difference met
            Some((a, free)) => self.complete(a, &free),
        }
    }

    /// Decides `free` (the undecided transfers touching `a`) so that `a`'s difference is met
    /// exactly, trying each way in turn with the other accounts.
    fn complete(&mut self, a: usize, free: &[usize]) -> Option<bool> {
        self.nodes += 1;
        if self.nodes > self.budget {
            return None;
        }
        let Some((&t, rest)) = free.split_first() else {
            return if self.left[a] == 0 { self.go() } else { Some(false) };
        };
        let lo: i64 = rest.iter().map(|t| self.effect(*t, a).min(0)).sum();
        let hi: i64 = rest.iter().map(|t| self.effect(*t, a).max(0)).sum();
        for applied in [true, false] {
            let need = self.left[a] - if applied { self.effect(t, a) } else { 0 };
            if need < lo || need > hi {
                continue;
            }
            self.set(t, applied);
            let found = self.complete(a, rest);
            if found != Some(false) {
                return found; // found (kept decided) or out of budget
            }
            self.unset(t);
        }
        Some(false)
    }
}

/// Looks for a subset of `transfers` (as (from, to, amount) over account indexes) whose net
/// effect is exactly `diff`, visiting at most `budget` search nodes. Account by account, the
/// most constrained first: the undecided transfers touching it must make up exactly what is
/// left of its difference (few subsets do: amounts are distinct), then the next account.
pub fn find_subset(transfers: &[(usize, usize, i64)], diff: &[i64], budget: u64) -> Subset {
    let mut touching = vec![Vec::new(); diff.len()];
    for (t, (from, to, _)) in transfers.iter().enumerate() {
        touching[*from].push(t);
        touching[*to].push(t);
    }
    for list in &mut touching {
        list.sort_by_key(|t| -transfers[*t].2);
    }
    let mut search =
        Search { transfers, touching, decided: vec![None; transfers.len()], left: diff.to_vec(), nodes: 0, budget };
    match search.go() {
        Some(true) => Subset::Found((0..transfers.len()).filter(|t| search.decided[*t] == Some(true)).collect()),
        Some(false) => Subset::Impossible,
        None => Subset::GaveUp,
    }
}
