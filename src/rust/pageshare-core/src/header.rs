//! The segment header: the first [`HEADER_LEN`] bytes of every segment.
//!
//! Nothing in a segment is read before [`Header::parse`] has checked the magic,
//! the format version, the element type and that every offset and size fits in
//! the file. All fields are little-endian.
//!
//! ```text
//! off  size  field
//!   0     8  magic "PGSHARE\0"
//!   8     4  format version
//!  12     4  element kind (R SEXPTYPE)
//!  16     8  element count
//!  24     4  layout (0 = fixed-width elements, 1 = packed strings)
//!  28     4  ready (1 once the data is complete)
//!  32     8  attribute blob offset     40  8  attribute blob length
//!  48     8  data offset               56  8  data length
//!  64     4  owner pid                 72  8  owner start time
//!  80     8  total size (= file size)
//!  88    16  token: random, also carried by every handle of the segment, so
//!            that a reused pid or descriptor can never be taken for it
//! ```

use crate::error::{Error, Result};

pub const MAGIC: [u8; 8] = *b"PGSHARE\0";
pub const VERSION: u32 = 2;
pub const HEADER_LEN: usize = 128;
/// Data starts at least one page into the file, at a chosen offset within its
/// page (the *phase*, a multiple of [`ELEM_ALIGN`]): a receiving process maps the
/// data behind an R vector header written into a private copy of the page before
/// (pageshare-r's `plain.rs`), and the creator can re-point the page-aligned
/// interior of its own source vector at the segment's pages when the phase
/// matches the source's address.
pub const DATA_ALIGN: u64 = 4096;
/// Alignment of the data for every R element type.
pub const ELEM_ALIGN: u64 = 8;
pub const READY_OFFSET: usize = 28;
/// Where the owner (pid u32, pad, start time u64) is written; rewritten on adoption.
pub const OWNER_OFFSET: usize = 64;

/// The vector types a segment can hold, numbered as R's SEXPTYPEs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    Logical = 10,
    Integer = 13,
    Double = 14,
    Complex = 15,
    Character = 16,
    Raw = 24,
}

