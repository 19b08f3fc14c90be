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

    /// CPU as Kubernetes writes it: whole cores (`2`), else milli-cores (`500m`, `2500m`).
    /// The one display form of cpu (CLI, JSS, UI, placement reasons); `Display` is the same.
    pub fn format_cpu(self) -> String {
        self.to_string()
    }

    /// Memory as an exact quantity, the one display form of memory (CLI, JSS, UI, placement
    /// reasons): the largest binary suffix that divides the bytes (`1536Mi`, `3Gi`, `4Ki`),
    /// unless a decimal suffix gives a smaller number (`1T`, not `976562500Ki`); plain bytes
    /// when neither divides (`1610612737`, 1.5Gi and a byte); milli-bytes for a fraction of a
    /// byte (`1500m`), as Kubernetes writes it. Never rounds: `parse` gives `self` back.
    pub fn format_memory(self) -> String {
        if self.0 % 1000 != 0 {
            return format!("{}m", self.0);
        }
        let bytes = self.0 / 1000;
        if bytes == 0 {
            return "0".to_string();
        }
        // The first suffix of each list that divides is its largest; the larger of the two
        // leaves the smaller number.
        let binary = [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ]
        .into_iter()
        .map(|(suffix, shift)| (suffix, 1i128 << shift))
        .find(|(_, unit)| bytes % unit == 0);
        let decimal = [
            ("E", 18),
            ("P", 15),
            ("T", 12),
            ("G", 9),
            ("M", 6),
            ("k", 3),
        ]
        .into_iter()
        .map(|(suffix, exp)| (suffix, 10i128.pow(exp)))
        .find(|(_, unit)| bytes % unit == 0);
        match binary
            .into_iter()
            .chain(decimal)
            .max_by_key(|&(_, unit)| unit)
        {
            Some((suffix, unit)) => format!("{}{suffix}", bytes / unit),
            None => bytes.to_string(),
        }
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

    fn memory(q: &str) -> String {
        Milli::parse(q).unwrap().format_memory()
    }

    #[test]
    fn memory_is_the_largest_exact_binary_unit() {
        assert_eq!(memory("1536Mi"), "1536Mi", "never rounded to 1Gi or 1.5Gi");
        assert_eq!(memory("1.5Gi"), "1536Mi");
        assert_eq!(memory("3Gi"), "3Gi");
        assert_eq!(memory("3072Mi"), "3Gi");
        assert_eq!(memory("1024Gi"), "1Ti");
        assert_eq!(memory("2Ei"), "2Ei");
        assert_eq!(memory("4Ki"), "4Ki");
        assert_eq!(memory("65843812Ki"), "65843812Ki");
        assert_eq!(memory("0"), "0");
        assert_eq!(memory("0Gi"), "0");
        assert_eq!(memory("-1536Mi"), "-1536Mi");
    }

    #[test]
    fn memory_off_the_binary_units_stays_exact() {
        assert_eq!(memory("1"), "1");
        assert_eq!(memory("1023"), "1023");
        assert_eq!(memory("1500"), "1500");
        assert_eq!(
            Milli((3 * (1 << 29) + 1) * 1000).format_memory(),
            "1610612737",
            "1.5Gi and a byte"
        );
        assert_eq!(memory("1G"), "1G", "not a multiple of 1Ki");
        assert_eq!(memory("1T"), "1T", "not 976562500Ki");
        assert_eq!(memory("500M"), "500M");
        assert_eq!(memory("125Mi"), "125Mi", "not 131072k");
        assert_eq!(memory("1.5"), "1500m", "a fraction of a byte");
        assert_eq!(memory("1m"), "1m");
    }

    #[test]
    fn cpu_is_whole_cores_or_milli_cores() {
        let cpu = |q: &str| Milli::parse(q).unwrap().format_cpu();
        assert_eq!(cpu("500m"), "500m");
        assert_eq!(cpu("0.5"), "500m");
        assert_eq!(cpu("2"), "2");
        assert_eq!(cpu("2000m"), "2");
        assert_eq!(cpu("2.5"), "2500m");
        assert_eq!(cpu("7250m"), "7250m");
        assert_eq!(cpu("0"), "0");
    }

    proptest::proptest! {
        #[test]
        fn formats_parse_back_to_the_same_value(
            mantissa in -(1i128 << 70)..(1i128 << 70),
            shift in 0u32..=60,
            exp in 0u32..=18,
            kind in 0..3,
        ) {
            // Any milli value, or whole bytes on a binary unit (as nodes report) or a
            // decimal one (as people write quotas).
            let m = match kind {
                0 => Milli(mantissa),
                1 => Milli((mantissa >> shift) * (1i128 << shift) * 1000),
                _ => Milli(mantissa / 10i128.pow(exp) * 10i128.pow(exp) * 1000),
            };
            for shown in [m.format_memory(), m.format_cpu()] {
                proptest::prop_assert_eq!(Milli::parse(&shown), Ok(m), "{}", shown);
            }
        }
    }
}
