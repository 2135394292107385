//! Content keys: a key computed from what a vector holds (`share(x, key =
//! TRUE)`), so that processes that never talked to each other find the one
//! copy of the same data.
//!
//! The key is a 128-bit hash of the vector's type, length, serialized
//! attributes and data, as text. It is not a cryptographic hash: it only has
//! to keep different contents apart by accident. Whoever takes a segment for
//! a key compares the contents byte by byte first (sharing) or hashes the
//! segment again (retrieving), and the index it is found through is closed to
//! other users; a process of the same user that forges an entry can do no more
//! than that user could anyway.

use crate::header::Kind;

/// The prefix of every content key (no key given by hand may start with it).
pub const CONTENT_PREFIX: &str = "content:";

/// Bytes hashed per step: four lanes of eight.
const BLOCK: usize = 32;
const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;

/// The content key of a vector of `kind` with `length` elements, its
/// serialized attributes and its data bytes (for a character vector, its
/// packed strings: see [`crate::strings`]).
pub fn content_key(kind: Kind, length: u64, attributes: &[u8], data: &[u8]) -> String {
    let mut h = Hasher::new();
    h.write(&[kind as u8]);
    h.write(&length.to_le_bytes());
    h.write(&(attributes.len() as u64).to_le_bytes());
    h.write(attributes);
    h.write(data);
    let (a, b) = h.finish();
    format!("{CONTENT_PREFIX}{a:016x}{b:016x}")
}

/// Is `key` a content key (one this module makes)?
pub fn is_content_key(key: &str) -> bool {
    key.strip_prefix(CONTENT_PREFIX).is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|c| c.is_ascii_hexdigit()))
}

/// Four multiply-rotate lanes over blocks of 32 bytes, then a mix of the
/// lanes and the length into two 64-bit words. The bytes are hashed as one
/// stream whatever pieces `write` is given.
struct Hasher {
    lanes: [u64; 4],
    pending: [u8; BLOCK],
    filled: usize,
    total: u64,
}

impl Hasher {
    fn new() -> Hasher {
        Hasher { lanes: [P1, P2, P3, P1 ^ P2], pending: [0; BLOCK], filled: 0, total: 0 }
    }

    fn write(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.filled > 0 {
            let n = (BLOCK - self.filled).min(bytes.len());
            self.pending[self.filled..self.filled + n].copy_from_slice(&bytes[..n]);
            self.filled += n;
            bytes = &bytes[n..];
            if self.filled < BLOCK {
                return;
            }
            let block = self.pending;
            self.block(&block);
            self.filled = 0;
        }
        let mut blocks = bytes.chunks_exact(BLOCK);
        for block in &mut blocks {
            self.block(block);
        }
        let rest = blocks.remainder();
        self.pending[..rest.len()].copy_from_slice(rest);
        self.filled = rest.len();
    }

    fn block(&mut self, block: &[u8]) {
        for (lane, word) in self.lanes.iter_mut().zip(block.chunks_exact(8)) {
            let w = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            *lane = (*lane ^ w.wrapping_mul(P2)).rotate_left(31).wrapping_mul(P1);
        }
    }

    fn finish(mut self) -> (u64, u64) {
        // (the tail, padded with zeros, and the length: "ab" and "ab\0" differ)
        if self.filled > 0 {
            let mut block = [0u8; BLOCK];
            block[..self.filled].copy_from_slice(&self.pending[..self.filled]);
            self.block(&block);
        }
        let [a, b, c, d] = self.lanes;
        let first = mix(a.rotate_left(1) ^ b.rotate_left(7) ^ c.rotate_left(12) ^ d.rotate_left(18) ^ self.total);
        let second = mix(a.wrapping_add(P3) ^ b.rotate_left(17) ^ c.rotate_left(29) ^ d.rotate_left(43) ^ !self.total);
        (first, mix(second ^ first))
    }
}

/// A 64-bit finalizer: every input bit changes about half the output bits.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 33;
    x = x.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    x ^ (x >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(data: &[u8]) -> String {
        content_key(Kind::Raw, data.len() as u64, &[], data)
    }

    proptest! {
        #[test]
        fn pieces_do_not_change_the_key(data in proptest::collection::vec(any::<u8>(), 0..300), cut in 0usize..300) {
            let cut = cut.min(data.len());
            let mut h = Hasher::new();
            h.write(&data[..cut]);
            h.write(&data[cut..]);
            let mut whole = Hasher::new();
            whole.write(&data);
            prop_assert_eq!(h.finish(), whole.finish());
        }

        #[test]
        fn one_changed_byte_changes_the_key(data in proptest::collection::vec(any::<u8>(), 1..300), at in 0usize..300, flip in 1u8..) {
            let at = at % data.len();
            let mut other = data.clone();
            other[at] ^= flip;
            prop_assert_ne!(key(&data), key(&other));
        }

        #[test]
        fn keys_are_content_keys(data in proptest::collection::vec(any::<u8>(), 0..100)) {
            prop_assert!(is_content_key(&key(&data)));
        }
    }

    #[test]
    fn type_length_and_attributes_count() {
        let data = [0u8; 16];
        let raw = content_key(Kind::Raw, 16, &[], &data);
        assert_ne!(raw, content_key(Kind::Integer, 4, &[], &data));
        assert_ne!(raw, content_key(Kind::Raw, 16, &[1], &data));
        assert_ne!(key(b"ab"), key(b"ab\0"));
        assert_eq!(key(b"same"), key(b"same"));
        assert!(!is_content_key("content:xyz"));
        assert!(!is_content_key("my key"));
    }
}