impl Kind {
    pub fn from_code(code: u32) -> Option<Kind> {
        Some(match code {
            10 => Kind::Logical,
            13 => Kind::Integer,
            14 => Kind::Double,
            15 => Kind::Complex,
            16 => Kind::Character,
            24 => Kind::Raw,
            _ => return None,
        })
    }
    /// Bytes per element for fixed-width kinds; 0 for packed strings.
    pub fn elem_size(self) -> u64 {
        match self {
            Kind::Logical | Kind::Integer => 4,
            Kind::Double => 8,
            Kind::Complex => 16,
            Kind::Raw => 1,
            Kind::Character => 0,
        }
    }
    pub fn layout(self) -> u32 {
        if self == Kind::Character {
            1
        } else {
            0
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Kind::Logical => "logical",
            Kind::Integer => "integer",
            Kind::Double => "double",
            Kind::Complex => "complex",
            Kind::Character => "character",
            Kind::Raw => "raw",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub length: u64,
    pub ready: bool,
    pub attr_offset: u64,
    pub attr_len: u64,
    pub data_offset: u64,
    pub data_len: u64,
    pub owner_pid: u32,
    pub owner_start: u64,
    pub total_size: u64,
    pub token: [u8; 16],
}

fn round_up(n: u64, to: u64) -> Option<u64> {
    n.checked_add(to - 1).map(|v| v / to * to)
}

impl Header {
    /// Lay out a new segment for `length` elements of `kind` (or `data_len` bytes of
    /// packed strings), with an attribute blob of `attr_len` bytes.
    pub fn plan(
        kind: Kind,
        length: u64,
        data_len: u64,
        attr_len: u64,
        owner_pid: u32,
        owner_start: u64,
    ) -> Result<Header> {
        Header::plan_at(kind, length, data_len, attr_len, owner_pid, owner_start, 0)
    }

    /// [`Header::plan`] with the data starting `phase` bytes into a page
    /// (`phase` < [`DATA_ALIGN`], a multiple of [`ELEM_ALIGN`]).
    pub fn plan_at(
        kind: Kind,
        length: u64,
        data_len: u64,
        attr_len: u64,
        owner_pid: u32,
        owner_start: u64,
        phase: u64,
    ) -> Result<Header> {
        if phase >= DATA_ALIGN || !phase.is_multiple_of(ELEM_ALIGN) {
            return Err(Error::Argument(format!(
                "data phase {phase} is not a multiple of {ELEM_ALIGN} below {DATA_ALIGN}"
            )));
        }
        let too_big = || Error::Argument(format!("a vector of {length} elements is too large to share"));
        if kind.layout() == 0 && length.checked_mul(kind.elem_size()) != Some(data_len) {
            return Err(Error::Argument(format!(
                "data length {data_len} does not match {length} {} elements",
                kind.name()
            )));
        }
        let attr_offset = HEADER_LEN as u64;
        let data_offset =
            round_up(attr_offset.checked_add(attr_len).ok_or_else(too_big)?, DATA_ALIGN).ok_or_else(too_big)? + phase;
        let total_size = data_offset.checked_add(data_len).ok_or_else(too_big)?;
        if total_size > i64::MAX as u64 {
            return Err(too_big());
        }
        Ok(Header {
            kind,
            length,
            ready: false,
            attr_offset,
            attr_len,
            data_offset,
            data_len,
            owner_pid,
            owner_start,
            total_size,
            token: [0; 16],
        })
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(self.kind as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.length.to_le_bytes());
        b[24..28].copy_from_slice(&self.kind.layout().to_le_bytes());
        b[28..32].copy_from_slice(&(self.ready as u32).to_le_bytes());
        b[32..40].copy_from_slice(&self.attr_offset.to_le_bytes());
        b[40..48].copy_from_slice(&self.attr_len.to_le_bytes());
        b[48..56].copy_from_slice(&self.data_offset.to_le_bytes());
        b[56..64].copy_from_slice(&self.data_len.to_le_bytes());
        b[64..68].copy_from_slice(&self.owner_pid.to_le_bytes());
        b[72..80].copy_from_slice(&self.owner_start.to_le_bytes());
        b[80..88].copy_from_slice(&self.total_size.to_le_bytes());
        b[88..104].copy_from_slice(&self.token);
        b
    }

    /// Read only the owner from a header prefix (used by the sweep, which must be
    /// able to judge a segment whose data is not complete yet).
    pub fn parse_owner(bytes: &[u8]) -> Option<(u32, u64)> {
        if bytes.len() < HEADER_LEN || bytes[0..8] != MAGIC {
            return None;
        }
        Some((u32_at(bytes, 64), u64_at(bytes, 72)))
    }

    /// Validate `bytes` (at least the header) of a segment whose file is `file_size`
    /// bytes long. `name` is used in error messages only.
    pub fn parse(bytes: &[u8], file_size: u64, name: &str) -> Result<Header> {
        let bad = |why: String| Error::Invalid { name: name.to_string(), why };
        if bytes.len() < HEADER_LEN {
            return Err(bad(format!("it is {} bytes long, shorter than a header", bytes.len())));
        }
        if bytes[0..8] != MAGIC {
            return Err(bad("its magic number is wrong (a foreign file?)".into()));
        }
        let version = u32_at(bytes, 8);
        if version != VERSION {
            return Err(bad(format!("it has format version {version}, this pageshare reads version {VERSION}")));
        }
        let code = u32_at(bytes, 12);
        let kind = Kind::from_code(code).ok_or_else(|| bad(format!("unknown element type {code}")))?;
        let length = u64_at(bytes, 16);
        let layout = u32_at(bytes, 24);
        if layout != kind.layout() {
            return Err(bad(format!("layout {layout} does not fit type {}", kind.name())));
        }
        let ready = match u32_at(bytes, READY_OFFSET) {
            0 => false,
            1 => true,
            r => return Err(bad(format!("ready flag {r} is neither 0 nor 1"))),
        };
        let h = Header {
            kind,
            length,
            ready,
            attr_offset: u64_at(bytes, 32),
            attr_len: u64_at(bytes, 40),
            data_offset: u64_at(bytes, 48),
            data_len: u64_at(bytes, 56),
            owner_pid: u32_at(bytes, 64),
            owner_start: u64_at(bytes, 72),
            total_size: u64_at(bytes, 80),
            token: bytes[88..104].try_into().expect("16 bytes"),
        };
        if h.total_size != file_size {
            return Err(bad(format!(
                "the header says {} bytes but the file has {file_size} (truncated?)",
                h.total_size
            )));
        }
        let attr_end = h.attr_offset.checked_add(h.attr_len);
        let data_end = h.data_offset.checked_add(h.data_len);
        match (attr_end, data_end) {
            (Some(ae), Some(de)) if h.attr_offset >= HEADER_LEN as u64 && ae <= h.data_offset && de <= h.total_size => {
            }
            _ => return Err(bad("its offsets do not fit in the file".into())),
        }
        if !h.data_offset.is_multiple_of(ELEM_ALIGN) || h.data_offset < DATA_ALIGN {
            return Err(bad("its data is not aligned".into()));
        }
        if kind.layout() == 0 && length.checked_mul(kind.elem_size()) != Some(h.data_len) {
            return Err(bad(format!("{length} {} elements do not fill {} data bytes", kind.name(), h.data_len)));
        }
        Ok(h)
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every kind of segment (for property tests here and in other modules).
    pub(crate) fn kinds() -> impl Strategy<Value = Kind> {
        prop_oneof![
            Just(Kind::Logical),
            Just(Kind::Integer),
            Just(Kind::Double),
            Just(Kind::Complex),
            Just(Kind::Raw),
            Just(Kind::Character)
        ]
    }

    proptest! {
        #[test]
        fn header_round_trips(kind in kinds(), length in 0u64..(1u64 << 40), attr_len in 0u64..100_000,
                              strbytes in 0u64..(1u64 << 40), pid in any::<u32>(), start in any::<u64>(),
                              ready in any::<bool>(), phase_cells in 0u64..(DATA_ALIGN / ELEM_ALIGN)) {
            let data_len = if kind.layout() == 0 { length * kind.elem_size() } else { strbytes };
            let phase = phase_cells * ELEM_ALIGN;
            let mut h = Header::plan_at(kind, length, data_len, attr_len, pid, start, phase).unwrap();
            prop_assert_eq!(h.data_offset % DATA_ALIGN, phase);
            prop_assert!(h.data_offset >= h.attr_offset + attr_len && h.data_offset >= DATA_ALIGN);
            h.ready = ready;
            let bytes = h.encode();
            let back = Header::parse(&bytes, h.total_size, "t").unwrap();
            prop_assert_eq!(back, h);
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256), size in any::<u64>()) {
            let _ = Header::parse(&bytes, size, "t");
            let _ = Header::parse_owner(&bytes);
        }

        #[test]
        fn corrupted_valid_headers_never_panic(pos in 0usize..HEADER_LEN, val in any::<u8>(), size_delta in -8i64..8) {
            let h = Header::plan(Kind::Double, 1000, 8000, 10, 1, 2).unwrap();
            let mut b = h.encode();
            b[pos] = val;
            let size = (h.total_size as i64 + size_delta) as u64;
            if let Ok(p) = Header::parse(&b, size, "t") {
                // Whatever parses must describe data that fits in the file.
                prop_assert!(p.data_offset + p.data_len <= size);
            }
        }
    }

    #[test]
    fn truncated_file_is_named_in_the_error() {
        let h = Header::plan(Kind::Integer, 10, 40, 0, 1, 1).unwrap();
        let e = Header::parse(&h.encode(), h.total_size - 1, "seg").unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");
        let e = Header::parse(b"hello", 5, "seg").unwrap_err().to_string();
        assert!(e.contains("shorter than a header"), "{e}");
        let mut foreign = h.encode();
        foreign[0] = b'X';
        let e = Header::parse(&foreign, h.total_size, "seg").unwrap_err().to_string();
        assert!(e.contains("foreign"), "{e}");
    }

    #[test]
    fn zero_length_and_data_alignment() {
        let h = Header::plan(Kind::Double, 0, 0, 0, 1, 1).unwrap();
        assert_eq!(h.data_offset % DATA_ALIGN, 0);
        assert_eq!(h.total_size, h.data_offset);
        let h = Header::plan(Kind::Raw, 3, 3, 77, 1, 1).unwrap();
        assert_eq!(h.data_offset, 4096);
        let h = Header::plan_at(Kind::Double, 3, 24, 5000, 1, 1, 64).unwrap();
        assert_eq!(h.data_offset, 8192 + 64);
        assert_eq!(Header::parse(&h.encode(), h.total_size, "t").unwrap(), h);
        assert!(Header::plan_at(Kind::Double, 3, 24, 0, 1, 1, 4).is_err());
        assert!(Header::plan_at(Kind::Double, 3, 24, 0, 1, 1, 4096).is_err());
    }

    #[test]
    fn overflowing_lengths_are_rejected() {
        assert!(Header::plan(Kind::Complex, u64::MAX / 2, 0, 0, 1, 1).is_err());
        assert!(Header::plan(Kind::Character, 1, u64::MAX - 10, 0, 1, 1).is_err());
    }
}
