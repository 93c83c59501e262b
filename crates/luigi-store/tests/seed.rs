//! A process that seeds its hashing first keys every table with that seed (its own process:
//! the unit tests run unseeded, with the default seed).

use std::collections::HashMap;
use std::hash::BuildHasher;

use luigi_store::hashing::{self, HashKeys, KeyedState, DEFAULT_SEED};

static DEFAULT_KEYS: HashKeys = HashKeys::new(DEFAULT_SEED);

#[test]
fn a_random_seed_taken_first_keys_the_tables_of_the_process() {
    assert!(hashing::seed_randomly(), "nothing hashed before");
    assert!(!hashing::seed(7), "one seed per process");
    let key: &[u8] = b"the same key";
    let here = KeyedState::default().hash_one(key);
    assert_ne!(here, KeyedState::with_keys(&DEFAULT_KEYS).hash_one(key), "not the default seed's hash");
    assert_eq!(here, KeyedState::default().hash_one(key), "one key for the whole process");
    let mut table: HashMap<&[u8], u32, KeyedState> = HashMap::default();
    table.insert(key, 1);
    assert_eq!(table.get(key), Some(&1));
}
