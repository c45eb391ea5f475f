//! Number formatting shared by every human-readable text: the reports' tables and
//! Markdown, and the verdict's sentences.
//!
//! Machine-readable renderings (JSON, CSV) keep nanoseconds and never go through here.

/// The cell shown where there is no value (a series without samples).
pub const MISSING: &str = "-";

/// Nanoseconds as microseconds to three significant figures: "0.412", "12.3", "1234".
pub fn micros(ns: f64) -> String {
    // Three decimals of a microsecond is one nanosecond, the resolution of the samples.
    significant(ns / 1_000.0, 3, 3)
}

pub fn micros_u64(ns: u64) -> String {
    micros(ns as f64)
}

/// vCPUs per host CPU as "0.50x", "2.0x", "16x".
pub fn ratio(value: f64) -> String {
    format!("{}x", significant(value, 2, 2))
}

/// A byte count as whole KiB, rounded up, with thousands grouped: "1,024 KiB".
pub fn kib(bytes: u64) -> String {
    format!("{} KiB", grouped(bytes.div_ceil(1024)))
}

/// A size given in KiB, in MiB where it is a whole number of them: "16 MiB", "1536 KiB".
pub fn kib_size(kib: u64) -> String {
    if kib >= 1024 && kib.is_multiple_of(1024) {
        format!("{} MiB", kib / 1024)
    } else {
        format!("{kib} KiB")
    }
}

/// A share (0..1) as a whole percentage with its sign, as sentences say it: "62%".
pub fn share(fraction: f64) -> String {
    if fraction.is_finite() {
        format!("{:.0}%", fraction * 100.0)
    } else {
        MISSING.into()
    }
}

/// A share (0..1) as [`share`] says it, but finer below 1%, so that a share that was
/// measured is never said as "0%": "62%", "0.3%", "under 0.1%".
pub fn measured_share(fraction: f64) -> String {
    if fraction > 0.0 && fraction < 0.005 {
        if fraction < 0.0005 {
            "under 0.1%".to_string()
        } else {
            format!("{:.1}%", fraction * 100.0)
        }
    } else {
        share(fraction)
    }
}

/// A fraction (0..1) as a percentage with one decimal, without the sign: "3.1".
pub fn percent(fraction: f64) -> String {
    if fraction.is_finite() {
        format!("{:.1}", fraction * 100.0)
    } else {
        MISSING.into()
    }
}

pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// A counter delta divided by the number of samples: "1.0", "0.0012", "2048".
pub fn per_sample(value: f64) -> String {
    significant(value, 2, 6)
}

/// A large event count with an SI suffix: "950", "1.23k", "4.56M".
pub fn count(value: u64) -> String {
    const SUFFIXES: [(f64, &str); 3] = [(1e9, "G"), (1e6, "M"), (1e3, "k")];
    let v = value as f64;
    for (scale, suffix) in SUFFIXES {
        if v >= scale {
            return format!("{}{suffix}", significant(v / scale, 3, 2));
        }
    }
    value.to_string()
}

/// "612 ms", "1.50 s", "412 us".
pub fn duration(ns: u64) -> String {
    let ns = ns as f64;
    if ns >= 1e9 {
        format!("{} s", significant(ns / 1e9, 3, 2))
    } else if ns >= 1e6 {
        format!("{} ms", significant(ns / 1e6, 3, 1))
    } else {
        format!("{} us", significant(ns / 1e3, 3, 1))
    }
}

/// A duration with its interval, all three in the unit the estimate reads best in:
/// "3.10 us [2.80, 3.40]", "1.05 ms [0.912, 1.19]".
pub fn duration_interval(estimate: f64, low: f64, high: f64) -> String {
    let (unit, scale) = if estimate.abs() >= 1e9 {
        ("s", 1e9)
    } else if estimate.abs() >= 1e6 {
        ("ms", 1e6)
    } else {
        ("us", 1e3)
    };
    let at = |v: f64| significant(v / scale, 3, 3);
    format!("{} {unit} [{}, {}]", at(estimate), at(low), at(high))
}

/// A ratio to three significant figures: "2.75x", "61.7x", "0.260x".
pub fn times(value: f64) -> String {
    format!("{}x", significant(value, 3, 3))
}

/// A ratio with its interval: "2.75x [2.41, 3.12]".
pub fn times_interval(estimate: f64, low: f64, high: f64) -> String {
    format!(
        "{} [{}, {}]",
        times(estimate),
        significant(low, 3, 3),
        significant(high, 3, 3)
    )
}

/// A p-value: "0.41", "0.0031", "1.2e-14".
pub fn p_value(p: f64) -> String {
    if p >= 0.001 {
        significant(p, 2, 4)
    } else {
        format!("{p:.1e}")
    }
}

