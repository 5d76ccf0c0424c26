//! N-grams of file contents and their posting lists (docs/index.md,
//! "N-gram scheme").
//!
//! A gram is three bytes of a line, each folded to one of 64 character
//! classes, packed in the low 18 bits of a `u32`. Letters fold case-free, so
//! case-insensitive queries use the index; a case-sensitive query asks for
//! folded grams too, a superset, still sound. Rare punctuation and every
//! non-ASCII byte share classes: grams of identifiers and code punctuation
//! stay exact, while the whole gram space (2^18) keeps a file's dedupe
//! bitmap in L1 cache and binary or minified files from filling the index
//! with millions of distinct grams.
//! Grams never span a `\n`: grep's matches never hold one.
//!
//! Posting lists live in immutable *segments*, each over a range of content
//! ids; `Postings` is the list of segments.
//!
//! One file past 800 lines on purpose: the gram encoding, the segments and
//! the exact filters share one packed representation, whose invariants its
//! private helpers keep.

use super::cache::codec::{Cursor, Writer};

/// A folded trigram `c0 c1 c2`: `c0 | c1 << 6 | c2 << 12`.
pub(crate) type Gram = u32;

/// Bytes per gram.
pub(crate) const GRAM_LEN: usize = 3;
/// Bits per folded byte: 64 classes.
const CLASS_BITS: u32 = 6;
/// Distinct grams: 18 bits.
const GRAM_SPACE: usize = 1 << (CLASS_BITS as usize * GRAM_LEN);

/// The character classes: each letter (either case), digit, `_` and common
/// code punctuation its own; `\n` its own (grams holding it are dropped);
/// blanks one; every non-ASCII byte one; rarer punctuation and control
/// bytes one. (UTF-8 case folding is the query's business: it asks for
/// every byte form a character can take.)
const FOLD: [u8; 256] = {
    const OWN: &[u8] = b"\n_()[]{};,.:=+-*/&|<>\"'#!";
    let mut t = [0u8; 256];
    let mut next = 1u8; // 0: rare punctuation and control bytes
    let mut i = 0;
    while i < OWN.len() {
        t[OWN[i] as usize] = next;
        next += 1;
        i += 1;
    }
    let mut c = 0;
    while c < 26 {
        t[(b'a' + c) as usize] = next;
        t[(b'A' + c) as usize] = next;
        next += 1;
        c += 1;
    }
    let mut d = 0;
    while d < 10 {
        t[(b'0' + d) as usize] = next;
        next += 1;
        d += 1;
    }
    let blank = next;
    t[b' ' as usize] = blank;
    t[b'\t' as usize] = blank;
    t[b'\r' as usize] = blank;
    t[0x0b] = blank;
    t[0x0c] = blank;
    let high = next + 1;
    let mut h = 0x80;
    while h < 256 {
        t[h] = high;
        h += 1;
    }
    assert!(high < 1 << CLASS_BITS, "64 classes at most");
    t
};

/// The class of `\n`.
pub(crate) const NL: u8 = FOLD[b'\n' as usize];

/// Folds one byte as the index does.
pub(crate) fn fold(b: u8) -> u8 {
    FOLD[b as usize]
}

/// The gram of three (unfolded) bytes.
#[cfg(test)]
pub(crate) fn gram_of(b: [u8; 3]) -> Gram {
    pack(fold(b[0]), fold(b[1]), fold(b[2]))
}

/// The gram of three folded bytes (`fold`'s classes).
pub(crate) fn pack(c0: u8, c1: u8, c2: u8) -> Gram {
    c0 as u32 | (c1 as u32) << CLASS_BITS | (c2 as u32) << (2 * CLASS_BITS)
}

/// A thread's dedupe state for `file_grams`: one bit per possible gram
/// (2^18 bits = 32 KiB, in L1 cache) and the list of words set, so only those are cleared
/// (never a 32 KiB memset per file: most files are small).
pub(crate) struct GramScratch {
    bits: Vec<u64>,
    /// Indices of words of `bits` made non-zero; sized for every word plus
    /// one slot the branch-free push writes past the end.
    words: Vec<u32>,
}

impl GramScratch {
    pub(crate) fn new() -> GramScratch {
        GramScratch {
            bits: vec![0; GRAM_SPACE / 64],
            words: vec![0; GRAM_SPACE / 64 + 1],
        }
    }
}

