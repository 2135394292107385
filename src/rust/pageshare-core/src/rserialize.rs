//! The subset of R's serialization format that a segment's attribute blob
//! uses, read and written without R (for the Python module: a matrix's `dim`,
//! a data frame's `names`, `class` and `row.names`, a factor's `levels`).
//!
//! The blob is `serialize(attributes(x), NULL, xdr = FALSE)` (R/keys.R): a
//! named list, or a pairlist, whose values are logical, integer, double or
//! character vectors, lists of them, or NULL, possibly with attributes of their
//! own. Both R's native binary (`B\n`, little-endian here) and XDR (`X\n`)
//! forms, versions 2 and 3, are read. Anything else (ALTREP-serialized values,
//! closures, environments, bytecode) is an error that says so.
//!
//! Every length is checked against the bytes left before anything is
//! allocated, nesting is bounded, and no input makes the decoder panic (a
//! proptest feeds it arbitrary bytes).
//!
//! [`encode`] writes what R's `serialize(attrs, NULL, xdr = FALSE, version =
//! 2)` writes for a named list of such vectors, with the writer's R version
//! zeroed, as `canonical_attributes_blob()` in R/keys.R does.

use crate::cursor::Cursor;
use crate::error::{Error, Result};

/// An R value of the subset, with its attributes (in order).
#[derive(Clone, Debug, PartialEq)]
pub struct RObject {
    pub value: RValue,
    pub attributes: Vec<(String, RObject)>,
}

/// R's `NA_integer_` (and logical NA).
pub const NA_INTEGER: i32 = i32::MIN;

#[derive(Clone, Debug, PartialEq)]
pub enum RValue {
    Null,
    /// R's 32-bit logical values (`NA_INTEGER` for NA).
    Logical(Vec<i32>),
    Integer(Vec<i32>),
    Double(Vec<f64>),
    /// Strings as UTF-8 (latin1 ones translated); None for NA.
    Character(Vec<Option<String>>),
    List(Vec<RObject>),
}

impl RObject {
    pub fn plain(value: RValue) -> RObject {
        RObject { value, attributes: Vec::new() }
    }
}

const NILVALUE_SXP: u32 = 254;
const REFSXP: u32 = 255;
const SYMSXP: u32 = 1;
const LISTSXP: u32 = 2;
const CHARSXP: u32 = 9;
const LGLSXP: u32 = 10;
const INTSXP: u32 = 13;
const REALSXP: u32 = 14;
const STRSXP: u32 = 16;
const VECSXP: u32 = 19;

const IS_OBJECT: u32 = 1 << 8;
const HAS_ATTR: u32 = 1 << 9;
const HAS_TAG: u32 = 1 << 10;
const LATIN1_MASK: u32 = 1 << 2;
const UTF8_MASK: u32 = 1 << 3;
const ASCII_MASK: u32 = 1 << 6;

/// How deep values may nest (attributes of attributes, lists of lists).
const MAX_DEPTH: usize = 32;

fn bad(why: impl Into<String>) -> Error {
    Error::Invalid { name: "the attribute blob".into(), why: why.into() }
}

