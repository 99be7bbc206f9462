//! A small seeded generator, so a random suite repeats with `ECHOMQ_SEED`.

/// A deterministic xorshift generator for random test inputs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// A suite's generator: from `default`, or, with `ECHOMQ_SEED` set (decimal or `0x` hex),
    /// from that seed mixed with `default`, to explore other sequences than the suite's own.
    /// The seed is printed (shown when the test fails), so a failing run can be repeated.
    pub fn seeded(default: u64) -> Self {
        let given = std::env::var("ECHOMQ_SEED").ok();
        let parsed = given.as_deref().map(|s| match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => s.parse(),
        });
        let seed = match parsed {
            None => default,
            Some(Ok(s)) => s ^ default,
            Some(Err(_)) => panic!("ECHOMQ_SEED is not a number: {given:?}"),
        };
        eprintln!("random inputs from seed {seed:#x} (ECHOMQ_SEED {given:?})");
        Rng::new(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// One of `from`, at random.
    pub fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[self.below(from.len() as u64) as usize]
    }

    pub fn bytes(&mut self, max_len: usize, alphabet: &[u8]) -> Vec<u8> {
        let len = self.below(max_len as u64 + 1) as usize;
        (0..len)
            .map(|_| alphabet[self.below(alphabet.len() as u64) as usize])
            .collect()
    }
}
