//! Byte strings (keys, values, procedure arguments) serialized as byte strings, not as
//! sequences of `u8`: serde's default for a `Vec<u8>` is a sequence, which postcard writes and
//! reads one byte per call (a visitor call and a buffer check per byte; a profile of a
//! saturated server found it in every record, message and snapshot). Postcard encodes a byte
//! string and a sequence of `u8` identically (a varint length, then the bytes), so the wire
//! and the logs stay byte-for-byte the same; self-describing formats (JSON) write a byte
//! string as the same array of numbers, and reading takes either form.
//!
//! Use with `#[serde(with = "crate::byte_strings::X")]` (from other crates:
//! `luigi_txn::byte_strings::X`), where X is `one` for a `Vec<u8>` field, `list` for a
//! `Vec<Vec<u8>>`, `pairs` for a `Vec<(Vec<u8>, Vec<u8>)>`, `outcome` for a
//! `Result<Vec<u8>, E>` and `writes` for a `Vec<(Vec<u8>, Option<Vec<u8>>)>`.

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, Serializer};
use std::fmt;

/// Reads a byte string in any of the forms a format gives it.
struct ByteStringVisitor;

impl<'de> Visitor<'de> for ByteStringVisitor {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a byte string")
    }

    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
        Ok(v.to_vec())
    }

    fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
        Ok(v)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        // A self-describing format's array of numbers; the hint is bounded as serde's own.
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
        while let Some(b) = seq.next_element()? {
            out.push(b);
        }
        Ok(out)
    }
}

/// One byte string (`Vec<u8>`).
pub mod one {
    use super::*;

    /// Writes `v` as a byte string.
    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    /// Reads a byte string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_byte_buf(ByteStringVisitor)
    }

    /// An element of a list, written as a byte string.
    pub(super) struct Item<'a>(pub(super) &'a [u8]);

    impl serde::Serialize for Item<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }

    /// An element of a list, read as a byte string.
    pub(super) struct Owned(pub(super) Vec<u8>);

    impl<'de> serde::Deserialize<'de> for Owned {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_byte_buf(ByteStringVisitor).map(Owned)
        }
    }
}

/// A list of byte strings (`Vec<Vec<u8>>`).
pub mod list {
    use super::one::{Item, Owned};
    use super::*;

    /// Writes `v` as a sequence of byte strings.
    pub fn serialize<S: Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for item in v {
            seq.serialize_element(&Item(item))?;
        }
        seq.end()
    }

    /// Reads a sequence of byte strings.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = Vec<Vec<u8>>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a sequence of byte strings")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Vec<u8>>, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(Owned(item)) = seq.next_element()? {
                    out.push(item);
                }
                Ok(out)
            }
        }
        d.deserialize_seq(ListVisitor)
    }
}

/// A list of pairs of byte strings (`Vec<(Vec<u8>, Vec<u8>)>`: a store's entries).
pub mod pairs {
    use super::*;

    /// What this module reads: pairs of byte strings.
    pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

    /// One pair, written as two byte strings (a tuple of two, as serde writes a pair).
    struct Pair<'a>(&'a [u8], &'a [u8]);

    impl serde::Serialize for Pair<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeTuple;
            let mut t = s.serialize_tuple(2)?;
            t.serialize_element(&one::Item(self.0))?;
            t.serialize_element(&one::Item(self.1))?;
            t.end()
        }
    }

    /// One pair, read as two byte strings.
    struct Owned(Vec<u8>, Vec<u8>);

    impl<'de> serde::Deserialize<'de> for Owned {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct PairVisitor;
            impl<'de> Visitor<'de> for PairVisitor {
                type Value = Owned;

                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a pair of byte strings")
                }

                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Owned, A::Error> {
                    let missing = || serde::de::Error::invalid_length(0, &"a pair of byte strings");
                    let one::Owned(a) = seq.next_element()?.ok_or_else(missing)?;
                    let one::Owned(b) = seq.next_element()?.ok_or_else(missing)?;
                    Ok(Owned(a, b))
                }
            }
            d.deserialize_tuple(2, PairVisitor)
        }
    }

    /// Writes `v` as a sequence of pairs of byte strings (owned or borrowed).
    pub fn serialize<S: Serializer, A: AsRef<[u8]>, B: AsRef<[u8]>>(v: &[(A, B)], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for (a, b) in v {
            seq.serialize_element(&Pair(a.as_ref(), b.as_ref()))?;
        }
        seq.end()
    }

    /// Reads a sequence of pairs of byte strings.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Entries, D::Error> {
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = Entries;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a sequence of pairs of byte strings")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(Owned(a, b)) = seq.next_element()? {
                    out.push((a, b));
                }
                Ok(out)
            }
        }
        d.deserialize_seq(ListVisitor)
    }
}

