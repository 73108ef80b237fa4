//! The hash of a chunk: taken as the chunk is built, compared with the read-back's in the
//! verification, and recorded in the resume journal.
//!
//! **XXH3-128, keyed.** The verification hashes every byte twice (as it is written and as it
//! is read back) and the journal once; SHA-256 did that at 53 MB/s on the test VM's emulated
//! CPU (1.7 GB/s here with SHA-NI), XXH3 at 548 MB/s (11-15 GB/s here), so on a slow or busy
//! host the hashes no longer cost a noticeable part of the write (docs/PERFORMANCE.md,
//! "flash_board"). The hash is not cryptographic, so what it decides is kept small:
//!
//! - **Resume never trusts it.** A journal entry whose hash matches the chunk being flashed
//!   only says the chunk is worth reading back; the chunk is skipped when the board's bytes,
//!   read back, are *equal* to the image's (a byte comparison). Content crafted to collide
//!   (by whoever held the board before) cannot make a flash skip a chunk.
//! - **The verification compares keyed hashes.** The key is a random 192-byte XXH3 secret
//!   made when a board's journal is started and kept only in that journal (0600, in the
//!   server's 0700 state directory); no client sees it or a chunk hash. A read-back that
//!   differs from what was written (a bad cable, a failing flash, a loader that dropped a
//!   command) differs in its hash except with probability ~2^-128; forging a collision
//!   would need the secret.

use xxhash_rust::xxh3::xxh3_128_with_secret;

/// Bytes of the secret (XXH3's default secret size; the minimum is 136).
pub const KEY_LEN: usize = 192;

/// A chunk's keyed XXH3-128.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkHash(pub [u8; 16]);

impl ChunkHash {
    /// Lower-case hex (the journal's form).
    pub fn to_hex(self) -> String {
        hex::encode(self.0)
    }

    /// From the journal's hex; `None` if it is not 32 hex digits.
    pub fn from_hex(s: &str) -> Option<ChunkHash> {
        let mut b = [0u8; 16];
        hex::decode_to_slice(s, &mut b).ok().map(|_| ChunkHash(b))
    }
}

/// The secret chunks are hashed with.
#[derive(Clone, PartialEq, Eq)]
pub struct ChunkKey(Box<[u8; KEY_LEN]>);

impl std::fmt::Debug for ChunkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChunkKey(..)") // never printed: it is the journal's secret
    }
}

impl ChunkKey {
    /// A fresh random key from the operating system.
    pub fn random() -> std::io::Result<ChunkKey> {
        let mut k = Box::new([0u8; KEY_LEN]);
        getrandom::fill(&mut k[..]).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(ChunkKey(k))
    }

    /// A fixed key (tests).
    #[cfg(test)]
    pub(crate) fn fixed(byte: u8) -> ChunkKey {
        ChunkKey(Box::new([byte; KEY_LEN]))
    }

    /// Lower-case hex (the journal's form).
    pub fn to_hex(&self) -> String {
        hex::encode(&self.0[..])
    }

    /// From the journal's hex; `None` unless it is exactly [`KEY_LEN`] bytes.
    pub fn from_hex(s: &str) -> Option<ChunkKey> {
        let mut k = Box::new([0u8; KEY_LEN]);
        hex::decode_to_slice(s, &mut k[..])
            .ok()
            .map(|_| ChunkKey(k))
    }

    /// The hash of `data` under this key.
    pub fn hash(&self, data: &[u8]) -> ChunkHash {
        ChunkHash(xxh3_128_with_secret(data, &self.0[..]).to_le_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_change_the_hash_and_survive_hex() {
        let data = vec![7u8; 100_000];
        let (a, b) = (ChunkKey::fixed(1), ChunkKey::fixed(2));
        assert_ne!(a.hash(&data), b.hash(&data), "another key, another hash");
        let mut changed = data.clone();
        changed[99_999] ^= 1;
        assert_ne!(a.hash(&data), a.hash(&changed), "one bit flipped");
        let back = ChunkKey::from_hex(&a.to_hex()).expect("hex");
        assert_eq!(back.hash(&data), a.hash(&data));
        let h = a.hash(&data);
        assert_eq!(ChunkHash::from_hex(&h.to_hex()), Some(h));
        assert_eq!(ChunkHash::from_hex("00"), None);
        assert_eq!(ChunkKey::from_hex("00"), None);
        assert_ne!(
            ChunkKey::random().expect("rng"),
            ChunkKey::random().expect("rng")
        );
        assert_eq!(format!("{a:?}"), "ChunkKey(..)");
    }
}
