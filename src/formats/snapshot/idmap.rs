//! Hash maps keyed by integers the parser itself produces or reads (node ids, block addresses).
//!
//! The standard library's SipHash is built to resist chosen keys; it was a third of the time
//! spent on a 100 MB snapshot. Keys here are plain integers, so one multiply and a rotate spread
//! them well enough. A file crafted to collide only slows down its own parse: it stays bounded by
//! [`super::Limits`].

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` keyed by an integer.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
/// A `HashSet` of integers.
pub type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

/// Multiplicative (Fibonacci) hashing of integer keys.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(26);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_aligned_addresses_over_buckets() {
        // Block addresses are multiples of 512: the low bits of the hash must still vary.
        let mut low = IdSet::default();
        for i in 0..4096u64 {
            let mut h = IdHasher::default();
            h.write_u64(0x7f00_0000_0000 + i * 512);
            low.insert(h.finish() & 0xfff);
        }
        assert!(
            low.len() > 2000,
            "only {} distinct low-12-bit hashes",
            low.len()
        );
    }
}