struct Reader<'a> {
    bytes: Cursor<'a>,
    xdr: bool,
    /// Symbols read so far (REFSXP refers to them by position, from 1).
    refs: Vec<String>,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        self.bytes.take(n).ok_or_else(|| bad("it ends too early"))
    }
    fn left(&self) -> usize {
        self.bytes.left()
    }
    fn int(&mut self) -> Result<i32> {
        let b: [u8; 4] = self.take(4)?.try_into().map_err(|_| bad("short integer"))?;
        Ok(if self.xdr { i32::from_be_bytes(b) } else { i32::from_le_bytes(b) })
    }
    fn double(&mut self) -> Result<f64> {
        let b: [u8; 8] = self.take(8)?.try_into().map_err(|_| bad("short double"))?;
        Ok(if self.xdr { f64::from_be_bytes(b) } else { f64::from_le_bytes(b) })
    }
    /// A vector length (R's long lengths as -1 then two words), checked to
    /// fit in what is left at `elem` bytes per element.
    fn length(&mut self, elem: usize) -> Result<usize> {
        let n = match self.int()? {
            -1 => {
                let hi = self.int()? as u32 as u64;
                let lo = self.int()? as u32 as u64;
                (hi << 32) | lo
            }
            n if n < 0 => return Err(bad(format!("negative length {n}"))),
            n => n as u64,
        };
        if n.saturating_mul(elem.max(1) as u64) > self.left() as u64 {
            return Err(bad(format!("a length of {n} does not fit in the {} bytes left", self.left())));
        }
        Ok(n as usize)
    }

    /// A CHARSXP's contents (after its flags): None for NA.
    fn charsxp(&mut self, flags: u32) -> Result<Option<String>> {
        if flags & 0xFF != CHARSXP {
            return Err(bad(format!("a string of type {} where a CHARSXP belongs", flags & 0xFF)));
        }
        let n = self.int()?;
        if n == -1 {
            return Ok(None);
        }
        if n < 0 {
            return Err(bad(format!("a string of length {n}")));
        }
        let b = self.take(n as usize)?;
        let levels = flags >> 12;
        Ok(Some(if levels & LATIN1_MASK != 0 {
            b.iter().map(|&c| c as char).collect()
        } else {
            let _ = (UTF8_MASK, ASCII_MASK); // (UTF-8, ASCII and native: read as UTF-8)
            String::from_utf8_lossy(b).into_owned()
        }))
    }

    fn symbol(&mut self, flags: u32) -> Result<String> {
        match flags & 0xFF {
            SYMSXP => {
                let f = self.int()? as u32;
                let name = self.charsxp(f)?.ok_or_else(|| bad("a symbol named NA"))?;
                self.refs.push(name.clone());
                Ok(name)
            }
            REFSXP => {
                let i = match flags >> 8 {
                    0 => self.int()? as u32 as usize,
                    i => i as usize,
                };
                self.refs.get(i.wrapping_sub(1)).cloned().ok_or_else(|| bad(format!("reference {i} to no symbol")))
            }
            t => Err(bad(format!("a tag of type {t}, not a symbol"))),
        }
    }

    /// A pairlist whose first cell's flags are `flags` (LISTSXP), as (tag, value) pairs.
    fn pairlist(&mut self, mut flags: u32, depth: usize) -> Result<Vec<(String, RObject)>> {
        let mut out = Vec::new();
        loop {
            match flags & 0xFF {
                NILVALUE_SXP => return Ok(out),
                LISTSXP => {}
                t => return Err(bad(format!("a pairlist cell of type {t}"))),
            }
            if flags & HAS_ATTR != 0 {
                let f = self.int()? as u32;
                self.item(f, depth + 1)?; // (attributes of a cell: none in R's attributes)
            }
            let tag = if flags & HAS_TAG != 0 {
                let f = self.int()? as u32;
                self.symbol(f)?
            } else {
                String::new()
            };
            let f = self.int()? as u32;
            out.push((tag, self.item(f, depth + 1)?));
            flags = self.int()? as u32;
        }
    }

    fn item(&mut self, flags: u32, depth: usize) -> Result<RObject> {
        if depth > MAX_DEPTH {
            return Err(bad(format!("values nest deeper than {MAX_DEPTH}")));
        }
        let value = match flags & 0xFF {
            NILVALUE_SXP => return Ok(RObject::plain(RValue::Null)),
            LISTSXP => {
                let pairs = self.pairlist(flags, depth)?;
                let names = pairs.iter().map(|(t, _)| Some(t.clone())).collect();
                let values = pairs.into_iter().map(|(_, v)| v).collect();
                return Ok(RObject {
                    value: RValue::List(values),
                    attributes: vec![("names".into(), RObject::plain(RValue::Character(names)))],
                });
            }
            LGLSXP | INTSXP => {
                let n = self.length(4)?;
                let v = (0..n).map(|_| self.int()).collect::<Result<Vec<i32>>>()?;
                if flags & 0xFF == LGLSXP {
                    RValue::Logical(v)
                } else {
                    RValue::Integer(v)
                }
            }
            REALSXP => {
                let n = self.length(8)?;
                RValue::Double((0..n).map(|_| self.double()).collect::<Result<_>>()?)
            }
            STRSXP => {
                // (each string takes at least its flags and length)
                let n = self.length(8)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    let f = self.int()? as u32;
                    v.push(self.charsxp(f)?);
                }
                RValue::Character(v)
            }
            VECSXP => {
                let n = self.length(4)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    let f = self.int()? as u32;
                    v.push(self.item(f, depth + 1)?);
                }
                RValue::List(v)
            }
            t => return Err(bad(format!("a value of R type {t}, which only R itself can read"))),
        };
        let attributes = if flags & HAS_ATTR != 0 {
            let f = self.int()? as u32;
            if f & 0xFF != LISTSXP {
                return Err(bad("attributes that are not a pairlist"));
            }
            self.pairlist(f, depth + 1)?
        } else {
            Vec::new()
        };
        Ok(RObject { value, attributes })
    }
}