/// `ns` in the largest unit it fills, with every digit it has: "1 us", "14.791 us",
/// "14.791992 s", "999 ns". For values copied from another tool's text, which a reader
/// compares digit by digit with the original.
pub fn exact_duration(ns: u64) -> String {
    let (unit, scale) = if ns >= 1_000_000_000 {
        ("s", 1_000_000_000)
    } else if ns >= 1_000_000 {
        ("ms", 1_000_000)
    } else if ns >= 1000 {
        ("us", 1000)
    } else {
        return format!("{ns} ns");
    };
    let whole = ns / scale;
    let fraction = ns % scale;
    if fraction == 0 {
        return format!("{whole} {unit}");
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{fraction:0width$}");
    format!("{whole}.{} {unit}", digits.trim_end_matches('0'))
}

/// "1 wait", "3 waits".
pub fn plural(n: u64, noun: &str) -> String {
    format!("{n} {}", noun_for(n, noun))
}

/// The noun as `n` of it are called: "page" for 1, "pages" otherwise.
pub fn noun_for(n: u64, noun: &str) -> String {
    if n == 1 {
        noun.to_string()
    } else {
        format!("{noun}s")
    }
}

/// An exact count with thousands separators: "5,123", "1,234,567".
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// `value` to `digits` significant figures, with at most `max_decimals` decimals and never
/// in exponent notation. Integer digits are never dropped: "1234" reads better in a latency
/// column than "1.23e3".
pub fn significant(value: f64, digits: i32, max_decimals: i32) -> String {
    if !value.is_finite() {
        return MISSING.into();
    }
    if value == 0.0 {
        return "0".into();
    }
    let magnitude = value.abs().log10().floor() as i32;
    let decimals = (digits - 1 - magnitude).clamp(0, max_decimals);
    let text = format!("{:.*}", decimals as usize, value);
    // Rounding can carry into a new leading digit (99.96 -> "100.0"), which would show one
    // figure too many.
    let carried = text
        .parse::<f64>()
        .is_ok_and(|rounded| rounded.abs().log10().floor() as i32 > magnitude);
    if carried && decimals > 0 {
        format!("{:.*}", decimals as usize - 1, value)
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_keep_three_significant_figures() {
        assert_eq!(micros(412.0), "0.412");
        assert_eq!(micros(12_345.0), "12.3");
        assert_eq!(micros(1_234_000.0), "1234");
        assert_eq!(micros(1_000.0), "1.00");
        // Below 100 ns the nanosecond is still shown rather than rounded away.
        assert_eq!(micros(41.0), "0.041");
        assert_eq!(micros(0.0), "0");
    }

    #[test]
    fn rounding_that_carries_does_not_add_a_figure() {
        assert_eq!(micros(99_960.0), "100");
        assert_eq!(micros(9_999.0), "10.0");
    }

    #[test]
    fn ratios_and_counts_read_naturally() {
        assert_eq!(ratio(2.0), "2.0x");
        assert_eq!(ratio(0.5), "0.50x");
        assert_eq!(ratio(16.0), "16x");
        assert_eq!(count(950), "950");
        assert_eq!(count(1_234_567), "1.23M");
        assert_eq!(per_sample(1.0), "1.0");
        assert_eq!(per_sample(0.0012), "0.0012");
    }

    #[test]
    fn non_finite_values_show_as_missing() {
        assert_eq!(micros(f64::NAN), MISSING);
        assert_eq!(percent(f64::INFINITY), MISSING);
    }

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(duration(612_345_678), "612 ms");
        assert_eq!(duration(1_500_000_000), "1.50 s");
        assert_eq!(duration(1_500_000), "1.5 ms");
        assert_eq!(duration(412_000), "412 us");
    }

    #[test]
    fn intervals_share_their_estimates_unit() {
        assert_eq!(
            duration_interval(3_100.0, 2_800.0, 3_400.0),
            "3.10 us [2.80, 3.40]"
        );
        assert_eq!(
            duration_interval(1_050_000.0, 912_000.0, 1_190_000.0),
            "1.05 ms [0.912, 1.19]"
        );
        assert_eq!(times_interval(2.754, 2.41, 3.123), "2.75x [2.41, 3.12]");
        assert_eq!(times(0.26), "0.260x");
        assert_eq!(p_value(0.41), "0.41");
        assert_eq!(p_value(1.23e-14), "1.2e-14");
    }

    #[test]
    fn exact_durations_keep_every_digit() {
        assert_eq!(exact_duration(1000), "1 us");
        assert_eq!(exact_duration(14_791), "14.791 us");
        assert_eq!(exact_duration(14_791_992_000), "14.791992 s");
        assert_eq!(exact_duration(999), "999 ns");
        assert_eq!(exact_duration(2_500_000), "2.5 ms");
    }

    #[test]
    fn counted_nouns_and_grouped_digits() {
        assert_eq!(plural(1, "page"), "1 page");
        assert_eq!(plural(0, "page"), "0 pages");
        assert_eq!(plural(3, "wait"), "3 waits");
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(5123), "5,123");
        assert_eq!(grouped(1_234_567), "1,234,567");
    }
}