impl Default for GramScratch {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether a gram holds a `\n` (or is one of the two made before a file's
/// third byte, which start with the `\n` the scan starts from).
fn spans_lines(g: Gram) -> bool {
    let class = |i: u32| (g >> (i * CLASS_BITS)) & ((1 << CLASS_BITS) - 1);
    (0..3).any(|i| class(i) == NL as u32)
}

/// Bytes folded at a time before their grams are taken: a buffer that stays
/// in L1 cache (4 KiB).
const BLOCK: usize = 4096;

/// The distinct grams of `content`, in no particular order, into `out`
/// (cleared first). The scratch is left clear for the next file.
pub(crate) fn file_grams(content: &[u8], scratch: &mut GramScratch, out: &mut Vec<Gram>) {
    out.clear();
    let GramScratch { bits, words } = scratch;
    let bits: &mut [u64; GRAM_SPACE / 64] = (&mut bits[..]).try_into().expect("sized");
    let words: &mut [u32; GRAM_SPACE / 64 + 1] = (&mut words[..]).try_into().expect("sized");
    let mut len = 0usize;
    // Folded bytes, after the last two of the previous block; the file
    // starts as if after a line end, so its first two grams span lines and
    // are dropped with every other gram that does.
    let mut buf = [0u8; BLOCK + 2];
    buf[0] = NL;
    buf[1] = NL;
    for block in content.chunks(BLOCK) {
        for (d, &b) in buf[2..].iter_mut().zip(block) {
            *d = FOLD[b as usize];
        }
        let n = block.len();
        for ((&c0, &c1), &c2) in buf[..n].iter().zip(&buf[1..n + 1]).zip(&buf[2..n + 2]) {
            let gram = pack(c0, c1, c2);
            let w = (gram >> 6) as usize;
            let old = bits[w];
            bits[w] = old | 1 << (gram & 63);
            // Branch-free: the slot is always written, kept only for a
            // word's first bit.
            words[len] = w as u32;
            len += (old == 0) as usize;
        }
        buf[0] = buf[n];
        buf[1] = buf[n + 1];
    }
    for &wi in &words[..len] {
        let mut w = std::mem::take(&mut bits[wi as usize]);
        while w != 0 {
            let g = wi * 64 + w.trailing_zeros();
            w &= w - 1;
            if !spans_lines(g) {
                out.push(g);
            }
        }
    }
}

/// A large file's exact byte 5-grams, as a Bloom filter: the index's
/// grams fold case and punctuation, so a file of generated upper-case
/// names (`IRQ_..._AFFINITY_..._HINT`) holds every gram of
/// `irq_set_affinity_hint` and is read by every such search; this lets an
/// exact literal pass it by. 5-grams also say which trigrams are adjacent:
/// a minified bundle holds every trigram of `truncateHead` (`tru`, `teH`,
/// `eHe`, ...) scattered over its names, but rarely its 5-grams. A literal
/// holding every 5-gram holds every trigram, so trigrams would only speak
/// for literals of three or four bytes, which large files hold anyway.
/// Never a false "absent"; sometimes a false "present".
pub(crate) struct RawBloom {
    bits: Box<[u64]>,
}

impl RawBloom {
    /// On the small bench corpus, 9 large bundles hold every trigram of
    /// `truncateHead` without holding it; 4 of them hold its 4-grams too,
    /// none its 5-grams.
    const GRAM: usize = 5;
    /// Bits per byte of the file to start with: an eighth (rounded up to a
    /// power of two, so at most a quarter), two bits a 5-gram. Source and
    /// generated headers repeat their 5-grams and leave that sparse.
    const BYTES_PER_BIT: usize = 8;
    /// A filter fuller than this is made again four times larger (up to a
    /// bit per byte): minified or high-entropy files have about a distinct
    /// 5-gram every few bytes, and a full filter says "may hold" to all.
    /// Half full, a literal's 5-gram passes by chance a quarter of the
    /// time, so a handful of them rarely do.
    const MAX_FILL: f64 = 0.5;

    pub(crate) fn of(content: &[u8]) -> RawBloom {
        let most = content.len().next_power_of_two().max(64 * 64);
        let mut len = (content.len() / Self::BYTES_PER_BIT)
            .next_power_of_two()
            .max(64 * 64);
        loop {
            let bloom = Self::sized(content, len);
            let ones: u64 = bloom.bits.iter().map(|w| u64::from(w.count_ones())).sum();
            if ones as f64 <= Self::MAX_FILL * len as f64 || len >= most {
                return bloom;
            }
            len = (len * 4).min(most);
        }
    }

    fn sized(content: &[u8], len: usize) -> RawBloom {
        let mut bits = vec![0u64; len / 64].into_boxed_slice();
        let mask = len as u64 - 1;
        let mut window = 0u64;
        for (i, &b) in content.iter().enumerate() {
            window = window << 8 | b as u64;
            if i + 1 >= Self::GRAM {
                for bit in Self::bits_of(window, mask) {
                    bits[(bit / 64) as usize] |= 1 << (bit % 64);
                }
            }
        }
        RawBloom { bits }
    }

    /// Two bit positions for the 5-gram that ends `window`, from a folded
    /// multiply (the two halves of a 128-bit product, xored): every bit of
    /// it depends on every byte, at one multiply a byte.
    fn bits_of(window: u64, mask: u64) -> [u64; 2] {
        let key = window & ((1 << (8 * Self::GRAM)) - 1);
        let product = u128::from(key) * 0x9e37_79b9_7f4a_7c15;
        let h = (product >> 64) as u64 ^ product as u64;
        [h & mask, (h >> 32) & mask]
    }

    /// Whether every 5-gram of `literal` may be in the file (a literal
    /// shorter than a 5-gram may always be).
    pub(crate) fn may_hold(&self, literal: &[u8]) -> bool {
        let mask = (self.bits.len() * 64) as u64 - 1;
        literal.windows(Self::GRAM).all(|w| {
            let window = w.iter().fold(0u64, |acc, &b| acc << 8 | b as u64);
            Self::bits_of(window, mask)
                .iter()
                .all(|&bit| self.bits[(bit / 64) as usize] >> (bit % 64) & 1 != 0)
        })
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.bits.len() * 8
    }
}

// ---------------------------------------------------------------------------
// Varints

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint at `*pos`, advancing it.
fn get_varint(data: &[u8], pos: &mut usize) -> u32 {
    let mut v = 0u32;
    let mut shift = 0;
    loop {
        let b = data[*pos];
        *pos += 1;
        v |= ((b & 0x7f) as u32) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

// ---------------------------------------------------------------------------
// Segments

/// Top bit of a directory entry's end offset: the list is a bitmap over the
/// segment's id range rather than delta varints.
const BITMAP: u32 = 1 << 31;

/// Posting lists of the files with ids in `lo..hi`, for every gram those
/// files hold. Each list is either delta varints (the first relative to
/// `lo`) or, when smaller, a bitmap of `hi - lo` bits.
pub(crate) struct Segment {
    lo: u32,
    hi: u32,
    /// Ids holding at least one gram (files without grams are not counted).
    files: u32,
    /// Which ids of `lo..hi` hold grams, one bit each: tells which are dead
    /// weight once no longer live.
    held: Box<[u64]>,
    grams: Box<[Gram]>,
    /// End of each gram's list in `data` (its start is the previous end),
    /// `BITMAP` set when it is a bitmap.
    ends: Box<[u32]>,
    data: Box<[u8]>,
    postings: u64,
}

/// One list of a segment, decodable to ids.
#[derive(Clone, Copy)]
pub(crate) struct List<'a> {
    lo: u32,
    bitmap: bool,
    data: &'a [u8],
}

impl List<'_> {
    /// Calls `f` with each id, in increasing order.
    pub(crate) fn for_each(&self, mut f: impl FnMut(u32)) {
        if self.bitmap {
            for (i, &byte) in self.data.iter().enumerate() {
                let mut b = byte;
                while b != 0 {
                    f(self.lo + (i * 8) as u32 + b.trailing_zeros());
                    b &= b - 1;
                }
            }
        } else {
            let mut pos = 0;
            let mut id = self.lo;
            while pos < self.data.len() {
                id += get_varint(self.data, &mut pos);
                f(id);
            }
        }
    }

    /// Sets bit `id % 64` of word `id / 64` of `bits` for each id of the
    /// list: a bitmap list a byte at a time, not a bit at a time (a gram
    /// of most files then costs microseconds, not milliseconds).
    /// `bits` must cover the segment's ids.
    pub(crate) fn or_into(&self, bits: &mut [u64]) {
        if !self.bitmap {
            self.for_each(|id| bits[id as usize / 64] |= 1 << (id % 64));
            return;
        }
        for (i, &byte) in self.data.iter().enumerate() {
            if byte == 0 {
                continue;
            }
            let at = self.lo as usize + i * 8;
            let (word, shift) = (at / 64, at % 64);
            bits[word] |= u64::from(byte) << shift;
            // A byte that straddles two words (the segment starts off a
            // multiple of 8); its bits past the segment's end are clear.
            if shift > 56 && byte >> (64 - shift) != 0 {
                bits[word + 1] |= u64::from(byte) >> (64 - shift);
            }
        }
    }
}

impl Segment {
    /// The ids this segment covers.
    pub(crate) fn id_range(&self) -> std::ops::Range<u32> {
        self.lo..self.hi
    }

    /// Heap bytes held.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.grams.len() * 4 + self.ends.len() * 4 + self.data.len() + self.held.len() * 8
    }

    /// Whether `id` holds grams here.
    fn holds(&self, id: u32) -> bool {
        let bit = (id - self.lo) as usize;
        self.held[bit / 64] >> (bit % 64) & 1 != 0
    }

    /// (gram, id) pairs stored.
    #[cfg(test)]
    pub(crate) fn postings(&self) -> u64 {
        self.postings
    }

    /// The list of `gram`, if any file of the segment holds it.
    pub(crate) fn list(&self, gram: Gram) -> Option<List<'_>> {
        let i = self.grams.binary_search(&gram).ok()?;
        Some(self.list_at(i))
    }