/// Read a serialized R object of the subset.
pub fn decode(bytes: &[u8]) -> Result<RObject> {
    let xdr = match bytes.get(..2) {
        Some(b"X\n") => true,
        Some(b"B\n") => false,
        Some(b"A\n") => return Err(bad("it is in R's ASCII form, which is not read here")),
        _ => return Err(bad("it is not in R's serialization format")),
    };
    // (the format's two bytes are read above)
    let mut r = Reader { bytes: Cursor::new(&bytes[2..]), xdr, refs: Vec::new() };
    let version = r.int()?;
    let _writer = r.int()?;
    let _min_reader = r.int()?;
    match version {
        2 => {}
        3 => {
            let n = r.int()?;
            if !(0..=64).contains(&n) {
                return Err(bad(format!("a native encoding name of {n} bytes")));
            }
            r.take(n as usize)?;
        }
        v => return Err(bad(format!("format version {v} (2 and 3 are read)"))),
    }
    let f = r.int()? as u32;
    let obj = r.item(f, 0)?;
    if r.left() != 0 {
        return Err(bad(format!("{} bytes follow the value", r.left())));
    }
    Ok(obj)
}

/// The (name, value) pairs of an attribute blob: a named list or a pairlist
/// (empty for an empty blob, as a segment without attributes has).
pub fn decode_attributes(bytes: &[u8]) -> Result<Vec<(String, RObject)>> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let obj = decode(bytes)?;
    let RValue::List(values) = obj.value else {
        return Err(bad("it is not a list of attributes"));
    };
    let names = obj.attributes.into_iter().find(|(n, _)| n == "names").map(|(_, v)| v.value);
    let Some(RValue::Character(names)) = names else {
        return Err(bad("its attributes have no names"));
    };
    if names.len() != values.len() {
        return Err(bad("it has not one name per attribute"));
    }
    Ok(names.into_iter().map(|n| n.unwrap_or_default()).zip(values).collect())
}

struct Writer {
    out: Vec<u8>,
    refs: Vec<String>,
}

