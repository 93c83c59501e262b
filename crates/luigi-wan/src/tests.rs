//! The model's own tests: scenario names, sampling bounds, per-link overrides.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::delay::DelayDist;
use crate::scenario::{DelayModel, Scenario};

#[test]
fn scenario_names_round_trip() {
    for sc in Scenario::ALL {
        assert_eq!(sc.to_string().parse::<Scenario>(), Ok(sc));
    }
    assert_eq!("same-region".parse(), Ok(Scenario::SameRegion));
    assert_eq!("geo".parse(), Ok(Scenario::Geo));
    let err = "Geo".parse::<Scenario>().unwrap_err().to_string();
    for name in ["none", "same-region", "same-continent", "cross-continent", "geo"] {
        assert!(err.contains(name), "{err}");
    }
    assert!(err.contains("\"Geo\""), "{err}");
    assert_eq!(Scenario::None.delay(), DelayDist::ZERO);
    assert_eq!(Scenario::SameRegion.delay(), DelayDist::new(2000, 500));
    assert_eq!(Scenario::SameContinent.delay(), DelayDist::new(30000, 5000));
    assert_eq!(Scenario::CrossContinent.delay(), DelayDist::new(80000, 10000));
    assert_eq!(Scenario::Geo.delay(), DelayDist::new(150000, 20000));
    assert!(Scenario::all_wan().iter().all(|s| !s.delay().is_zero()));
    // serde uses the same names
    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Cfg {
        wan: Scenario,
    }
    let text = toml::to_string(&Cfg { wan: Scenario::CrossContinent }).unwrap();
    assert_eq!(text.trim(), "wan = \"cross-continent\"");
    let back: Cfg = toml::from_str("wan = \"same-region\"").unwrap();
    assert_eq!(back.wan, Scenario::SameRegion);
}

#[test]
fn dist_sampling_bounds() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let d = DelayDist::new(2000, 500);
    let mut min = u64::MAX;
    let mut max = 0;
    for _ in 0..10_000 {
        let x = d.sample_us(&mut rng);
        assert!((1500..=2500).contains(&x));
        min = min.min(x);
        max = max.max(x);
    }
    assert!(min < 1550 && max > 2450, "{min} {max}");
    // Saturating at zero.
    let d = DelayDist::new(100, 500);
    assert_eq!(d.min_us(), 0);
    let zeros = (0..10_000).filter(|_| d.sample_us(&mut rng) == 0).count();
    // Draws below 0 (400 of the 1001 values in [-400, 600]) become 0.
    assert!((3500..4500).contains(&zeros), "{zeros}");
    assert!((0..1000).all(|_| d.sample_us(&mut rng) <= 600));
    assert_eq!(DelayDist::fixed(42).sample_us(&mut rng), 42);
    // Same seed, same draws.
    let mut a = ChaCha8Rng::seed_from_u64(1);
    let mut b = ChaCha8Rng::seed_from_u64(1);
    let d = Scenario::Geo.delay();
    assert!((0..100).all(|_| d.sample_us(&mut a) == d.sample_us(&mut b)));
}

#[test]
fn delay_model_overrides() {
    let mut m = DelayModel::from_scenario(Scenario::SameRegion);
    assert!(!m.is_zero());
    assert_eq!(m.dist("s0r0", "s1r0"), DelayDist::new(2000, 500));
    m.set_link("client", "s0r0", DelayDist::fixed(10));
    assert_eq!(m.dist("client", "s0r0"), DelayDist::fixed(10));
    assert_eq!(m.dist("s0r0", "client"), DelayDist::new(2000, 500));
    m.set_link_symmetric("a", "b", DelayDist::ZERO);
    assert_eq!(m.dist("b", "a"), DelayDist::ZERO);

    let z = DelayModel::default();
    assert!(z.is_zero());
    assert!(!z.clone().with_link("a", "b", DelayDist::new(0, 1)).is_zero());
    assert!(DelayModel::from(Scenario::None).with_link("a", "b", DelayDist::ZERO).is_zero());
}
