//! The first bytes a worker sends its master: the versions of the wire and
//! of the package it runs, who it claims to be (its slot) and the pool's
//! secret. The master trusts none of it: it also checks the kernel's record
//! of the peer (same user, the process it started for that slot) before it
//! sends the pool's region, and it refuses a worker of another version (see
//! [`Hello::same_versions`]): such a worker would misread the messages.

use crate::wire::{WireError, PACKAGE_VERSION, WIRE_VERSION};

pub const SECRET_LEN: usize = 32;
/// Bytes for the package's version, NUL-padded.
pub const VERSION_LEN: usize = 24;
pub const HELLO_LEN: usize = 4 + 4 + VERSION_LEN + 8 + SECRET_LEN;
const MAGIC: &[u8; 4] = b"psp2";

/// What a worker says in its hello, its secret checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub slot: u64,
    /// The version of the wire it speaks.
    pub wire: u32,
    /// The version of the package it runs.
    pub package: String,
}

impl Hello {
    /// A hello of this build (its wire and package versions) for `slot`.
    pub fn ours(slot: u64) -> Hello {
        Hello { slot, wire: WIRE_VERSION, package: PACKAGE_VERSION.to_string() }
    }

    /// Does the worker run this build's wire and package? If not, why not,
    /// in words for the user.
    pub fn same_versions(&self) -> Result<(), String> {
        if self.wire == WIRE_VERSION && self.package == PACKAGE_VERSION {
            return Ok(());
        }
        Err(format!(
            "it runs pageshare {} (wire {}), this session pageshare {} (wire {}): every worker must load the \
             same version of pageshare as its master (check the library paths the workers use)",
            self.package, self.wire, PACKAGE_VERSION, WIRE_VERSION
        ))
    }

    /// The bytes of this hello with the pool's `secret`; an error for a
    /// package version that does not fit or is not printable ASCII.
    pub fn encode(&self, secret: &[u8; SECRET_LEN]) -> Result<[u8; HELLO_LEN], WireError> {
        let v = self.package.as_bytes();
        if v.is_empty() || v.len() > VERSION_LEN || !v.iter().all(|b| b.is_ascii_graphic()) {
            return Err(WireError("a package version that a hello cannot carry"));
        }
        let mut m = [0u8; HELLO_LEN];
        m[..4].copy_from_slice(MAGIC);
        m[4..8].copy_from_slice(&self.wire.to_le_bytes());
        m[8..8 + v.len()].copy_from_slice(v);
        let at = 8 + VERSION_LEN;
        m[at..at + 8].copy_from_slice(&self.slot.to_le_bytes());
        m[at + 8..].copy_from_slice(secret);
        Ok(m)
    }

    /// The hello in `bytes`, if it is one and carries this pool's `secret`
    /// (its versions are the caller's to check: a hello of another wire
    /// version is still read, so that the master can say why it refuses it).
    pub fn decode(bytes: &[u8], secret: &[u8; SECRET_LEN]) -> Option<Hello> {
        if bytes.len() != HELLO_LEN || &bytes[..4] != MAGIC {
            return None;
        }
        let at = 8 + VERSION_LEN;
        // (every byte compared, whatever the first difference)
        let same = bytes[at + 8..].iter().zip(secret).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
        if !same {
            return None;
        }
        let wire = u32::from_le_bytes(bytes[4..8].try_into().ok()?);
        let v = &bytes[8..at];
        let len = v.iter().position(|&b| b == 0).unwrap_or(VERSION_LEN);
        // (after the version, only padding)
        if v[len..].iter().any(|&b| b != 0) || !v[..len].iter().all(|b| b.is_ascii_graphic()) {
            return None;
        }
        let package = String::from_utf8(v[..len].to_vec()).ok()?;
        let slot = u64::from_le_bytes(bytes[at..at + 8].try_into().ok()?);
        Some(Hello { slot, wire, package })
    }
}

/// Bytes as hex (the secret as a worker finds it in its environment).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn secret_from_hex(hex: &str) -> Option<[u8; SECRET_LEN]> {
    if hex.len() != SECRET_LEN * 2 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; SECRET_LEN];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECRET: [u8; SECRET_LEN] = [7; SECRET_LEN];

    #[test]
    fn a_hello_carries_its_slot_and_versions() {
        let h = Hello::ours(3);
        let back = Hello::decode(&h.encode(&SECRET).unwrap(), &SECRET).unwrap();
        assert_eq!(back, h);
        assert!(back.same_versions().is_ok());
    }

    #[test]
    fn a_hello_of_another_version_is_read_and_refused_with_both_versions() {
        let old = Hello { slot: 0, wire: WIRE_VERSION, package: "0.0.9".into() };
        let back = Hello::decode(&old.encode(&SECRET).unwrap(), &SECRET).unwrap();
        let why = back.same_versions().unwrap_err();
        assert!(why.contains("pageshare 0.0.9") && why.contains(PACKAGE_VERSION), "{why}");
        let other_wire = Hello { wire: WIRE_VERSION + 1, ..Hello::ours(0) };
        let back = Hello::decode(&other_wire.encode(&SECRET).unwrap(), &SECRET).unwrap();
        assert!(back.same_versions().unwrap_err().contains(&format!("wire {}", WIRE_VERSION + 1)));
    }

    #[test]
    fn only_the_secret_and_a_well_formed_hello_open_the_door() {
        let bytes = Hello::ours(1).encode(&SECRET).unwrap();
        assert!(Hello::decode(&bytes, &[8; SECRET_LEN]).is_none());
        assert!(Hello::decode(&bytes[..HELLO_LEN - 1], &SECRET).is_none());
        let mut junk_after_version = bytes;
        junk_after_version[8 + VERSION_LEN - 1] = b'x';
        assert!(Hello::decode(&junk_after_version, &SECRET).is_none());
        let mut old_magic = bytes;
        old_magic[..4].copy_from_slice(b"psp1");
        assert!(Hello::decode(&old_magic, &SECRET).is_none());
        assert!(Hello { package: String::new(), ..Hello::ours(0) }.encode(&SECRET).is_err());
        assert!(Hello { package: "x".repeat(VERSION_LEN + 1), ..Hello::ours(0) }.encode(&SECRET).is_err());
    }

    proptest! {
        // Any bytes are a hello or nothing (never a panic); one with the
        // secret that decodes encodes back to the same bytes.
        #[test]
        fn any_bytes_are_a_hello_or_nothing(mut bytes in prop::collection::vec(any::<u8>(), 0..HELLO_LEN + 4),
                                            keep_magic: bool) {
            if keep_magic && bytes.len() == HELLO_LEN {
                bytes[..4].copy_from_slice(MAGIC);
                bytes[HELLO_LEN - SECRET_LEN..].copy_from_slice(&SECRET);
            }
            if let Some(h) = Hello::decode(&bytes, &SECRET) {
                prop_assert_eq!(&h.encode(&SECRET).unwrap()[..], &bytes[..]);
            }
        }
    }
}
