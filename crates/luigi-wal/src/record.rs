//! Record encoding: `len: u32 LE | crc: u32 LE | index: u64 LE | term: u64 LE | data`.

/// Bytes of the `len` and `crc` fields in front of the payload.
pub(crate) const FRAME_BYTES: usize = 8;
/// Bytes of the `index` and `term` fields at the start of the payload.
pub(crate) const ENTRY_HEADER_BYTES: usize = 16;
/// Size of a record minus the size of its data: `len`, `crc`, `index`, `term` (24 bytes).
pub const RECORD_OVERHEAD_BYTES: usize = FRAME_BYTES + ENTRY_HEADER_BYTES;
/// Largest data size of one entry (the payload length must fit the u32 `len` field).
pub const DATA_BYTES_MAX: usize = u32::MAX as usize - ENTRY_HEADER_BYTES;

/// Appends the record for one entry to `buf`. `data.len()` must be at most [`DATA_BYTES_MAX`].
pub(crate) fn encode(buf: &mut Vec<u8>, index: u64, term: u64, data: &[u8]) {
    let len = (ENTRY_HEADER_BYTES + data.len()) as u32;
    let start = buf.len();
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&index.to_le_bytes());
    buf.extend_from_slice(&term.to_le_bytes());
    buf.extend_from_slice(data);
    let crc = crc32fast::hash(&buf[start + FRAME_BYTES..]);
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// A record that passed its length and CRC checks.
#[derive(Debug)]
pub(crate) struct Record<'a> {
    pub index: u64,
    pub term: u64,
    pub data: &'a [u8],
    /// Total bytes of the record, frame included.
    pub record_bytes: usize,
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    let mut b = [0; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(b)
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    let mut b = [0; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Parses the record starting at `buf[at..]` (which must not be empty). `Err` says why the bytes
/// there are not a valid record.
pub(crate) fn parse(buf: &[u8], at: usize) -> Result<Record<'_>, String> {
    let rest = buf.len() - at;
    if rest < FRAME_BYTES {
        return Err(format!("partial record header ({rest} of {FRAME_BYTES} bytes)"));
    }
    let len = u32_at(buf, at) as usize;
    if len < ENTRY_HEADER_BYTES {
        return Err(format!("record length {len} is below the {ENTRY_HEADER_BYTES}-byte entry header"));
    }
    if len > rest - FRAME_BYTES {
        return Err(format!("record length {len} runs past the end of the file ({} bytes left)", rest - FRAME_BYTES));
    }
    let payload = &buf[at + FRAME_BYTES..at + FRAME_BYTES + len];
    let stored = u32_at(buf, at + 4);
    let actual = crc32fast::hash(payload);
    if stored != actual {
        return Err(format!("CRC mismatch (stored {stored:#010x}, computed {actual:#010x})"));
    }
    Ok(Record {
        index: u64_at(payload, 0),
        term: u64_at(payload, 8),
        data: &payload[ENTRY_HEADER_BYTES..],
        record_bytes: FRAME_BYTES + len,
    })
}

/// Looks for a valid record starting anywhere in `buf[from..]` whose index is at least
/// `expected` and no further from it than the number of records that could fit. Returns its
/// offset and index. Used to tell a torn tail (nothing valid after the bad spot) from corruption
/// in the middle of the log.
pub(crate) fn find_valid_after(buf: &[u8], from: usize, expected: u64) -> Option<(usize, u64)> {
    if buf.len() < RECORD_OVERHEAD_BYTES || from > buf.len() - RECORD_OVERHEAD_BYTES {
        return None;
    }
    let records_max = ((buf.len() - from) / RECORD_OVERHEAD_BYTES) as u64 + 1;
    for at in from..=buf.len() - RECORD_OVERHEAD_BYTES {
        let len = u32_at(buf, at) as usize;
        if len < ENTRY_HEADER_BYTES || len > buf.len() - at - FRAME_BYTES {
            continue;
        }
        let index = u64_at(buf, at + FRAME_BYTES);
        if index < expected || index - expected > records_max {
            continue;
        }
        if let Ok(rec) = parse(buf, at) {
            return Some((at, rec.index));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_parse_round_trip() {
        let mut buf = Vec::new();
        encode(&mut buf, 7, 3, b"hello");
        encode(&mut buf, 8, 3, b"");
        let a = parse(&buf, 0).unwrap();
        assert_eq!((a.index, a.term, a.data, a.record_bytes), (7, 3, &b"hello"[..], 29));
        let b = parse(&buf, 29).unwrap();
        assert_eq!((b.index, b.term, b.data.len(), b.record_bytes), (8, 3, 0, 24));
        assert_eq!(find_valid_after(&buf, 1, 7), Some((29, 8)));
        assert_eq!(find_valid_after(&buf, 30, 7), None);
    }

    proptest::proptest! {
        /// Issue 26: whatever a segment holds (a torn tail, a flipped bit, another file),
        /// parsing gives a record or says what is wrong, and the search for the next valid
        /// record stays within the buffer.
        #[test]
        fn any_bytes_parse_to_a_record_or_an_error(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
            at in 0usize..300,
            expected in proptest::prelude::any::<u64>(),
        ) {
            if at < bytes.len() {
                match parse(&bytes, at) {
                    Ok(r) => proptest::prop_assert!(at + r.record_bytes <= bytes.len()),
                    Err(why) => proptest::prop_assert!(!why.is_empty()),
                }
            }
            if let Some((found, _)) = find_valid_after(&bytes, at, expected) {
                proptest::prop_assert!(found < bytes.len());
            }
        }

        #[test]
        fn a_damaged_record_is_refused(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), flip in 0usize..96, bit in 0u8..8) {
            let mut buf = Vec::new();
            encode(&mut buf, 5, 2, &data);
            let flip = flip % buf.len();
            buf[flip] ^= 1 << bit;
            if let Ok(r) = parse(&buf, 0) {
                // Only a change the record cannot see: none, since its CRC covers the rest.
                proptest::prop_assert!(false, "a flipped bit at {} parsed as {:?}", flip, (r.index, r.term));
            }
        }
    }

    #[test]
    fn bad_records_are_reported_not_panicked() {
        let mut buf = Vec::new();
        encode(&mut buf, 1, 1, b"abc");
        assert!(parse(&buf[..5], 0).unwrap_err().contains("partial record header"));
        assert!(parse(&buf[..20], 0).unwrap_err().contains("runs past"));
        let mut bad = buf.clone();
        bad[0] = 3;
        assert!(parse(&bad, 0).unwrap_err().contains("below"));
        let mut bad = buf.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(parse(&bad, 0).unwrap_err().contains("CRC mismatch"));
    }
}
