//! Where another process finds a segment: a process that holds a descriptor of
//! it (pid and start time), that descriptor's number, and what the receiver
//! checks before it maps anything (device, inode, size, and the random token
//! also written in the segment's header). A reused pid fails the start time, a
//! reused descriptor number fails the inode and the token: the wrong data can
//! never be mapped.
//!
//! ```text
//! pid u32 | start u64 | fd i32 | dev u64 | ino u64 | size u64 | token [16]
//! ```

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Locator {
    pub pid: u32,
    pub start: u64,
    pub fd: i32,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub token: [u8; 16],
}

pub const ENCODED_LEN: usize = 4 + 8 + 4 + 8 + 8 + 8 + 16;

impl Locator {
    pub fn encode_into(&self, b: &mut Vec<u8>) {
        b.extend_from_slice(&self.pid.to_le_bytes());
        b.extend_from_slice(&self.start.to_le_bytes());
        b.extend_from_slice(&self.fd.to_le_bytes());
        b.extend_from_slice(&self.dev.to_le_bytes());
        b.extend_from_slice(&self.ino.to_le_bytes());
        b.extend_from_slice(&self.size.to_le_bytes());
        b.extend_from_slice(&self.token);
    }

    /// Decode exactly [`ENCODED_LEN`] bytes; `None` for anything implausible
    /// (pid 0, a negative descriptor).
    pub fn decode(b: &[u8]) -> Option<Locator> {
        if b.len() != ENCODED_LEN {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let l = Locator {
            pid: u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")),
            start: u64_at(4),
            fd: i32::from_le_bytes(b[12..16].try_into().expect("4 bytes")),
            dev: u64_at(16),
            ino: u64_at(24),
            size: u64_at(32),
            token: b[40..56].try_into().expect("16 bytes"),
        };
        (l.pid != 0 && l.fd >= 0).then_some(l)
    }

    /// The token as hex, for names shown in /proc and in diagnostics.
    pub fn token_hex(&self) -> String {
        hex(&self.token)
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn locators_round_trip(pid in 1u32.., start: u64, fd in 0i32.., dev: u64, ino: u64, size: u64, token: [u8; 16]) {
            let l = Locator { pid, start, fd, dev, ino, size, token };
            let mut b = Vec::new();
            l.encode_into(&mut b);
            prop_assert_eq!(b.len(), ENCODED_LEN);
            prop_assert_eq!(Locator::decode(&b), Some(l));
        }
        #[test]
        fn any_bytes_decode_without_panic(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = Locator::decode(&b);
        }
    }

    #[test]
    fn implausible_locators_are_refused() {
        let l = Locator { pid: 0, start: 1, fd: 3, dev: 1, ino: 1, size: 1, token: [1; 16] };
        let mut b = Vec::new();
        l.encode_into(&mut b);
        assert_eq!(Locator::decode(&b), None);
        let l = Locator { pid: 5, fd: -1, ..l };
        let mut b = Vec::new();
        l.encode_into(&mut b);
        assert_eq!(Locator::decode(&b), None);
        assert_eq!(Locator::decode(&b[..10]), None);
    }
}
