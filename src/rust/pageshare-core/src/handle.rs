//! The bytes a view serializes to inside a dispatch scope: where the segment is
//! (a [`Locator`]), its name, which element type, and which slice of it. A
//! handle is about a hundred bytes whatever the size of the data.
//!
//! ```text
//! "PSH2" | kind u32 | offset u64 | length u64 | locator | name_len u16 | name
//! ```
//! Handles arrive from other processes, so [`Handle::decode`] checks everything and
//! never panics (property-tested).

use crate::cursor::Cursor;
use crate::error::{Error, Result};
use crate::header::Kind;
use crate::locator::{self, Locator};
use crate::naming;

const MAGIC: &[u8; 4] = b"PSH2";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handle {
    pub locator: Locator,
    pub name: String,
    pub kind: Kind,
    /// First element of the view within the segment.
    pub offset: u64,
    /// Number of elements of the view.
    pub length: u64,
}

fn bad(why: &str) -> Error {
    Error::Invalid { name: "<handle>".into(), why: why.into() }
}

impl Handle {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(32 + locator::ENCODED_LEN + self.name.len());
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&(self.kind as u32).to_le_bytes());
        b.extend_from_slice(&self.offset.to_le_bytes());
        b.extend_from_slice(&self.length.to_le_bytes());
        self.locator.encode_into(&mut b);
        b.extend_from_slice(&(self.name.len() as u16).to_le_bytes());
        b.extend_from_slice(self.name.as_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Handle> {
        let mut r = Reader { bytes: Cursor::new(b) };
        if r.take(4)? != MAGIC {
            return Err(bad("it does not start with the handle magic"));
        }
        let code = u32::from_le_bytes(r.take(4)?.try_into().expect("4"));
        let kind = Kind::from_code(code).ok_or_else(|| bad("unknown element type"))?;
        let offset = u64::from_le_bytes(r.take(8)?.try_into().expect("8"));
        let length = u64::from_le_bytes(r.take(8)?.try_into().expect("8"));
        let locator =
            Locator::decode(r.take(locator::ENCODED_LEN)?).ok_or_else(|| bad("its locator is implausible"))?;
        let name = r.string()?;
        if r.bytes.left() != 0 {
            return Err(bad("it has trailing bytes"));
        }
        naming::validate(&name)?;
        if offset.checked_add(length).is_none() {
            return Err(bad("its slice overflows"));
        }
        Ok(Handle { locator, name, kind, offset, length })
    }
}

struct Reader<'a> {
    bytes: Cursor<'a>,
}
impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        self.bytes.take(n).ok_or_else(|| bad("it is truncated"))
    }
    fn string(&mut self) -> Result<String> {
        let n = u16::from_le_bytes(self.take(2)?.try_into().expect("2")) as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| bad("a string in it is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::tests::kinds;
    use proptest::prelude::*;

    fn loc() -> Locator {
        Locator { pid: 1, start: 2, fd: 1024, dev: 3, ino: 4, size: 4096, token: [5; 16] }
    }

    proptest! {
        #[test]
        fn handles_round_trip(kind in kinds(), offset in 0u64..(1 << 40), length in 0u64..(1 << 40),
                              pid in 1u32.., fd in 0i32.., token: [u8; 16], ns in "\\PC{1,10}", var in "\\PC{1,10}") {
            let name = naming::named(&ns, &var).unwrap();
            let locator = Locator { pid, start: 7, fd, dev: 1, ino: 2, size: 3, token };
            let h = Handle { locator, name, kind, offset, length };
            prop_assert_eq!(Handle::decode(&h.encode()).unwrap(), h);
        }

        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Handle::decode(&b);
        }

        #[test]
        fn any_truncation_is_an_error(cut in 0usize..60) {
            let h = Handle { locator: loc(), name: "pageshare.a.1.abc".into(), kind: Kind::Double, offset: 0, length: 9 };
            let b = h.encode();
            prop_assume!(cut < b.len());
            prop_assert!(Handle::decode(&b[..cut]).is_err());
        }
    }

    #[test]
    fn hostile_names_are_refused() {
        let h = Handle { locator: loc(), name: "../../etc/passwd".into(), kind: Kind::Raw, offset: 0, length: 1 };
        assert!(Handle::decode(&h.encode()).is_err());
        let h = Handle {
            locator: Locator { pid: 0, ..loc() },
            name: "pageshare.a.1.x".into(),
            kind: Kind::Raw,
            offset: 0,
            length: 1,
        };
        assert!(Handle::decode(&h.encode()).is_err());
        let h = Handle { locator: loc(), name: "pageshare.a.1.x".into(), kind: Kind::Raw, offset: u64::MAX, length: 1 };
        assert!(Handle::decode(&h.encode()).is_err());
    }
}
