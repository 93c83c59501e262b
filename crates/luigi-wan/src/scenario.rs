//! Delay distributions, the benchmark scenarios and per-link overrides.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::delay::DelayDist;

/// Named WAN deployments (uniform one-way delay between every pair of nodes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// No added delay (`none`).
    #[default]
    None,
    /// Same region, 2000±500 µs (`same-region`).
    SameRegion,
    /// Same continent, 30000±5000 µs (`same-continent`).
    SameContinent,
    /// Cross continent, 80000±10000 µs (`cross-continent`).
    CrossContinent,
    /// Globally distributed, 150000±20000 µs (`geo`).
    Geo,
}

impl Scenario {
    /// Every scenario, in increasing order of delay.
    pub const ALL: [Scenario; 5] =
        [Scenario::None, Scenario::SameRegion, Scenario::SameContinent, Scenario::CrossContinent, Scenario::Geo];

    /// Every scenario that adds a delay.
    pub fn all_wan() -> [Scenario; 4] {
        [Scenario::SameRegion, Scenario::SameContinent, Scenario::CrossContinent, Scenario::Geo]
    }

    /// The command-line / config name, e.g. `"same-region"`.
    pub const fn name(&self) -> &'static str {
        match self {
            Scenario::None => "none",
            Scenario::SameRegion => "same-region",
            Scenario::SameContinent => "same-continent",
            Scenario::CrossContinent => "cross-continent",
            Scenario::Geo => "geo",
        }
    }

    /// The one-way delay distribution of this scenario.
    pub const fn delay(&self) -> DelayDist {
        match self {
            Scenario::None => DelayDist::new(0, 0),
            Scenario::SameRegion => DelayDist::new(2_000, 500),
            Scenario::SameContinent => DelayDist::new(30_000, 5_000),
            Scenario::CrossContinent => DelayDist::new(80_000, 10_000),
            Scenario::Geo => DelayDist::new(150_000, 20_000),
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error returned when parsing an unknown [`Scenario`] name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown WAN scenario {0:?}; valid names are: none, same-region, same-continent, cross-continent, geo")]
pub struct ParseScenarioError(pub String);

impl FromStr for Scenario {
    type Err = ParseScenarioError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scenario::ALL.into_iter().find(|sc| sc.name() == s).ok_or_else(|| ParseScenarioError(s.to_owned()))
    }
}

/// Delay for every directed link between named nodes (e.g. `"s0r0"`,
/// `"client"`): a default distribution plus per-link overrides.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DelayModel {
    /// Distribution used for links without an override.
    pub default: DelayDist,
    /// Overrides keyed by `(from_node, to_node)`; directional.
    pub overrides: HashMap<(String, String), DelayDist>,
}

impl DelayModel {
    /// Same distribution on every link.
    pub fn uniform(dist: DelayDist) -> Self {
        DelayModel { default: dist, overrides: HashMap::new() }
    }

    /// Uniform model of a named scenario.
    pub fn from_scenario(scenario: Scenario) -> Self {
        Self::uniform(scenario.delay())
    }

    /// Overrides the directed link `from -> to`.
    pub fn set_link(&mut self, from: impl Into<String>, to: impl Into<String>, dist: DelayDist) {
        self.overrides.insert((from.into(), to.into()), dist);
    }

    /// Overrides both directions between `a` and `b`.
    pub fn set_link_symmetric(&mut self, a: &str, b: &str, dist: DelayDist) {
        self.set_link(a, b, dist);
        self.set_link(b, a, dist);
    }

    /// Builder form of [`set_link`](Self::set_link).
    pub fn with_link(mut self, from: impl Into<String>, to: impl Into<String>, dist: DelayDist) -> Self {
        self.set_link(from, to, dist);
        self
    }

    /// Distribution of the directed link `from -> to`.
    pub fn dist(&self, from: &str, to: &str) -> DelayDist {
        if self.overrides.is_empty() {
            return self.default;
        }
        self.overrides.get(&(from.to_owned(), to.to_owned())).copied().unwrap_or(self.default)
    }

    /// True if no link has any delay.
    pub fn is_zero(&self) -> bool {
        self.default.is_zero() && self.overrides.values().all(DelayDist::is_zero)
    }
}

impl From<Scenario> for DelayModel {
    fn from(scenario: Scenario) -> Self {
        Self::from_scenario(scenario)
    }
}
