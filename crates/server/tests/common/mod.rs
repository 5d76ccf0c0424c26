//! Helpers shared by the server's end-to-end test crates (e2e.rs over pipes, listen.rs over a
//! WebSocket).

/// A reproducible pseudo-random stream (xorshift64*): no repeating pattern hides a piece lost,
/// doubled or moved.
pub fn noise(len: usize, mut state: u64) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        bytes.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}
