//! Arithmetic modulo the Mersenne prime `p = 2^61 − 1`: the field Shamir's shares live in, and
//! the multiplicative group of the simulated key agreement.
//!
//! The key agreement is Diffie–Hellman in this group: each client publishes `g^sk mod p`, and
//! two clients (or the server, holding one's reconstructed secret) agree on
//! `(g^sk_v)^sk_u = (g^sk_u)^sk_v`. A 61-bit group is far too small to be secure; it stands
//! in for X25519 here because the simulation needs the protocol's arithmetic and message sizes,
//! not its secrecy.

/// The field's modulus, `2^61 − 1`.
pub const MODULUS: u64 = (1 << 61) - 1;

/// The key agreement's generator.
const GENERATOR: u64 = 3;

/// `value mod p`, for any `u64`.
pub fn reduce(value: u64) -> u64 {
    let folded = (value & MODULUS) + (value >> 61);
    if folded >= MODULUS {
        folded - MODULUS
    } else {
        folded
    }
}

/// `a + b mod p`, for reduced `a` and `b`.
pub fn add(a: u64, b: u64) -> u64 {
    reduce(a + b)
}

/// `a − b mod p`, for reduced `a` and `b`.
pub fn sub(a: u64, b: u64) -> u64 {
    add(a, MODULUS - b)
}

/// `a · b mod p`, for reduced `a` and `b`.
pub fn mul(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    let low = (product as u64) & MODULUS;
    let high = (product >> 61) as u64;
    reduce(low + high)
}

/// `base^exponent mod p`.
pub fn pow(base: u64, mut exponent: u64) -> u64 {
    let (mut result, mut base) = (1, reduce(base));
    while exponent > 0 {
        if exponent & 1 == 1 {
            result = mul(result, base);
        }
        base = mul(base, base);
        exponent >>= 1;
    }
    result
}

/// `1 / a mod p`, for a nonzero reduced `a` (Fermat: `a^(p−2)`).
pub fn inverse(a: u64) -> u64 {
    assert_ne!(a, 0, "zero has no inverse");
    pow(a, MODULUS - 2)
}

/// The public key of the secret exponent `secret`.
pub fn public_key(secret: u64) -> u64 {
    pow(GENERATOR, secret)
}

/// The key the holder of `secret` agrees on with the holder of `public`.
pub fn agree(secret: u64, public: u64) -> u64 {
    pow(public, secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_agrees_with_wide_integers() {
        let p = u128::from(MODULUS);
        for (a, b) in [
            (MODULUS - 1, MODULUS - 1),
            (12345, MODULUS - 7),
            (1 << 60, 3),
        ] {
            assert_eq!(u128::from(mul(a, b)), u128::from(a) * u128::from(b) % p);
            assert_eq!(u128::from(add(a, b)), (u128::from(a) + u128::from(b)) % p);
            assert_eq!(add(sub(a, b), b), a);
            assert_eq!(mul(a, inverse(a)), 1);
        }
        assert_eq!(reduce(u64::MAX), (u64::MAX as u128 % p) as u64);
    }

    #[test]
    fn both_sides_of_a_key_agreement_agree() {
        let (alice, bob) = (0x1234_5678_9abc, 0x0fed_cba9_8765_4321 % MODULUS);
        let shared = agree(alice, public_key(bob));
        assert_eq!(shared, agree(bob, public_key(alice)));
        assert_ne!(shared, agree(alice + 1, public_key(bob)));
    }
}