    /// Every list, in gram order.
    #[cfg(test)]
    pub(crate) fn lists(&self) -> impl Iterator<Item = List<'_>> {
        (0..self.grams.len()).map(|i| self.list_at(i))
    }

    fn list_at(&self, i: usize) -> List<'_> {
        let start = if i == 0 {
            0
        } else {
            (self.ends[i - 1] & !BITMAP) as usize
        };
        let end = self.ends[i];
        List {
            lo: self.lo,
            bitmap: end & BITMAP != 0,
            data: &self.data[start..(end & !BITMAP) as usize],
        }
    }
}

impl Segment {
    /// Appends the segment for the cache file (`decode` reads it back).
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u32(self.lo);
        w.u32(self.hi);
        w.u64s(&self.held);
        w.u32s(&self.grams);
        w.u32s(&self.ends);
        w.bytes(&self.data);
    }

    /// A segment from the cache file, only if it is one `encode` could have
    /// written: grams in the gram space and increasing, ends within the
    /// data, each list a bitmap of the id range or varints of increasing ids
    /// inside it. Its counts are recomputed, not read. `lo` at least `from`
    /// (segments come in id order), `hi` at most `ids`.
    pub(crate) fn decode(c: &mut Cursor<'_>, from: u32, ids: u32) -> Option<Segment> {
        let (lo, hi) = (c.u32()?, c.u32()?);
        if lo < from || hi < lo || hi > ids {
            return None;
        }
        let held = c.u64s()?;
        let grams = c.u32s()?;
        let ends = c.u32s()?;
        let data = c.bytes()?;
        let span = (hi - lo) as usize;
        let bits_past = |words: &[u64]| match span % 64 {
            0 => false,
            used => words.last().is_some_and(|&w| w >> used != 0),
        };
        if held.len() != span.div_ceil(64) || bits_past(&held) || ends.len() != grams.len() {
            return None;
        }
        if grams.windows(2).any(|w| w[0] >= w[1]) || grams.last().is_some_and(|&g| g >> 18 != 0) {
            return None;
        }
        let mut postings = 0u64;
        let mut start = 0usize;
        for &end in ends.iter() {
            let stop = (end & !BITMAP) as usize;
            let list = data.get(start..stop)?;
            postings += if end & BITMAP != 0 {
                let past = span % 8;
                if list.len() != span.div_ceil(8) || (past != 0 && list.last()? >> past != 0) {
                    return None;
                }
                list.iter().map(|b| u64::from(b.count_ones())).sum::<u64>()
            } else {
                checked_ids(list, lo, hi)?
            };
            start = stop;
        }
        if start != data.len() {
            return None;
        }
        let files = held.iter().map(|w| w.count_ones()).sum();
        Some(Segment {
            lo,
            hi,
            files,
            held: held.into_boxed_slice(),
            grams: grams.into_boxed_slice(),
            ends: ends.into_boxed_slice(),
            data: data.into(),
            postings,
        })
    }
}

/// How many ids a varint list holds, if every varint ends inside it, fits
/// 32 bits, and the ids increase inside `lo..hi` (the first may be `lo`).
fn checked_ids(list: &[u8], lo: u32, hi: u32) -> Option<u64> {
    let (mut pos, mut id, mut n) = (0, lo, 0u64);
    while pos < list.len() {
        let mut delta = 0u32;
        let mut shift = 0;
        loop {
            let b = *list.get(pos)?;
            pos += 1;
            if shift == 28 && b > 0x0f {
                return None;
            }
            delta |= u32::from(b & 0x7f) << shift;
            if b < 0x80 {
                break;
            }
            shift += 7;
        }
        if n > 0 && delta == 0 {
            return None;
        }
        id = id.checked_add(delta).filter(|&id| id < hi)?;
        n += 1;
    }
    Some(n)
}

impl RawBloom {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u64s(&self.bits);
    }

    /// A filter from the cache file: a power of two of words, as `of` makes.
    pub(crate) fn decode(c: &mut Cursor<'_>) -> Option<RawBloom> {
        let bits = c.u64s()?;
        bits.len().is_power_of_two().then(|| RawBloom {
            bits: bits.into_boxed_slice(),
        })
    }
}

