//! The first bytes a worker sends its master: who it claims to be (its slot)
//! and the pool's secret. The master trusts neither: it also checks the
//! kernel's record of the peer (same user, the process it started for that
//! slot) before it sends the pool's region.

pub const HELLO_LEN: usize = 4 + 8 + SECRET_LEN;
pub const SECRET_LEN: usize = 32;
const MAGIC: &[u8; 4] = b"psp1";

pub fn hello(slot: u64, secret: &[u8; SECRET_LEN]) -> [u8; HELLO_LEN] {
    let mut m = [0u8; HELLO_LEN];
    m[..4].copy_from_slice(MAGIC);
    m[4..12].copy_from_slice(&slot.to_le_bytes());
    m[12..].copy_from_slice(secret);
    m
}

/// The slot a hello claims, if it carries this pool's secret.
pub fn check_hello(bytes: &[u8], secret: &[u8; SECRET_LEN]) -> Option<u64> {
    if bytes.len() != HELLO_LEN || &bytes[..4] != MAGIC {
        return None;
    }
    // (every byte compared, whatever the first difference)
    let same = bytes[12..].iter().zip(secret).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
    same.then(|| u64::from_le_bytes(bytes[4..12].try_into().expect("8 bytes")))
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