/// A procedure's outcome (`Result<Vec<u8>, E>`): its output written as a byte string, the
/// enum as serde writes a `Result` (variant `Ok` 0, `Err` 1).
pub mod outcome {
    use super::one::{Item, Owned};
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize)]
    #[serde(rename = "Result")]
    enum Written<'a, E> {
        Ok(Item<'a>),
        Err(&'a E),
    }

    #[derive(Deserialize)]
    #[serde(rename = "Result")]
    enum Read<E> {
        Ok(Owned),
        Err(E),
    }

    /// Writes `v` as serde writes a `Result`, its output as a byte string.
    pub fn serialize<S: Serializer, E: Serialize>(v: &Result<Vec<u8>, E>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Ok(bytes) => Written::Ok(Item(bytes)),
            Err(e) => Written::Err(e),
        }
        .serialize(s)
    }

    /// Reads what [`serialize`] wrote.
    pub fn deserialize<'de, D: Deserializer<'de>, E: Deserialize<'de>>(d: D) -> Result<Result<Vec<u8>, E>, D::Error> {
        Ok(match Read::deserialize(d)? {
            Read::Ok(Owned(bytes)) => Ok(bytes),
            Read::Err(e) => Err(e),
        })
    }
}

/// A list of writes (`Vec<(Vec<u8>, Option<Vec<u8>>)>`: a key and its new value, `None` for a
/// delete), each byte string written as one.
pub mod writes {
    use super::one::{Item, Owned};
    use super::*;
    use serde::{Deserialize, Serialize};

    /// What this module reads: keys with their new values.
    pub type Writes = Vec<(Vec<u8>, Option<Vec<u8>>)>;

    #[derive(Serialize)]
    struct Written<'a>(Item<'a>, Option<Item<'a>>);

    #[derive(Deserialize)]
    struct Read(Owned, Option<Owned>);

    /// Writes `v` as a sequence of (byte string, optional byte string) pairs.
    pub fn serialize<S: Serializer>(v: &[(Vec<u8>, Option<Vec<u8>>)], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for (key, value) in v {
            seq.serialize_element(&Written(Item(key), value.as_deref().map(Item)))?;
        }
        seq.end()
    }

    /// Reads what [`serialize`] wrote.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Writes, D::Error> {
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = Writes;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a sequence of writes")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Writes, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(Read(Owned(key), value)) = seq.next_element()? {
                    out.push((key, value.map(|Owned(v)| v)));
                }
                Ok(out)
            }
        }
        d.deserialize_seq(ListVisitor)
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Plain {
        one: Vec<u8>,
        list: Vec<Vec<u8>>,
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
        ok: Result<Vec<u8>, String>,
        err: Result<Vec<u8>, String>,
        writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct AsBytes {
        #[serde(with = "super::one")]
        one: Vec<u8>,
        #[serde(with = "super::list")]
        list: Vec<Vec<u8>>,
        #[serde(with = "super::pairs")]
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
        #[serde(with = "super::outcome")]
        ok: Result<Vec<u8>, String>,
        #[serde(with = "super::outcome")]
        err: Result<Vec<u8>, String>,
        #[serde(with = "super::writes")]
        writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    }

    fn both(one: Vec<u8>, list: Vec<Vec<u8>>) -> (Plain, AsBytes) {
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = list.iter().map(|k| (k.clone(), one.clone())).collect();
        let (ok, err) = (Ok(one.clone()), Err(format!("{} refused", one.len())));
        let writes: Vec<_> =
            list.iter().enumerate().map(|(i, k)| (k.clone(), (i % 2 == 0).then(|| one.clone()))).collect();
        let plain = Plain {
            one: one.clone(),
            list: list.clone(),
            pairs: pairs.clone(),
            ok: ok.clone(),
            err: err.clone(),
            writes: writes.clone(),
        };
        (plain, AsBytes { one, list, pairs, ok, err, writes })
    }

    #[test]
    fn postcard_bytes_are_those_of_a_sequence_of_u8_both_ways() {
        let long: Vec<u8> = (0..=255u8).cycle().take(300).collect();
        for (one, list) in [
            (vec![], vec![]),
            (vec![7], vec![vec![], vec![1, 2, 3]]),
            (long.clone(), vec![long.clone(), vec![0; 200], b"key".to_vec()]),
        ] {
            let (plain, bytes) = both(one, list);
            let wire = postcard::to_stdvec(&plain).unwrap();
            assert_eq!(postcard::to_stdvec(&bytes).unwrap(), wire, "the same encoding");
            let back: AsBytes = postcard::from_bytes(&wire).unwrap();
            assert_eq!((back.one, back.list, back.pairs), (plain.one.clone(), plain.list.clone(), plain.pairs.clone()));
            assert_eq!((back.ok, back.err, back.writes), (plain.ok.clone(), plain.err.clone(), plain.writes.clone()));
            let again: Plain = postcard::from_bytes(&postcard::to_stdvec(&bytes).unwrap()).unwrap();
            assert_eq!(again, plain);
        }
    }

    #[test]
    fn json_reads_and_writes_arrays_of_numbers_as_before() {
        let (plain, bytes) = both(vec![1, 255], vec![vec![3], vec![]]);
        let json = serde_json::to_string(&plain).unwrap();
        assert_eq!(serde_json::to_string(&bytes).unwrap(), json);
        let back: AsBytes = serde_json::from_str(&json).unwrap();
        assert_eq!(back, bytes);
    }

    #[test]
    fn a_truncated_byte_string_is_an_error_not_a_panic() {
        let wire = postcard::to_stdvec(&both(vec![1, 2, 3, 4], vec![vec![5, 6]]).1).unwrap();
        for cut in 0..wire.len() {
            assert!(postcard::from_bytes::<AsBytes>(&wire[..cut]).is_err(), "cut at {cut}");
        }
    }
}