/// Encodes sorted ids (within `lo..hi`) as the smaller of delta varints and
/// a bitmap, appending to `data`; returns whether it is a bitmap.
fn encode_list(ids: &[u32], lo: u32, hi: u32, data: &mut Vec<u8>) -> bool {
    let start = data.len();
    let mut prev = lo;
    for &id in ids {
        put_varint(data, id - prev);
        prev = id;
    }
    let bitmap_len = (hi - lo).div_ceil(8) as usize;
    if data.len() - start <= bitmap_len {
        return false;
    }
    data.truncate(start);
    data.resize(start + bitmap_len, 0);
    for &id in ids {
        let bit = (id - lo) as usize;
        data[start + bit / 8] |= 1 << (bit % 8);
    }
    true
}

/// Distinct grams a builder keeps in a hash table; past that, a list per
/// possible gram (`Lists::Direct`). A small builder (re-indexed files)
/// never pays for the large table, a whole build never pays for hashing.
const HASHED_GRAMS: usize = 1 << 16;

/// A multiplicative hash: grams are already well spread integers.
#[derive(Default, Clone, Copy)]
struct GramHasher(u64);
impl std::hash::Hasher for GramHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("grams hash as u32")
    }
    fn write_u32(&mut self, g: u32) {
        self.0 = (g as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The lists while they grow: a few grams' in a map; past `HASHED_GRAMS`
/// (or once text is added in bulk), a list per possible gram, the gram its
/// index (8 MiB), so lists are found without a lookup and in gram order.
enum Lists {
    Hashed(std::collections::HashMap<Gram, Growing, std::hash::BuildHasherDefault<GramHasher>>),
    Direct(Vec<Growing>),
}

/// One gram's list while it grows: delta varints, the first relative to the
/// segment's first id.
struct Growing {
    last: u32,
    data: Vec<u8>,
}

impl Growing {
    fn push(&mut self, id: u32) {
        put_varint(&mut self.data, id - self.last);
        self.last = id;
    }
}

/// Builds a segment from files added in increasing id order: each gram's
/// list grows in its own buffer, so a file's grams are appended where they
/// go and nothing is sorted but the (few) distinct grams at the end.
pub(crate) struct SegmentBuilder {
    lo: Option<u32>,
    last: Option<u32>,
    files: u32,
    /// Ids (relative to `lo`) holding grams, one bit each.
    held: Vec<u64>,
    lists: Lists,
    postings: u64,
    /// Files added as text, not yet in `lists`.
    chunk: Option<Box<Chunk>>,
}

/// Ids in a chunk: one bit each in a `u64`.
const CHUNK_IDS: u32 = 64;

/// Files added as text (`add_text`), up to `CHUNK_IDS` ids at a time, as a
/// bit matrix: per gram, a bit per id of the chunk. A byte costs one bit
/// set, with no per-file dedupe; the chunk's grams come out in gram order,
/// each list touched once per chunk rather than once per file.
struct Chunk {
    /// Its first id, relative to the builder's `lo` (a multiple of
    /// `CHUNK_IDS`); `None` while it holds no file.
    base: Option<u32>,
    /// 2^18 words: 2 MiB, allocated once per builder.
    bits: Vec<u64>,
    /// Flushed chunks' grams with their ids (gram, first id, id bits), by
    /// the gram's band, waiting to go to the lists a band at a time.
    staged: Vec<Vec<(Gram, u32, u64)>>,
    staged_len: usize,
}

/// Grams in a band: a band's list ends and entries (1024 × 96 bytes) stay
/// in cache while its staged ids go to them; going to the lists straight
/// from each chunk, every list end was a miss (the lists hold ~80 MB).
const BAND_BITS: u32 = 10;
/// Staged entries (16 bytes each) before they go to the lists: 16 MiB,
/// about 24 chunks' worth on source code.
const STAGED_MAX: usize = 1 << 20;

impl Default for SegmentBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl SegmentBuilder {
    pub(crate) fn new() -> SegmentBuilder {
        SegmentBuilder {
            lo: None,
            last: None,
            files: 0,
            held: Vec::new(),
            lists: Lists::Hashed(Default::default()),
            postings: 0,
            chunk: None,
        }
    }

    /// A list per possible gram from now on.
    fn go_direct(&mut self, lo: u32) {
        if let Lists::Hashed(map) = &mut self.lists {
            let mut direct: Vec<Growing> = (0..GRAM_SPACE)
                .map(|_| Growing {
                    last: lo,
                    data: Vec::new(),
                })
                .collect();
            for (g, l) in map.drain() {
                direct[g as usize] = l;
            }
            self.lists = Lists::Direct(direct);
        }
    }

    /// Adds file `id` (greater than any added before) with its distinct
    /// grams (as `file_grams` gives them, in any order).
    pub(crate) fn add(&mut self, id: u32, grams: &[Gram]) {
        assert!(self.last.is_none_or(|l| id > l), "ids must increase");
        self.flush_chunk();
        self.drain_staged();
        let lo = *self.lo.get_or_insert(id);
        self.last = Some(id);
        if grams.is_empty() {
            return;
        }
        self.files += 1;
        self.postings += grams.len() as u64;
        let bit = (id - lo) as usize;
        if self.held.len() <= bit / 64 {
            self.held.resize(bit / 64 + 1, 0);
        }
        self.held[bit / 64] |= 1 << (bit % 64);
        if let Lists::Hashed(map) = &self.lists {
            if map.len() + grams.len() > HASHED_GRAMS {
                self.go_direct(lo);
            }
        }
        match &mut self.lists {
            Lists::Direct(direct) => {
                for &g in grams {
                    direct[g as usize].push(id);
                }
            }
            Lists::Hashed(map) => {
                for &g in grams {
                    map.entry(g)
                        .or_insert_with(|| Growing {
                            last: lo,
                            data: Vec::new(),
                        })
                        .push(id);
                }
            }
        }
    }

    /// Adds file `id` (greater than any added before) with its contents:
    /// the grams `file_grams` would give, taken in bulk (the first build).
    pub(crate) fn add_text(&mut self, id: u32, content: &[u8]) {
        assert!(self.last.is_none_or(|l| id > l), "ids must increase");
        let lo = *self.lo.get_or_insert(id);
        self.last = Some(id);
        let base = (id - lo) / CHUNK_IDS * CHUNK_IDS;
        if self.chunk.as_ref().is_some_and(|c| c.base != Some(base)) {
            self.flush_chunk();
            if self
                .chunk
                .as_ref()
                .is_some_and(|c| c.staged_len > STAGED_MAX)
            {
                self.drain_staged();
            }
        }
        let chunk = self.chunk.get_or_insert_with(|| {
            Box::new(Chunk {
                base: None,
                bits: vec![0; GRAM_SPACE],
                staged: (0..GRAM_SPACE >> BAND_BITS).map(|_| Vec::new()).collect(),
                staged_len: 0,
            })
        });
        chunk.base = Some(base);
        let bits: &mut [u64; GRAM_SPACE] = (&mut chunk.bits[..]).try_into().expect("sized");
        let bit = 1u64 << (id - lo - base);
        // The file starts as if after a line end (as in `file_grams`): its
        // first two grams hold `\n` and are dropped at the flush.
        let mut gram = pack(0, NL, NL);
        let next =
            |gram: Gram, b: u8| gram >> CLASS_BITS | (FOLD[b as usize] as u32) << (2 * CLASS_BITS);
        // Four grams loaded before any is stored: the loads overlap rather
        // than each waiting on the store before it (a repeated gram, as in
        // indentation, gets the same bit from each copy: still right).
        let mut quads = content.chunks_exact(4);
        for q in &mut quads {
            let g0 = next(gram, q[0]);
            let g1 = next(g0, q[1]);
            let g2 = next(g1, q[2]);
            let g3 = next(g2, q[3]);
            let words = [g0, g1, g2, g3].map(|g| bits[g as usize]);
            for (g, w) in [g0, g1, g2, g3].into_iter().zip(words) {
                bits[g as usize] = w | bit;
            }
            gram = g3;
        }
        for &b in quads.remainder() {
            gram = next(gram, b);
            bits[gram as usize] |= bit;
        }
    }

    /// Stages the chunk's postings for the lists and clears it for the
    /// next chunk.
    fn flush_chunk(&mut self) {
        let Some(base) = self.chunk.as_mut().and_then(|c| c.base.take()) else {
            return;
        };
        let lo = self.lo.expect("a chunk has ids");
        let chunk = self.chunk.as_mut().expect("has a base");
        let mut held = 0u64;
        for (g, word) in chunk.bits.iter_mut().enumerate() {
            if *word == 0 {
                continue;
            }
            let ids = std::mem::take(word);
            if !spans_lines(g as Gram) {
                held |= ids;
                self.postings += u64::from(ids.count_ones());
                chunk.staged[g >> BAND_BITS].push((g as Gram, lo + base, ids));
                chunk.staged_len += 1;
            }
        }
        let word = (base / CHUNK_IDS) as usize;
        if self.held.len() <= word {
            self.held.resize(word + 1, 0);
        }
        self.held[word] |= held;
        self.files += held.count_ones();
    }

    /// Moves the staged postings to the lists, a band at a time.
    fn drain_staged(&mut self) {
        if self.chunk.as_ref().is_none_or(|c| c.staged_len == 0) {
            return;
        }
        self.go_direct(self.lo.expect("staged ids"));
        let (Some(chunk), Lists::Direct(direct)) = (&mut self.chunk, &mut self.lists) else {
            unreachable!("staged, and made direct above")
        };
        for band in &mut chunk.staged {
            for &(g, first, mut ids) in band.iter() {
                let list = &mut direct[g as usize];
                while ids != 0 {
                    list.push(first + ids.trailing_zeros());
                    ids &= ids - 1;
                }
            }
            band.clear();
        }
        chunk.staged_len = 0;
    }

    /// The segment of every file added, its lists in gram order, each a
    /// bitmap where that is smaller.
    pub(crate) fn finish(mut self) -> Segment {
        self.flush_chunk();
        self.drain_staged();
        self.chunk = None;
        let lo = self.lo.unwrap_or(0);
        let hi = self.last.map_or(lo, |l| l + 1);
        let mut held = self.held;
        held.resize(((hi - lo) as usize).div_ceil(64), 0);
        let lists: Vec<(Gram, Growing)> = match self.lists {
            Lists::Direct(direct) => direct
                .into_iter()
                .enumerate()
                .filter(|(_, l)| !l.data.is_empty())
                .map(|(g, l)| (g as Gram, l))
                .collect(),
            Lists::Hashed(map) => {
                let mut lists: Vec<(Gram, Growing)> = map.into_iter().collect();
                lists.sort_unstable_by_key(|(g, _)| *g);
                lists
            }
        };
        let bytes: usize = lists.iter().map(|(_, l)| l.data.len()).sum();
        let mut grams = Vec::with_capacity(lists.len());
        let mut ends = Vec::with_capacity(lists.len());
        let mut data = Vec::with_capacity(bytes);
        let bitmap_len = (hi - lo).div_ceil(8) as usize;
        let mut ids = Vec::new();
        for (gram, l) in lists {
            let mut end = data.len() as u32 + l.data.len() as u32;
            if l.data.len() > bitmap_len {
                ids.clear();
                List {
                    lo,
                    bitmap: false,
                    data: &l.data,
                }
                .for_each(|id| ids.push(id));
                encode_list(&ids, lo, hi, &mut data);
                end = data.len() as u32 | BITMAP;
            } else {
                data.extend_from_slice(&l.data);
            }
            grams.push(gram);
            ends.push(end);
        }
        Segment {
            lo,
            hi,
            files: self.files,
            held: held.into_boxed_slice(),
            grams: grams.into_boxed_slice(),
            ends: ends.into_boxed_slice(),
            data: data.into_boxed_slice(),
            postings: self.postings,
        }
    }
}

/// Merges segments (in id order, ranges disjoint and increasing) into one,
/// keeping only ids for which `live` holds.
fn merge(segments: &[Segment], live: &dyn Fn(u32) -> bool) -> Segment {
    let lo = segments.first().map_or(0, |s| s.lo);
    let hi = segments.last().map_or(lo, |s| s.hi);
    let mut grams = Vec::new();
    let mut ends = Vec::new();
    let mut data = Vec::new();
    let mut postings = 0u64;
    // Liveness asked once per id.
    let alive: Vec<bool> = (lo..hi).map(live).collect();
    let mut held = vec![0u64; ((hi - lo) as usize).div_ceil(64)];
    let mut cursor = vec![0usize; segments.len()];
    let mut ids = Vec::new();
    loop {
        let mut gram = u32::MAX;
        for (s, seg) in segments.iter().enumerate() {
            if let Some(&g) = seg.grams.get(cursor[s]) {
                gram = gram.min(g);
            }
        }
        if gram == u32::MAX {
            break;
        }
        ids.clear();
        for (s, seg) in segments.iter().enumerate() {
            if seg.grams.get(cursor[s]) == Some(&gram) {
                seg.list_at(cursor[s]).for_each(|id| {
                    if alive[(id - lo) as usize] {
                        ids.push(id)
                    }
                });
                cursor[s] += 1;
            }
        }
        if ids.is_empty() {
            continue;
        }
        for &id in &ids {
            let bit = (id - lo) as usize;
            held[bit / 64] |= 1 << (bit % 64);
        }
        postings += ids.len() as u64;
        let bitmap = encode_list(&ids, lo, hi, &mut data);
        grams.push(gram);
        ends.push(data.len() as u32 | if bitmap { BITMAP } else { 0 });
    }
    Segment {
        lo,
        hi,
        files: held.iter().map(|w| w.count_ones()).sum(),
        held: held.into_boxed_slice(),
        grams: grams.into_boxed_slice(),
        ends: ends.into_boxed_slice(),
        data: data.into_boxed_slice(),
        postings,
    }
}

/// Every segment of an index, in id order.
#[derive(Default)]
pub(crate) struct Postings {
    segments: Vec<Segment>,
}

/// A segment with at most this many files is small: re-indexed files come
/// in such, and merging them keeps lookups from visiting many segments.
const SMALL_FILES: u32 = 4096;

impl Postings {
    #[cfg(test)]
    pub(crate) fn new() -> Postings {
        Postings::default()
    }

    /// Adds a segment of ids above every id held.
    pub(crate) fn push(&mut self, segment: Segment) {
        if let Some(last) = self.segments.last() {
            assert!(segment.lo >= last.hi, "segments must come in id order");
        }
        self.segments.push(segment);
    }

    /// The segments from the cache file, in id order, below `ids`.
    pub(crate) fn decode(c: &mut Cursor<'_>, ids: u32) -> Option<Postings> {
        let n = c.count(8)?;
        let mut segments = Vec::with_capacity(n);
        let mut from = 0;
        for _ in 0..n {
            let segment = Segment::decode(c, from, ids)?;
            from = segment.hi;
            segments.push(segment);
        }
        Some(Postings { segments })
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u64(self.segments.len() as u64);
        for segment in &self.segments {
            segment.encode(w);
        }
    }

    pub(crate) fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Merges the trailing run of small segments into one (when there are at
    /// least two), and rewrites any segment at least a quarter of whose
    /// files are no longer live (`live` false: re-indexed or deleted), so
    /// dead ids stop costing memory and lookup time. Returns whether
    /// anything changed.
    pub(crate) fn merge_small(&mut self, live: &dyn Fn(u32) -> bool) -> bool {
        let mut changed = false;
        let first_small = self
            .segments
            .iter()
            .rposition(|s| s.files > SMALL_FILES)
            .map_or(0, |i| i + 1);
        if self.segments.len() - first_small >= 2 {
            let merged = merge(&self.segments[first_small..], live);
            self.segments.truncate(first_small);
            self.segments.push(merged);
            changed = true;
        }
        for seg in &mut self.segments {
            let dead = seg
                .id_range()
                .filter(|&id| seg.holds(id) && !live(id))
                .count() as u64;
            // A quarter: rewriting costs a pass over the segment, worth it
            // once that much of it is garbage.
            if dead > 0 && dead * 4 >= seg.files as u64 {
                *seg = merge(std::slice::from_ref(seg), live);
                changed = true;
            }
        }
        self.segments.retain(|s| s.postings > 0 || s.files > 0);
        changed
    }

    /// Heap bytes held by the posting lists.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.segments
            .iter()
            .map(Segment::memory_bytes)
            .sum::<usize>()
            + self.segments.capacity() * std::mem::size_of::<Segment>()
    }

    /// One past the largest id held.
    pub(crate) fn id_end(&self) -> u32 {
        self.segments.last().map_or(0, |s| s.hi)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn grams(text: &[u8]) -> Vec<Gram> {
        let mut scratch = GramScratch::new();
        let mut out = Vec::new();
        file_grams(text, &mut scratch, &mut out);
        out.sort();
        out
    }

    /// The distinct folded trigrams within lines, by brute force.
    fn naive(text: &[u8]) -> Vec<Gram> {
        let mut v: Vec<Gram> = text
            .split(|&b| b == b'\n')
            .flat_map(|line| line.windows(3).map(|w| gram_of([w[0], w[1], w[2]])))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    #[test]
    fn grams_are_distinct_folded_and_within_lines() {
        assert_eq!(grams(b"ab"), Vec::<Gram>::new());
        assert_eq!(grams(b"abC\nABc"), vec![gram_of(*b"abc")]);
        assert_eq!(grams(b"ab\ncd"), Vec::<Gram>::new());
        let text =
            b"Hello, World\nhello world\n\xc3\x89t\xc3\xa9 \xe2\x84\xaa\0\0\0zz\n\n\nab\nabc\n";
        assert_eq!(grams(text), naive(text));
    }

    #[test]
    fn scratch_is_left_clear() {
        let mut scratch = GramScratch::new();
        let mut out = Vec::new();
        file_grams(b"abcdefgh", &mut scratch, &mut out);
        file_grams(b"xyz\n", &mut scratch, &mut out);
        assert_eq!(out, vec![gram_of(*b"xyz")]);
        assert!(scratch.bits.iter().all(|&w| w == 0));
    }

    fn ids_of(seg: &Segment, gram: Gram) -> Vec<u32> {
        let mut v = Vec::new();
        if let Some(list) = seg.list(gram) {
            list.for_each(|id| v.push(id));
        }
        v
    }

    /// A small deterministic PRNG (xorshift64*).
    pub(crate) struct Rng(pub(crate) u64);
    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Files with random grams from a small space (so some grams are dense
    /// and become bitmaps), built through runs and checked against a map.
    fn random_files(rng: &mut Rng, first: u32, n: u32) -> Vec<(u32, Vec<Gram>)> {
        (0..n)
            .map(|i| {
                let mut g: Vec<Gram> = (0..rng.below(40))
                    .map(|_| {
                        let r = rng.below(100);
                        if r < 50 {
                            (r % 5) as u32
                        } else {
                            rng.below(GRAM_SPACE as u64) as u32
                        }
                    })
                    .collect();
                g.sort();
                g.dedup();
                (first + i * 2, g)
            })
            .collect()
    }

    fn build(files: &[(u32, Vec<Gram>)]) -> Segment {
        let mut b = SegmentBuilder::new();
        for (id, g) in files {
            b.add(*id, g);
        }
        b.finish()
    }

    fn expected(files: &[(u32, Vec<Gram>)], gram: Gram, live: &dyn Fn(u32) -> bool) -> Vec<u32> {
        files
            .iter()
            .filter(|(id, g)| live(*id) && g.contains(&gram))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Random text: short and long lines, every class, non-ASCII bytes,
    /// empty and tiny files.
    fn random_text(rng: &mut Rng) -> Vec<u8> {
        const ALPHABET: &[u8] = b"aAbBzZ09_ \t\n\r(){};.,=<>\"'#!$%@~\\`\x00\x7f\x80\xc3\xa9\xff";
        let len = match rng.below(4) {
            0 => rng.below(4),
            1 => rng.below(64),
            _ => rng.below(3000),
        };
        (0..len)
            .map(|_| ALPHABET[rng.below(ALPHABET.len() as u64) as usize])
            .collect()
    }

    #[test]
    fn raw_blooms_never_miss_and_pass_by_other_cases() {
        let mut rng = Rng(31);
        for _ in 0..200 {
            let text = random_text(&mut rng);
            let bloom = RawBloom::of(&text);
            for _ in 0..20 {
                let at = rng.below(text.len() as u64 + 1) as usize;
                let end = (at + rng.below(12) as usize).min(text.len());
                assert!(bloom.may_hold(&text[at..end]), "{:?}", &text[at..end]);
            }
        }
        let mut header = Vec::new();
        for i in 0..20_000 {
            header.extend_from_slice(
                format!("#define IRQ_SET_AFFINITY_HINT_{i} 0x{i:x}\n").as_bytes(),
            );
        }
        let bloom = RawBloom::of(&header);
        assert!(bloom.may_hold(b"IRQ_SET_AFFINITY_HINT_1999 0x"));
        assert!(!bloom.may_hold(b"irq_set_affinity_hint"));
        assert!(bloom.may_hold(b"ir"), "too short to say");
        // Every trigram of the literal, none of them adjacent, as in a
        // minified bundle's names: its 5-grams tell it apart.
        let mut bundle = Vec::new();
        for i in 0..5_000 {
            for t in [
                "tru", "run", "unc", "nca", "cat", "ate", "teH", "eHe", "Hea", "ead",
            ] {
                bundle.extend_from_slice(format!("{t}{i},").as_bytes());
            }
        }
        let bloom = RawBloom::of(&bundle);
        assert!(bloom.may_hold(b"teH4999,ead"));
        assert!(!bloom.may_hold(b"truncateHead"));
        // High entropy: a new 5-gram every byte. The filter grows until it
        // tells strings apart (but not past a bit per byte).
        let noise: Vec<u8> = (0..300_000).map(|_| rng.below(256) as u8).collect();
        let bloom = RawBloom::of(&noise);
        assert!(bloom.memory_bytes() <= noise.len().next_power_of_two() / 8);
        let passed = (0..200)
            .filter(|_| {
                let probe: Vec<u8> = (0..12).map(|_| rng.below(256) as u8).collect();
                bloom.may_hold(&probe)
            })
            .count();
        assert!(passed <= 10, "{passed} of 200 random strings may be held");
        assert!(bloom.may_hold(&noise[1000..1012]));
    }

    #[test]
    fn text_in_bulk_gives_the_segment_of_its_grams() {
        let mut rng = Rng(23);
        let mut scratch = GramScratch::new();
        let mut grams = Vec::new();
        let (mut by_text, mut by_grams) = (SegmentBuilder::new(), SegmentBuilder::new());
        let mut id = 5;
        let mut files = Vec::new();
        // Gaps in the ids cross chunk boundaries, and skip whole chunks.
        for _ in 0..700 {
            id += 1 + rng.below(3) as u32 + if rng.below(50) == 0 { 200 } else { 0 };
            let text = random_text(&mut rng);
            file_grams(&text, &mut scratch, &mut grams);
            by_text.add_text(id, &text);
            by_grams.add(id, &grams);
            files.push((id, grams.clone()));
        }
        let (a, b) = (by_text.finish(), by_grams.finish());
        assert_eq!(a.id_range(), b.id_range());
        assert_eq!((a.files, a.postings), (b.files, b.postings));
        assert_eq!(a.held, b.held);
        assert_eq!(a.grams, b.grams);
        for &gram in a.grams.iter() {
            assert_eq!(ids_of(&a, gram), expected(&files, gram, &|_| true));
        }
        assert!(a.grams.len() > 1000, "{} grams", a.grams.len());
    }

    #[test]
    fn segments_round_trip_lists_and_bitmaps() {
        let mut rng = Rng(7);
        let files = random_files(&mut rng, 10, 500);
        let seg = build(&files);
        let mut saw_bitmap = false;
        for i in 0..seg.grams.len() {
            saw_bitmap |= seg.list_at(i).bitmap;
        }
        assert!(saw_bitmap, "dense grams should be bitmaps");
        for (_, g) in files.iter().take(50) {
            for &gram in g {
                assert_eq!(ids_of(&seg, gram), expected(&files, gram, &|_| true));
            }
        }
        assert_eq!(ids_of(&seg, 77), expected(&files, 77, &|_| true));
        assert_eq!(seg.id_range(), 10..10 + 499 * 2 + 1);
    }

    #[test]
    fn many_grams_switch_to_the_dense_table() {
        let mut rng = Rng(11);
        let files: Vec<(u32, Vec<Gram>)> = (0..40)
            .map(|i| {
                let mut g: Vec<Gram> = (0..5000)
                    .map(|_| rng.below(GRAM_SPACE as u64) as u32)
                    .collect();
                g.push(i % 3);
                g.sort();
                g.dedup();
                (i * 3, g)
            })
            .collect();
        let mut b = SegmentBuilder::new();
        for (id, g) in &files {
            b.add(*id, g);
        }
        assert!(matches!(b.lists, Lists::Direct(_)));
        let seg = b.finish();
        for gram in 0..3 {
            assert_eq!(ids_of(&seg, gram), expected(&files, gram, &|_| true));
        }
        for &gram in files[7].1.iter().take(100) {
            assert_eq!(ids_of(&seg, gram), expected(&files, gram, &|_| true));
        }
    }

    #[test]
    fn merge_small_drops_dead_ids() {
        let mut rng = Rng(3);
        let mut postings = Postings::new();
        let mut all = Vec::new();
        for k in 0..5 {
            let files = random_files(&mut rng, 1000 * k, 100);
            postings.push(build(&files));
            all.extend(files);
        }
        let live = |id: u32| !id.is_multiple_of(3);
        assert!(postings.merge_small(&live));
        assert_eq!(postings.segments().len(), 1);
        let seg = &postings.segments()[0];
        for gram in 0..60 {
            assert_eq!(ids_of(seg, gram), expected(&all, gram, &live));
        }
        let before = postings.memory_bytes();
        assert!(!postings.merge_small(&live));
        // Kill most: the one segment is rewritten.
        let live2 = |id: u32| live(id) && id.is_multiple_of(4);
        assert!(postings.merge_small(&live2));
        assert!(postings.memory_bytes() < before);
        for gram in 0..60 {
            assert_eq!(
                ids_of(&postings.segments()[0], gram),
                expected(&all, gram, &live2)
            );
        }
    }

    /// Build figures on a real tree, for docs/index.md ("N-gram scheme"). Run:
    /// `PI_INDEX_CORPUS=bench/.corpus/linux cargo test --release -p
    /// pi-native-ops-core index::grams::tests::measure -- --ignored --nocapture`
    pub(crate) mod measure {
        use super::*;
        use std::path::{Path, PathBuf};

        /// This thread's CPU time: the machine is shared, so wall time would
        /// measure the neighbours.
        #[derive(Clone, Copy)]
        pub(crate) struct Instant(f64);
        impl Instant {
            pub(crate) fn now() -> Instant {
                let mut ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                // SAFETY: a valid out-pointer.
                unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
                Instant(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
            }
            pub(crate) fn elapsed(&self) -> std::time::Duration {
                Instant::now() - *self
            }
        }
        impl std::ops::Sub for Instant {
            type Output = std::time::Duration;
            fn sub(self, o: Instant) -> std::time::Duration {
                std::time::Duration::from_secs_f64((self.0 - o.0).max(0.0))
            }
        }

        /// Regular files under `dir` (no `.git`, symlinks not followed), sorted.
        pub(crate) fn files_under(dir: &Path) -> Vec<PathBuf> {
            let mut out = Vec::new();
            let mut stack = vec![dir.to_path_buf()];
            while let Some(d) = stack.pop() {
                let Ok(rd) = std::fs::read_dir(&d) else {
                    continue;
                };
                for e in rd.flatten() {
                    let Ok(t) = e.file_type() else { continue };
                    if t.is_dir() && e.file_name() != ".git" {
                        stack.push(e.path());
                    } else if t.is_file() {
                        out.push(e.path());
                    }
                }
            }
            out.sort();
            out
        }

        pub(crate) fn corpus() -> PathBuf {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
            let rel = std::env::var("PI_INDEX_CORPUS").unwrap_or("bench/.corpus/linux".into());
            root.join(rel)
        }

        /// The index of a tree: (postings, files, bytes indexed).
        pub(crate) fn build_tree(files: &[PathBuf], report: bool) -> (Postings, u64) {
            let t0 = Instant::now();
            let mut buf = Vec::new();
            let mut builder = SegmentBuilder::new();
            let (mut bytes, mut t_read, mut t_grams, mut t_add) = (0u64, 0f64, 0f64, 0f64);
            for (id, path) in files.iter().enumerate() {
                let t = Instant::now();
                buf.clear();
                let Ok(mut f) = std::fs::File::open(path) else {
                    continue;
                };
                if std::io::Read::read_to_end(&mut f, &mut buf).is_err() {
                    continue;
                }
                let t1 = Instant::now();
                bytes += buf.len() as u64;
                let t2 = Instant::now();
                builder.add_text(id as u32, &buf);
                let t3 = Instant::now();
                t_read += (t1 - t).as_secs_f64();
                t_grams += (t2 - t1).as_secs_f64();
                t_add += (t3 - t2).as_secs_f64();
            }
            let t4 = Instant::now();
            let seg = builder.finish();
            let t_finish = t4.elapsed().as_secs_f64();
            let mut postings = Postings::new();
            postings.push(seg);
            if report {
                let seg = &postings.segments()[0];
                let mem = postings.memory_bytes();
                let bitmaps = (0..seg.grams.len())
                    .filter(|&i| seg.list_at(i).bitmap)
                    .count();
                println!(
                    "files {} bytes {} ({:.1} MB) | grams {} bitmaps {} postings {} | memory {:.1} MB = {:.1}% (dir {:.1} MB, data {:.1} MB)",
                    files.len(), bytes, bytes as f64 / 1e6, seg.grams.len(), bitmaps, seg.postings(),
                    mem as f64 / 1e6, 100.0 * mem as f64 / bytes as f64,
                    (seg.grams.len() * 8) as f64 / 1e6, seg.data.len() as f64 / 1e6
                );
                println!(
                    "thread CPU time total {:.2} s: read {:.2} s, grams {:.2} s ({:.2} GB/s), add {:.2} s, finish {:.2} s; grams+segment {:.2} GB/s",
                    t0.elapsed().as_secs_f64(), t_read, t_grams, bytes as f64 / t_grams / 1e9, t_add, t_finish,
                    bytes as f64 / (t_grams + t_add + t_finish) / 1e9
                );
            }
            (postings, bytes)
        }

        #[test]
        #[ignore]
        fn build_figures() {
            let files = files_under(&corpus());
            // Twice: the first run warms the page cache.
            build_tree(&files, false);
            build_tree(&files, true);
        }
    }
}
