//! Kubernetes resource quantities ("500m", "8", "32Gi", "1.5G") as exact integer milli-units,
//! so capacity arithmetic in placement never rounds.

use std::fmt;

/// A parsed quantity in thousandths of the base unit (cores for cpu, bytes for memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Milli(pub i128);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a Kubernetes quantity ({why})")]
pub struct QuantityError {
    pub input: String,
    pub why: &'static str,
}

impl Milli {
    pub const ZERO: Milli = Milli(0);

    /// Parses the Kubernetes quantity grammar: a signed decimal number followed by an
    /// optional binary suffix (Ki..Ei), decimal suffix (n, u, m, k, M..E) or exponent (e3).
    pub fn parse(input: &str) -> Result<Milli, QuantityError> {
        let err = |why| QuantityError {
            input: input.to_string(),
            why,
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("empty"));
        }
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
            .unwrap_or(s.len());
        let (number, suffix) = s.split_at(split);
        let (negative, digits) = match number.as_bytes().first() {
            Some(b'-') => (true, &number[1..]),
            Some(b'+') => (false, &number[1..]),
            _ => (false, number),
        };
        if digits.is_empty() || digits.contains(['+', '-']) || digits.matches('.').count() > 1 {
            return Err(err("malformed number"));
        }
        let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(err("malformed number"));
        }
        // value = mantissa * 10^exp10 * 2^exp2, kept exact until the final milli conversion.
        let mantissa: i128 = format!("{int_part}{frac_part}")
            .parse::<i128>()
            .map_err(|_| err("number too large"))?;
        let mut exp10: i32 = -(frac_part.len() as i32) + 3; // +3: express in milli-units
        let mut exp2: u32 = 0;
        match suffix {
            "" => {}
            "Ki" => exp2 = 10,
            "Mi" => exp2 = 20,
            "Gi" => exp2 = 30,
            "Ti" => exp2 = 40,
            "Pi" => exp2 = 50,
            "Ei" => exp2 = 60,
            "n" => exp10 -= 9,
            "u" => exp10 -= 6,
            "m" => exp10 -= 3,
            "k" => exp10 += 3,
            "M" => exp10 += 6,
            "G" => exp10 += 9,
            "T" => exp10 += 12,
            "P" => exp10 += 15,
            "E" => exp10 += 18,
            e if e.starts_with(['e', 'E']) => {
                exp10 += e[1..]
                    .parse::<i32>()
                    .map_err(|_| err("malformed exponent"))?;
            }
            _ => return Err(err("unknown suffix")),
        }
        let mut value = mantissa
            .checked_mul(1i128 << exp2)
            .ok_or_else(|| err("too large"))?;
        if exp10 >= 0 {
            let scale = 10i128
                .checked_pow(exp10 as u32)
                .ok_or_else(|| err("too large"))?;
            value = value.checked_mul(scale).ok_or_else(|| err("too large"))?;
        } else {
            // Kubernetes rounds sub-milli precision up.
            let scale = 10i128
                .checked_pow((-exp10) as u32)
                .ok_or_else(|| err("too small"))?;
            value = (value + scale - 1) / scale;
        }
        Ok(Milli(if negative { -value } else { value }))
    }

    /// Whole units, rounded down (e.g. pods, GPUs).
    pub fn units(self) -> i128 {
        self.0.div_euclid(1000)
    }

    pub fn from_units(units: i128) -> Milli {
        Milli(units * 1000)
    }
}

impl std::ops::Add for Milli {
    type Output = Milli;
    fn add(self, o: Milli) -> Milli {
        Milli(self.0 + o.0)
    }
}

impl std::ops::Sub for Milli {
    type Output = Milli;
    fn sub(self, o: Milli) -> Milli {
        Milli(self.0 - o.0)
    }
}

impl std::ops::Mul<i128> for Milli {
    type Output = Milli;
    fn mul(self, n: i128) -> Milli {
        Milli(self.0 * n)
    }
}

impl fmt::Display for Milli {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 % 1000 == 0 {
            write!(f, "{}", self.0 / 1000)
        } else {
            write!(f, "{}m", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_common_forms() {
        assert_eq!(Milli::parse("500m").unwrap(), Milli(500));
        assert_eq!(Milli::parse("8").unwrap(), Milli(8000));
        assert_eq!(Milli::parse("1.5").unwrap(), Milli(1500));
        assert_eq!(Milli::parse("32Gi").unwrap(), Milli(32 * (1 << 30) * 1000));
        assert_eq!(Milli::parse("1G").unwrap(), Milli(1_000_000_000_000));
        assert_eq!(Milli::parse("1e3").unwrap(), Milli(1_000_000));
        assert_eq!(
            Milli::parse("0.1m").unwrap(),
            Milli(1),
            "sub-milli rounds up"
        );
        assert_eq!(Milli::parse("-2").unwrap(), Milli(-2000));
        assert_eq!(Milli::parse(".5").unwrap(), Milli(500));
    }

    #[test]
    fn rejects_garbage_with_a_reason() {
        for bad in ["", "abc", "8x", "1..2", "--1", "Gi", "1Gii", "1e", "."] {
            assert!(Milli::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        let e = Milli::parse("8x").unwrap_err();
        assert!(e.to_string().contains("unknown suffix"), "{e}");
    }

    #[test]
    fn displays_whole_and_milli_values() {
        assert_eq!(Milli(8000).to_string(), "8");
        assert_eq!(Milli(250).to_string(), "250m");
    }
}
