//! The store's hash map, split into chunks shared copy-on-write, so that a copy of the whole
//! map costs one pointer per chunk ([`Chunks::fork`]): a replica's snapshot job serializes a
//! fork off the event loop while the replica goes on writing (DESIGN.md rule 11).
//!
//! A write to a chunk that a fork still shares copies that chunk first (`Arc::make_mut`), so
//! between two snapshots each chunk is copied at most once, in pieces of a
//! [`CHUNKS`]-th of the store: no pause grows with the store as a copy of the whole would.
//! While no fork is alive nothing is shared and a write copies nothing.
//!
//! A key's chunk comes from a hash of its own domain ([`KeyedState::chunk_of`]), not from
//! bits of the table hash: the keys of one chunk then still spread over all of its table's
//! buckets and tags.

use std::collections::HashMap;
use std::sync::Arc;

use crate::hashing::KeyedState;
use crate::map_key::MapKey;

/// How many chunks a map has: a copy on a write after a fork copies a 1024th of the store
/// (a 300 MB TPC-C warehouse: about 300 KB), and a fork clones 1024 pointers.
pub const CHUNKS: usize = 1024;

type Chunk<V> = HashMap<MapKey, V, KeyedState>;

/// A hash map from keys to `V` in [`CHUNKS`] chunks, each shared copy-on-write.
#[derive(Clone, Debug)]
pub(crate) struct Chunks<V> {
    state: KeyedState,
    chunks: Box<[Arc<Chunk<V>>]>,
    len: usize,
}

impl<V: Clone> Default for Chunks<V> {
    fn default() -> Self {
        let state = KeyedState::default();
        // One empty chunk shared by all: the first write to each makes its own.
        let empty = Arc::new(Chunk::with_hasher(state));
        Chunks { state, chunks: vec![empty; CHUNKS].into_boxed_slice(), len: 0 }
    }
}

impl<V: Clone> Chunks<V> {
    fn chunk_of(&self, key: &[u8]) -> usize {
        self.state.chunk_of(key, CHUNKS)
    }

    /// The entry of `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Option<&V> {
        self.chunks[self.chunk_of(key)].get(key)
    }

    /// The entry of `key`, to change: its chunk is copied first if a fork shares it.
    pub(crate) fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        let chunk = &mut self.chunks[self.state.chunk_of(key, CHUNKS)];
        // One probe when nothing shares the chunk; a shared one is copied only for a key it holds.
        if Arc::get_mut(chunk).is_none() && !chunk.contains_key(key) {
            return None;
        }
        Arc::make_mut(chunk).get_mut(key)
    }

    /// Inserts `key` (absent: the store checks first).
    pub(crate) fn insert(&mut self, key: &[u8], value: V) {
        let chunk = &mut self.chunks[self.state.chunk_of(key, CHUNKS)];
        if Arc::make_mut(chunk).insert(MapKey::from(key), value).is_none() {
            self.len += 1;
        }
    }

    /// Removes `key`, returning its entry.
    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<V> {
        let chunk = &mut self.chunks[self.state.chunk_of(key, CHUNKS)];
        if Arc::get_mut(chunk).is_none() && !chunk.contains_key(key) {
            return None;
        }
        let removed = Arc::make_mut(chunk).remove(key);
        self.len -= usize::from(removed.is_some());
        removed
    }

    /// Every entry, in no order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> {
        self.chunks.iter().flat_map(|c| c.iter().map(|(k, v)| (k.as_bytes(), v)))
    }

    /// Number of entries (deleted keys kept for their versions included).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// A copy of the map as it is now, sharing every chunk: O([`CHUNKS`]).
    pub(crate) fn fork(&self) -> Chunks<V> {
        self.clone()
    }

    /// How many chunks holding entries this map shares with a fork (or a clone) still alive:
    /// a write to one of them copies it first.
    pub(crate) fn shared_chunks(&self) -> usize {
        self.chunks.iter().filter(|c| !c.is_empty() && Arc::strong_count(c) > 1).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> Vec<u8> {
        i.to_be_bytes().to_vec()
    }

    #[test]
    fn a_fork_keeps_the_map_as_it_was_while_the_original_changes() {
        let mut map = Chunks::<u32>::default();
        for i in 0..5000 {
            map.insert(&key(i), i);
        }
        let fork = map.fork();
        for i in 0..5000 {
            *map.get_mut(&key(i)).unwrap() += 1;
        }
        map.remove(&key(7));
        map.insert(&key(9000), 9000);
        assert_eq!(fork.len(), 5000);
        assert!((0..5000).all(|i| fork.get(&key(i)) == Some(&i)), "the fork is unchanged");
        assert_eq!(fork.get(&key(9000)), None);
        assert_eq!(map.len(), 5000);
        assert_eq!(map.get(&key(7)), None);
        assert!((8..5000).all(|i| map.get(&key(i)) == Some(&(i + 1))));
        let mut seen: Vec<u32> = fork.iter().map(|(_, v)| *v).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..5000).collect::<Vec<_>>());
    }

    #[test]
    fn only_chunks_written_after_a_fork_are_copied_and_none_once_it_is_gone() {
        let mut map = Chunks::<u32>::default();
        for i in 0..(4 * CHUNKS as u32) {
            map.insert(&key(i), i);
        }
        assert_eq!(map.shared_chunks(), 0, "nothing shared without a fork");
        let held = map.chunks.iter().filter(|c| !c.is_empty()).count();
        let fork = map.fork();
        assert_eq!(map.shared_chunks(), held);
        *map.get_mut(&key(1)).unwrap() = 0;
        assert_eq!(map.get_mut(&key(u32::MAX)), None, "a miss copies nothing");
        assert_eq!(map.remove(&key(u32::MAX)), None);
        assert_eq!(map.shared_chunks(), held - 1, "one write copied one chunk");
        drop(fork);
        assert_eq!(map.shared_chunks(), 0);
        let before: Vec<*const Chunk<u32>> = map.chunks.iter().map(Arc::as_ptr).collect();
        *map.get_mut(&key(2)).unwrap() = 0;
        let after: Vec<*const Chunk<u32>> = map.chunks.iter().map(Arc::as_ptr).collect();
        assert_eq!(before, after, "a write copies nothing once no fork shares it");
    }

    #[test]
    fn keys_spread_over_the_chunks() {
        let mut map = Chunks::<u32>::default();
        for i in 0..(16 * CHUNKS as u32) {
            map.insert(&key(i), i);
        }
        let fullest = map.chunks.iter().map(|c| c.len()).max().unwrap();
        assert!(fullest < 64, "the fullest chunk holds {fullest} keys of 16 per chunk on average");
        assert!(map.chunks.iter().all(|c| !c.is_empty()));
    }
}
