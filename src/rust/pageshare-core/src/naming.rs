//! Segment names.
//!
//! - Anonymous segments (from `share()` and the backends):
//!   `pageshare.a.<owner pid>.<128 random bits in hex>`.
//! - Named segments (memshare's namespace + variable, so a worker can find them by
//!   name): `pageshare.n.<namespace>.<variable>`, each part escaped so that any
//!   string (unicode, `/`, `.`) gives a valid index entry name and two different
//!   pairs never give the same name.

use crate::error::{Error, Result};
use crate::os;

pub const PREFIX: &str = "pageshare.";
/// Linux NAME_MAX.
pub const MAX_NAME: usize = 255;

/// A fresh anonymous segment name owned by this process.
pub fn anonymous() -> Result<String> {
    let r = os::random_bytes(16)?;
    let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{PREFIX}a.{}.{hex}", os::pid()))
}

/// Bytes that cannot stand for themselves in a name part: the separator `.`, the
/// escape `%`, the path separator `/`, space and control bytes.
fn needs_escape(b: u8) -> bool {
    matches!(b, b'.' | b'%' | b'/' | b' ') || b < 0x20 || b == 0x7f
}

/// Escape one part: bytes that [`needs_escape`] become `%XX`, all others (UTF-8
/// included) stay, so names stay readable and short. The escaped text has no `.`,
/// so `.` separates parts unambiguously.
pub fn escape(part: &str) -> String {
    let mut out = Vec::with_capacity(part.len());
    for &b in part.as_bytes() {
        if needs_escape(b) {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).expect("escaping keeps UTF-8 intact")
}

/// Inverse of [`escape`]; `None` for text that `escape` cannot have produced.
pub fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            if hex.bytes().any(|c| c.is_ascii_lowercase()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else if !needs_escape(b[i]) {
            out.push(b[i]);
            i += 1;
        } else {
            return None;
        }
    }
    String::from_utf8(out).ok()
}

/// The segment name of `variable` in `namespace`.
pub fn named(namespace: &str, variable: &str) -> Result<String> {
    if namespace.is_empty() {
        return Err(Error::Argument("`namespace` must be a non-empty string".into()));
    }
    if variable.is_empty() {
        return Err(Error::Argument("variable names must be non-empty strings".into()));
    }
    let name = format!("{PREFIX}n.{}.{}", escape(namespace), escape(variable));
    if name.len() > MAX_NAME {
        return Err(Error::Argument(format!(
            "namespace '{namespace}' and variable '{variable}' are too long together: their \
             escaped segment name has {} bytes, at most {MAX_NAME} are possible",
            name.len()
        )));
    }
    Ok(name)
}

/// The index name under which process `pid` holds the object shared with
/// `key` (`share(x, key = ...)`): `pageshare.k.<key>.<pid>`, the key escaped.
/// Every process that holds the object publishes a name of its own, so that
/// it is found while any of them lives.
pub fn keyed(key: &str, pid: u32) -> Result<String> {
    let name = format!("{}{pid}", keyed_prefix(key)?);
    if name.len() > MAX_NAME {
        return Err(Error::Argument(format!(
            "key '{key}' is too long: its escaped index name has {} bytes, at most {MAX_NAME} are possible",
            name.len()
        )));
    }
    Ok(name)
}

/// What the index names of every holder of `key` begin with (see [`keyed`]).
pub fn keyed_prefix(key: &str) -> Result<String> {
    if key.is_empty() {
        return Err(Error::Argument("a key must be a non-empty string".into()));
    }
    Ok(format!("{PREFIX}k.{}.", escape(key)))
}

/// `(namespace, variable)` of a named segment, `None` for any other name.
pub fn parse_named(name: &str) -> Option<(String, String)> {
    let rest = name.strip_prefix(PREFIX)?.strip_prefix("n.")?;
    let (ns, var) = rest.split_once('.')?;
    Some((unescape(ns)?, unescape(var)?))
}

/// Is this a file name pageshare could have made (anonymous, named or keyed)?
pub fn is_ours(name: &str) -> bool {
    ["a.", "n.", "k."].iter().any(|kind| name.strip_prefix(PREFIX).is_some_and(|rest| rest.starts_with(kind)))
}

/// Check a name that came from outside (a handle) before it is joined to a path.
pub fn validate(name: &str) -> Result<()> {
    let ok =
        is_ours(name) && name.len() <= MAX_NAME && !name.contains('/') && !name.bytes().any(|b| b < 0x20 || b == 0x7f);
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid { name: name.to_string(), why: "the name is not a pageshare segment name".into() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_short_pair_gives_a_valid_name_that_round_trips(ns in "\\PC{1,25}", var in "\\PC{1,25}") {
            let name = named(&ns, &var).unwrap();
            prop_assert!(validate(&name).is_ok());
            prop_assert!(!name.contains('/'));
            prop_assert_eq!(parse_named(&name), Some((ns, var)));
        }

        #[test]
        fn different_pairs_give_different_names(a in "\\PC{1,12}", b in "\\PC{1,12}", c in "\\PC{1,12}", d in "\\PC{1,12}") {
            prop_assume!((a.clone(), b.clone()) != (c.clone(), d.clone()));
            prop_assert_ne!(named(&a, &b).unwrap(), named(&c, &d).unwrap());
        }

        #[test]
        fn keyed_names_are_valid_and_a_key_never_prefixes_another(a in "\\PC{1,20}", b in "\\PC{1,20}", pid in 1u32..) {
            let name = keyed(&a, pid).unwrap();
            prop_assert!(validate(&name).is_ok());
            prop_assert!(name.starts_with(&keyed_prefix(&a).unwrap()));
            prop_assume!(a != b);
            prop_assert!(!name.starts_with(&keyed_prefix(&b).unwrap()));
        }

        #[test]
        fn unescape_never_panics(s in ".{0,40}") {
            let _ = unescape(&s);
            let _ = parse_named(&s);
            let _ = validate(&s);
        }
    }

    #[test]
    fn awkward_names() {
        for (ns, var) in [("a.b", "c"), ("a", "b.c"), ("a/b", "c"), ("ns", "%41"), ("ü", "😀"), ("..", "/")] {
            let n = named(ns, var).unwrap();
            assert!(validate(&n).is_ok(), "{n}");
            assert_eq!(parse_named(&n), Some((ns.to_string(), var.to_string())));
        }
        assert_ne!(named("a.b", "c").unwrap(), named("a", "b.c").unwrap());
        assert!(named("", "x").is_err());
        assert!(named("x", "").is_err());
        assert!(named(&"x".repeat(300), "y").unwrap_err().to_string().contains("too long"));
    }

    #[test]
    fn anonymous_names_are_unique_and_carry_the_pid() {
        let a = anonymous().unwrap();
        let b = anonymous().unwrap();
        assert_ne!(a, b);
        assert!(a.contains(&format!(".{}.", std::process::id())));
        assert!(validate(&a).is_ok());
        assert!(validate("../etc/passwd").is_err());
        assert!(validate("pageshare.a.1/../../x").is_err());
    }
}
