//! The packed layout of a character vector in a segment's data area:
//!
//! ```text
//! offsets: (n + 1) x u64   byte offsets of each string in `bytes` (little-endian)
//! marks:   n x u8          0 = NA, else 1 + R's cetype (native, UTF-8, latin1, bytes)
//! padding  to 8 bytes
//! bytes:   the strings, back to back, without terminators
//! ```
//! Strings are read one at a time ([`StringTable::get`]), so touching one
//! element of a view never builds the others. [`StringTable::parse`] checks the
//! whole table once (offsets monotonic and inside the data) before any string is
//! read, so corrupt bytes are an error, never a panic or an out-of-bounds read.

use crate::error::{Error, Result};

/// R's string encodings (`cetype_t`) as stored in the marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Encoding {
    Native = 0,
    Utf8 = 1,
    Latin1 = 2,
    Bytes = 3,
}

impl Encoding {
    pub fn from_cetype(ce: i32) -> Encoding {
        match ce {
            1 => Encoding::Utf8,
            2 => Encoding::Latin1,
            3 => Encoding::Bytes,
            _ => Encoding::Native,
        }
    }
    fn from_mark(m: u8) -> Option<Option<Encoding>> {
        Some(match m {
            0 => None,
            1 => Some(Encoding::Native),
            2 => Some(Encoding::Utf8),
            3 => Some(Encoding::Latin1),
            4 => Some(Encoding::Bytes),
            _ => return None,
        })
    }
}

fn pad8(n: u64) -> u64 {
    (8 - n % 8) % 8
}

/// Size of the data area for `n` strings with `total` bytes of text.
pub fn packed_len(n: u64, total: u64) -> Option<u64> {
    let head = n.checked_add(1)?.checked_mul(8)?.checked_add(n)?;
    head.checked_add(pad8(head))?.checked_add(total)
}

/// Write `items` (None = NA) into `out`, which must be exactly
/// `packed_len(items.len(), total bytes)` long.
pub fn pack<'a>(items: impl ExactSizeIterator<Item = Option<(&'a [u8], Encoding)>>, out: &mut [u8]) {
    let n = items.len();
    let marks_at = (n + 1) * 8;
    let head = marks_at + n;
    let bytes_at = head + pad8(head as u64) as usize;
    let mut pos = 0usize;
    out[0..8].copy_from_slice(&0u64.to_le_bytes());
    for (i, item) in items.enumerate() {
        let mark = match item {
            None => 0,
            Some((s, enc)) => {
                out[bytes_at + pos..bytes_at + pos + s.len()].copy_from_slice(s);
                pos += s.len();
                1 + enc as u8
            }
        };
        out[marks_at + i] = mark;
        out[(i + 1) * 8..(i + 2) * 8].copy_from_slice(&(pos as u64).to_le_bytes());
    }
    for b in &mut out[head..bytes_at] {
        *b = 0;
    }
}

/// A validated view of a packed character vector.
#[derive(Clone, Copy, Debug)]
pub struct StringTable<'a> {
    n: usize,
    offsets: &'a [u8],
    marks: &'a [u8],
    bytes: &'a [u8],
}

