//! A bounds-checked cursor over bytes that come from another process or
//! from R (a handle, an attribute blob, a message of the pool): every read
//! is checked against what is left, so that no input can make a reader panic
//! or read beyond its bytes. Each reader names its own error.

#[derive(Debug, Clone, Copy)]
pub struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor { bytes, at: 0 }
    }

    /// The next `n` bytes, or None when fewer are left (the cursor stays).
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len())?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Some(out)
    }

    /// How many bytes are left.
    pub fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.bytes[self.at..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Any sequence of reads gives the bytes in order, or None without
        // moving when it asks for more than is left.
        #[test]
        fn reads_are_in_order_and_never_past_the_end(bytes in proptest::collection::vec(any::<u8>(), 0..64),
                                                     asks in proptest::collection::vec(0usize..80, 0..12)) {
            let mut c = Cursor::new(&bytes);
            let mut at = 0usize;
            for n in asks {
                match c.take(n) {
                    Some(s) => { prop_assert_eq!(s, &bytes[at..at + n]); at += n; }
                    None => prop_assert!(n > bytes.len() - at),
                }
                prop_assert_eq!(c.left(), bytes.len() - at);
                prop_assert_eq!(c.rest(), &bytes[at..]);
            }
        }
    }

    #[test]
    fn a_length_that_overflows_is_none() {
        let mut c = Cursor::new(b"abc");
        assert_eq!(c.take(1), Some(&b"a"[..]));
        assert_eq!(c.take(usize::MAX), None);
        assert_eq!(c.left(), 2);
    }
}