impl Writer {
    fn int(&mut self, v: i32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    fn length(&mut self, n: usize) {
        if n <= i32::MAX as usize {
            self.int(n as i32);
        } else {
            self.int(-1);
            self.int((n as u64 >> 32) as i32);
            self.int(n as u32 as i32);
        }
    }
    fn charsxp(&mut self, s: Option<&str>) {
        match s {
            None => {
                self.int(CHARSXP as i32);
                self.int(-1);
            }
            Some(s) => {
                let level = if s.is_ascii() { ASCII_MASK } else { UTF8_MASK };
                self.int((CHARSXP | level << 12) as i32);
                self.length(s.len());
                self.out.extend_from_slice(s.as_bytes());
            }
        }
    }
    fn symbol(&mut self, name: &str) {
        match self.refs.iter().position(|r| r == name) {
            Some(i) => self.int((((i + 1) as u32) << 8 | REFSXP) as i32),
            None => {
                self.refs.push(name.to_string());
                self.int(SYMSXP as i32);
                self.charsxp(Some(name));
            }
        }
    }
    fn item(&mut self, obj: &RObject) {
        let attr = if obj.attributes.is_empty() { 0 } else { HAS_ATTR };
        let object = if obj.attributes.iter().any(|(n, _)| n == "class") { IS_OBJECT } else { 0 };
        let ty = match &obj.value {
            RValue::Null => {
                self.int(NILVALUE_SXP as i32);
                return;
            }
            RValue::Logical(_) => LGLSXP,
            RValue::Integer(_) => INTSXP,
            RValue::Double(_) => REALSXP,
            RValue::Character(_) => STRSXP,
            RValue::List(_) => VECSXP,
        };
        self.int((ty | attr | object) as i32);
        match &obj.value {
            RValue::Null => {}
            RValue::Logical(v) | RValue::Integer(v) => {
                self.length(v.len());
                v.iter().for_each(|&x| self.int(x));
            }
            RValue::Double(v) => {
                self.length(v.len());
                v.iter().for_each(|x| self.out.extend_from_slice(&x.to_le_bytes()));
            }
            RValue::Character(v) => {
                self.length(v.len());
                v.iter().for_each(|s| self.charsxp(s.as_deref()));
            }
            RValue::List(v) => {
                self.length(v.len());
                v.iter().for_each(|x| self.item(x));
            }
        }
        if !obj.attributes.is_empty() {
            self.pairlist(&obj.attributes);
        }
    }
    fn pairlist(&mut self, pairs: &[(String, RObject)]) {
        for (tag, value) in pairs {
            self.int((LISTSXP | HAS_TAG) as i32);
            self.symbol(tag);
            self.item(value);
        }
        self.int(NILVALUE_SXP as i32);
    }
}

/// `serialize(obj, NULL, xdr = FALSE, version = 2)` with the writer's R
/// version zeroed (little-endian, as R writes it on this machine).
pub fn encode(obj: &RObject) -> Vec<u8> {
    let mut w = Writer { out: b"B\n".to_vec(), refs: Vec::new() };
    w.int(2);
    w.int(0);
    w.int(0x020300); // (the oldest R that reads it: 2.3.0)
    w.item(obj);
    w.out
}

/// The blob of the attributes `pairs` (a named list of them), empty for none.
pub fn encode_attributes(pairs: &[(String, RObject)]) -> Vec<u8> {
    if pairs.is_empty() {
        return Vec::new();
    }
    let names = RValue::Character(pairs.iter().map(|(n, _)| Some(n.clone())).collect());
    encode(&RObject {
        value: RValue::List(pairs.iter().map(|(_, v)| v.clone()).collect()),
        attributes: vec![("names".into(), RObject::plain(names))],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `serialize(list(dim = c(2L, 3L)), NULL, xdr = FALSE, version = 2)`
    /// with the writer's version zeroed, as R 4.2.2 writes it.
    const DIM_2_3: &[u8] = &[
        0x42, 0x0a, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x02, 0x00, 0x13, 0x02, 0x00, 0x00,
        0x01, 0x00, 0x00, 0x00, 0x0d, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x03, 0x00,
        0x00, 0x00, 0x02, 0x04, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x09, 0x00, 0x04, 0x00, 0x05, 0x00, 0x00, 0x00,
        0x6e, 0x61, 0x6d, 0x65, 0x73, 0x10, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x09, 0x00, 0x04, 0x00, 0x03,
        0x00, 0x00, 0x00, 0x64, 0x69, 0x6d, 0xfe, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn reads_and_writes_what_r_writes() {
        let pairs = decode_attributes(DIM_2_3).unwrap();
        assert_eq!(pairs, vec![("dim".to_string(), RObject::plain(RValue::Integer(vec![2, 3])))]);
        assert_eq!(encode_attributes(&pairs), DIM_2_3);
    }

    #[test]
    fn round_trips_a_data_frame_s_attributes() {
        let pairs = vec![
            ("names".to_string(), RObject::plain(RValue::Character(vec![Some("a".into()), Some("é".into()), None]))),
            ("class".to_string(), RObject::plain(RValue::Character(vec![Some("data.frame".into())]))),
            ("row.names".to_string(), RObject::plain(RValue::Integer(vec![NA_INTEGER, -5]))),
            ("flag".to_string(), RObject::plain(RValue::Logical(vec![1, 0, NA_INTEGER]))),
            ("x".to_string(), RObject::plain(RValue::Double(vec![1.5, -0.0]))),
            (
                "dimnames".to_string(),
                RObject::plain(RValue::List(vec![
                    RObject::plain(RValue::Null),
                    RObject {
                        value: RValue::Character(vec![Some("u".into())]),
                        attributes: vec![("names".into(), RObject::plain(RValue::Character(vec![Some("k".into())])))],
                    },
                ])),
            ),
        ];
        let blob = encode_attributes(&pairs);
        assert_eq!(decode_attributes(&blob).unwrap(), pairs);
        assert!(decode_attributes(&[]).unwrap().is_empty());
    }

    #[test]
    fn damaged_blobs_are_errors() {
        for cut in 0..DIM_2_3.len() {
            assert!(decode_attributes(&DIM_2_3[..cut]).is_err() || cut == 0, "cut at {cut}");
        }
        let mut huge = DIM_2_3.to_vec();
        huge[26..30].copy_from_slice(&i32::MAX.to_le_bytes()); // the dim vector's length
        assert!(decode_attributes(&huge).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_are_an_error_never_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_attributes(&bytes);
            let mut prefixed = b"B\n\x02\0\0\0\0\0\0\0\0\0".to_vec();
            prefixed.extend_from_slice(&bytes);
            let _ = decode_attributes(&prefixed);
        }

        #[test]
        fn mutated_blobs_are_an_error_never_a_panic(at in 0usize..80, byte in any::<u8>()) {
            let mut b = DIM_2_3.to_vec();
            let i = at % b.len();
            b[i] = byte;
            let _ = decode_attributes(&b);
        }
    }
}
