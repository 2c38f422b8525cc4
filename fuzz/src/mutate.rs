//! A small, seeded mutator: the fixed series of mutations `cargo test` runs over each corpus
//! (the coverage-guided search is libFuzzer's, through `cargo xtask fuzz`). The same seed
//! gives the same inputs on every machine, so a failure reproduces.

/// A SplitMix64 generator: enough randomness for mutations, and no dependency.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Bytes that parsers of this pod treat specially: separators, signs, limits, and the
/// characters of regular expressions, JSON and YAML.
const TOKENS: &[&[u8]] = &[
    b"0",
    b"-1",
    b"65535",
    b"65536",
    b"4294967296",
    b"99999999999999999999",
    b"+",
    b"-",
    b",",
    b":",
    b".",
    b"/",
    b"[",
    b"]",
    b"{",
    b"}",
    b"\"",
    b"\\",
    b"\n",
    b"\t",
    b" ",
    b"*",
    b"(",
    b")",
    b"(?",
    b"|",
    b"^",
    b"$",
    b"null",
    b"true",
    b"[]",
    b"{}",
    b"::",
    b"::ffff:",
    b"\xc3\xa9",
    b"\x00",
    b"---\n",
    b"- ",
    b"&a",
    b"*a",
    b"!!str ",
    b"1e400",
    b"NaN",
    b"svc",
    b"cluster.local",
];

/// One mutation of `input`: a byte changed, inserted or removed, a run copied or removed, a
/// token inserted or overwritten, or a splice with `other`.
pub fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    let at = |rng: &mut Rng, len: usize| rng.below(len + 1);
    match rng.below(8) {
        0 if !out.is_empty() => {
            let i = rng.below(out.len());
            out[i] ^= 1 << rng.below(8);
        }
        1 => {
            let i = at(rng, out.len());
            out.insert(i, rng.next_u64() as u8);
        }
        2 if !out.is_empty() => {
            let i = rng.below(out.len());
            let n = 1 + rng.below((out.len() - i).min(16));
            out.drain(i..i + n);
        }
        3 if !out.is_empty() => {
            let i = rng.below(out.len());
            let n = 1 + rng.below((out.len() - i).min(32));
            let run = out[i..i + n].to_vec();
            let j = at(rng, out.len());
            out.splice(j..j, run);
        }
        4 | 5 => {
            let token = TOKENS[rng.below(TOKENS.len())];
            let i = at(rng, out.len());
            if rng.below(2) == 0 {
                out.splice(i..i, token.iter().copied());
            } else {
                let end = (i + token.len()).min(out.len());
                out.splice(i..end, token.iter().copied());
            }
        }
        6 if !other.is_empty() => {
            let i = at(rng, out.len());
            let j = rng.below(other.len());
            out.truncate(i);
            out.extend_from_slice(&other[j..]);
        }
        _ => {
            // Keep the first byte (some targets read it as a selector) and cut the rest.
            let keep = 1 + at(rng, out.len().saturating_sub(1));
            out.truncate(keep);
        }
    }
    out
}
