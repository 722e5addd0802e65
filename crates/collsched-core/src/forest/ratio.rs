//! A small exact non-negative rational on u128 (always reduced). ForestColl's
//! optimum 1/x* = p/q and the fixed-k tree bandwidths are exact rationals.
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::fmt;

pub fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

pub fn gcd64(a: u64, b: u64) -> u64 {
    gcd(a as u128, b as u128) as u64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ratio {
    pub num: u128,
    pub den: u128,
}

impl Ratio {
    /// `num/den` reduced; panics on a zero denominator (a bug, never user input).
    pub fn new(num: u128, den: u128) -> Ratio {
        assert!(den != 0, "Ratio with zero denominator");
        let g = gcd(num, den).max(1);
        Ratio { num: num / g, den: den / g }
    }
    pub fn int(v: u128) -> Ratio {
        Ratio { num: v, den: 1 }
    }
    pub fn zero() -> Ratio {
        Ratio { num: 0, den: 1 }
    }
    pub fn is_zero(&self) -> bool {
        self.num == 0
    }
    pub fn recip(&self) -> Ratio {
        Ratio::new(self.den, self.num)
    }
    pub fn add(&self, o: &Ratio) -> Ratio {
        let g = gcd(self.den, o.den);
        let den = self.den / g * o.den;
        Ratio::new(self.num * (o.den / g) + o.num * (self.den / g), den)
    }
    /// `self - o`, saturating at zero.
    pub fn sub(&self, o: &Ratio) -> Ratio {
        if *self <= *o {
            return Ratio::zero();
        }
        let g = gcd(self.den, o.den);
        let den = self.den / g * o.den;
        Ratio::new(self.num * (o.den / g) - o.num * (self.den / g), den)
    }
    pub fn mul(&self, o: &Ratio) -> Ratio {
        let g1 = gcd(self.num, o.den).max(1);
        let g2 = gcd(o.num, self.den).max(1);
        Ratio::new((self.num / g1) * (o.num / g2), (self.den / g2) * (o.den / g1))
    }
    pub fn div(&self, o: &Ratio) -> Ratio {
        self.mul(&o.recip())
    }
    pub fn mul_int(&self, v: u128) -> Ratio {
        self.mul(&Ratio::int(v))
    }
    pub fn half(&self) -> Ratio {
        Ratio::new(self.num, self.den * 2)
    }
    /// floor(self * v)
    pub fn floor_mul(&self, v: u128) -> u128 {
        self.num * v / self.den
    }
    pub fn floor(&self) -> u128 {
        self.num / self.den
    }
    pub fn to_f64(&self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

impl Ord for Ratio {
    fn cmp(&self, o: &Ratio) -> Ordering {
        (self.num * o.den).cmp(&(o.num * self.den))
    }
}
impl PartialOrd for Ratio {
    fn partial_cmp(&self, o: &Ratio) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.num, self.den)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn arithmetic_is_exact() {
        let a = Ratio::new(6, 4);
        assert_eq!(a, Ratio::new(3, 2));
        assert_eq!(a.add(&Ratio::new(1, 6)), Ratio::new(5, 3));
        assert_eq!(a.sub(&Ratio::new(1, 2)), Ratio::int(1));
        assert_eq!(a.mul(&Ratio::new(2, 3)), Ratio::int(1));
        assert!(Ratio::new(1, 3) < Ratio::new(34, 100));
        assert_eq!(Ratio::new(7, 2).floor_mul(3), 10);
        assert_eq!(format!("{}", Ratio::new(10, 4)), "5/2");
    }
}
