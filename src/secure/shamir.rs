//! Shamir's secret sharing over the field of [`super::field`]: a secret split so that any
//! `threshold` shares give it back and fewer say nothing of it.

use rand::RngExt;
use rand_chacha::ChaCha12Rng;

use super::field;

/// One share: the sharing polynomial's value at `x`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// Where the polynomial was evaluated (never 0, which holds the secret).
    pub x: u64,
    /// The polynomial's value there.
    pub y: u64,
}

/// A secret's sharing polynomial: the secret at 0, `threshold − 1` random coefficients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Polynomial {
    coefficients: Vec<u64>,
}

impl Polynomial {
    /// A polynomial of degree `threshold − 1` through `(0, secret)`, its other coefficients
    /// drawn from `rng`.
    pub fn new(secret: u64, threshold: usize, rng: &mut ChaCha12Rng) -> Self {
        assert!(threshold >= 1, "a threshold of at least one share");
        let mut coefficients = vec![field::reduce(secret)];
        coefficients.extend((1..threshold).map(|_| rng.random_range(0..field::MODULUS)));
        Self { coefficients }
    }

    /// The share at `x` (nonzero, below the modulus).
    pub fn share(&self, x: u64) -> Share {
        debug_assert!(x != 0 && x < field::MODULUS, "shares sit at nonzero points");
        let y = self
            .coefficients
            .iter()
            .rev()
            .fold(0, |acc, &c| field::add(field::mul(acc, x), c));
        Share { x, y }
    }
}

/// The secret behind `shares` (at distinct points): the value at 0 of the polynomial through
/// them, by Lagrange interpolation. Right when there are at least as many shares as the
/// threshold; fewer give a value unrelated to the secret.
pub fn reconstruct(shares: &[Share]) -> u64 {
    shares.iter().enumerate().fold(0, |secret, (i, share)| {
        let (numerator, denominator) = shares.iter().enumerate().filter(|&(j, _)| j != i).fold(
            (1, 1),
            |(num, den), (_, other)| {
                (
                    field::mul(num, other.x),
                    field::mul(den, field::sub(other.x, share.x)),
                )
            },
        );
        let basis = field::mul(numerator, field::inverse(denominator));
        field::add(secret, field::mul(share.y, basis))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn any_threshold_of_shares_gives_the_secret_back() {
        let mut rng = ChaCha12Rng::seed_from_u64(7);
        let secret = 0x0123_4567_89ab_cdef % field::MODULUS;
        let polynomial = Polynomial::new(secret, 3, &mut rng);
        let shares: Vec<Share> = (1..=6).map(|x| polynomial.share(x)).collect();
        for a in 0..6 {
            for b in a + 1..6 {
                for c in b + 1..6 {
                    assert_eq!(reconstruct(&[shares[a], shares[b], shares[c]]), secret);
                }
            }
        }
        assert_eq!(reconstruct(&shares), secret);
        assert_ne!(reconstruct(&shares[..2]), secret);
    }
}