impl<'a> StringTable<'a> {
    pub fn parse(data: &'a [u8], n: u64, name: &str) -> Result<StringTable<'a>> {
        let bad = |why: &str| Error::Invalid { name: name.to_string(), why: why.to_string() };
        let n_us = usize::try_from(n).map_err(|_| bad("too many strings"))?;
        let head = n.checked_add(1).and_then(|m| m.checked_mul(8)).and_then(|m| m.checked_add(n));
        let bytes_at = head.and_then(|h| h.checked_add(pad8(h))).ok_or_else(|| bad("string table overflows"))?;
        if bytes_at > data.len() as u64 {
            return Err(bad("its string table is truncated"));
        }
        let bytes_at = bytes_at as usize;
        let offsets = &data[..(n_us + 1) * 8];
        let marks = &data[(n_us + 1) * 8..(n_us + 1) * 8 + n_us];
        let bytes = &data[bytes_at..];
        let mut prev = 0u64;
        for i in 0..=n_us {
            let o = u64::from_le_bytes(offsets[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
            if (i == 0 && o != 0) || o < prev || o > bytes.len() as u64 {
                return Err(bad("its string offsets are out of order or out of range"));
            }
            prev = o;
        }
        if prev != bytes.len() as u64 {
            return Err(bad("its string bytes do not match the offsets"));
        }
        if marks.iter().any(|&m| Encoding::from_mark(m).is_none()) {
            return Err(bad("it has an unknown string encoding mark"));
        }
        Ok(StringTable { n: n_us, offsets, marks, bytes })
    }

    /// A table already validated by [`StringTable::parse`] (the segment checks its
    /// table once when it is created or opened).
    pub fn trusted(data: &'a [u8], n: u64) -> StringTable<'a> {
        let n_us = n as usize;
        let head = (n_us + 1) * 8 + n_us;
        let bytes_at = head + pad8(head as u64) as usize;
        StringTable {
            n: n_us,
            offsets: &data[..(n_us + 1) * 8],
            marks: &data[(n_us + 1) * 8..head],
            bytes: &data[bytes_at..],
        }
    }

    pub fn len(&self) -> usize {
        self.n
    }
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn offset(&self, i: usize) -> usize {
        u64::from_le_bytes(self.offsets[i * 8..i * 8 + 8].try_into().expect("8 bytes")) as usize
    }

    /// String `i` (None = NA). `i` must be < len().
    pub fn get(&self, i: usize) -> Option<(&'a [u8], Encoding)> {
        let enc = Encoding::from_mark(self.marks[i]).expect("validated in parse")?;
        Some((&self.bytes[self.offset(i)..self.offset(i + 1)], enc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn enc() -> impl Strategy<Value = Encoding> {
        prop_oneof![Just(Encoding::Native), Just(Encoding::Utf8), Just(Encoding::Latin1), Just(Encoding::Bytes)]
    }

    proptest! {
        #[test]
        fn strings_round_trip(items in proptest::collection::vec(proptest::option::of((proptest::collection::vec(1u8..=255, 0..20), enc())), 0..50)) {
            let total: usize = items.iter().flatten().map(|(s, _)| s.len()).sum();
            let mut buf = vec![0u8; packed_len(items.len() as u64, total as u64).unwrap() as usize];
            pack(items.iter().map(|o| o.as_ref().map(|(s, e)| (s.as_slice(), *e))), &mut buf);
            let t = StringTable::parse(&buf, items.len() as u64, "t").unwrap();
            prop_assert_eq!(t.len(), items.len());
            for (i, item) in items.iter().enumerate() {
                prop_assert_eq!(t.get(i), item.as_ref().map(|(s, e)| (s.as_slice(), *e)));
            }
        }

        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200), n in 0u64..40) {
            if let Ok(t) = StringTable::parse(&data, n, "t") {
                for i in 0..t.len() { let _ = t.get(i); }
            }
        }

        #[test]
        fn huge_counts_are_refused(n in (u64::MAX / 16)..u64::MAX) {
            prop_assert!(StringTable::parse(&[0u8; 64], n, "t").is_err());
        }
    }

    #[test]
    fn empty_and_na() {
        let items: Vec<Option<(&[u8], Encoding)>> =
            vec![None, Some((b"", Encoding::Native)), Some((b"ok", Encoding::Utf8))];
        let mut buf = vec![0u8; packed_len(3, 2).unwrap() as usize];
        pack(items.clone().into_iter(), &mut buf);
        let t = StringTable::parse(&buf, 3, "t").unwrap();
        assert_eq!(t.get(0), None);
        assert_eq!(t.get(1), Some((&b""[..], Encoding::Native)));
        assert_eq!(t.get(2), Some((&b"ok"[..], Encoding::Utf8)));
        let mut bad = buf.clone();
        bad[8] = 200; // first end offset beyond the bytes
        assert!(StringTable::parse(&bad, 3, "t").is_err());
    }
}
