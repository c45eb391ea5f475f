//! From ring-buffer times to the nanoseconds every analysis assumes.
//!
//! The kernel stamps events with the instance's `trace_clock`. Most clocks count
//! nanoseconds; `x86-tsc` counts TSC ticks and `counter` counts events. trace-cmd can record
//! the TSC with the kernel's own tick-to-ns factors (`record --tsc2nsec`, the TSC2NSEC
//! option) and shift every time by an offset (`--ts-offset`, `--date`: the OFFSET and DATE
//! options). The pages keep the raw ticks; [`TimeConversion`] is what trace-cmd's reader
//! applies when it reports, and the decoder applies it the same way, so vmscale's times are
//! trace-cmd's times.

use serde::{Deserialize, Serialize};

/// TSC2NSEC (a trace-cmd option, `record --tsc2nsec`): converts raw TSC timestamps to ns
/// as `(ts * mult) >> shift`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tsc2Nsec {
    pub mult: u32,
    pub shift: u32,
    pub offset: u64,
}

/// How raw times become reported times: `((raw × mult) >> shift) + offset_ns`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeConversion {
    /// TSC ticks to ns; none when the clock already counts ns.
    pub tsc2nsec: Option<Tsc2Nsec>,
    /// Added after the conversion (negative moves times back).
    pub offset_ns: i64,
}

impl TimeConversion {
    /// A conversion by TSC2NSEC factors, then an offset. A multiplier of 0 converts
    /// nothing, as trace-cmd ignores it.
    pub fn new(tsc2nsec: Option<Tsc2Nsec>, offset_ns: i64) -> TimeConversion {
        TimeConversion {
            tsc2nsec: tsc2nsec.filter(|t| t.mult != 0),
            offset_ns,
        }
    }

    pub fn is_identity(&self) -> bool {
        self.tsc2nsec.is_none() && self.offset_ns == 0
    }

    /// The reported time of `raw`. trace-cmd computes the product in 64 bits, in two
    /// halves, which equals the 128-bit product shifted and cut to 64 bits; a time past
    /// 64 bits or before zero is held at the end instead of wrapping, so order is kept.
    #[inline]
    pub fn apply(&self, raw: u64) -> u64 {
        let ns = match self.tsc2nsec {
            Some(t) => {
                let wide = (u128::from(raw) * u128::from(t.mult))
                    .checked_shr(t.shift)
                    .unwrap_or(0);
                u64::try_from(wide).unwrap_or(u64::MAX)
            }
            None => raw,
        };
        ns.saturating_add_signed(self.offset_ns)
    }
}

/// Whether times on `clock` are nanoseconds: the clocks trace-cmd reports as such, plus
/// `boot`, which counts ns as `mono` does. `x86-tsc` needs a TSC2NSEC conversion, and
/// `counter` is not a time at all.
pub fn counts_nanoseconds(clock: &str) -> bool {
    matches!(
        clock,
        "local" | "global" | "uptime" | "perf" | "boot" | "tai" | "tsc2nsec"
    ) || clock.starts_with("mono")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tsc(mult: u32, shift: u32) -> TimeConversion {
        TimeConversion {
            tsc2nsec: Some(Tsc2Nsec {
                mult,
                shift,
                offset: 0,
            }),
            offset_ns: 0,
        }
    }

    /// trace-cmd's mul_u64_u32_shr, written out as its two 32-bit halves.
    fn in_halves(a: u64, mult: u32, shift: u32) -> u64 {
        let (al, ah) = (a & 0xffff_ffff, a >> 32);
        let mut ret = al.wrapping_mul(u64::from(mult)) >> shift;
        if ah != 0 {
            ret = ret.wrapping_add(ah.wrapping_mul(u64::from(mult)) << (32 - shift));
        }
        ret
    }

    #[test]
    fn tsc_ticks_convert_as_trace_cmd_computes_them() {
        // A 2.1 GHz TSC as the kernel describes it: mult / 2^shift = 1 / 2.1.
        let (mult, shift) = (((1u64 << 31) * 10 / 21) as u32, 31);
        let conversion = tsc(mult, shift);
        for raw in [0, 1, 2_100, 2_100_000_000, 1 << 40, 123_456_789_012_345] {
            assert_eq!(conversion.apply(raw), in_halves(raw, mult, shift), "{raw}");
        }
        let second = conversion.apply(2_100_000_000);
        assert!((999_999_990..=1_000_000_000).contains(&second), "{second}");
    }

    #[test]
    fn offsets_shift_times_without_wrapping() {
        let later = TimeConversion {
            tsc2nsec: None,
            offset_ns: 1_000,
        };
        assert_eq!(later.apply(5), 1_005);
        assert_eq!(later.apply(u64::MAX - 1), u64::MAX);
        let earlier = TimeConversion {
            tsc2nsec: None,
            offset_ns: -1_000,
        };
        assert_eq!(earlier.apply(5_000), 4_000);
        assert_eq!(earlier.apply(5), 0);
        assert!(TimeConversion::default().is_identity());
        let zero = Tsc2Nsec {
            mult: 0,
            shift: 5,
            offset: 0,
        };
        assert!(TimeConversion::new(Some(zero), 0).is_identity());
        assert!(!earlier.is_identity());
        // A shift no kernel would write does not panic.
        assert_eq!(tsc(7, 200).apply(u64::MAX), 0);
        assert_eq!(tsc(u32::MAX, 0).apply(u64::MAX), u64::MAX);
    }

    #[test]
    fn clocks_in_nanoseconds() {
        for clock in [
            "local", "global", "mono", "mono_raw", "boot", "perf", "tai", "uptime",
        ] {
            assert!(counts_nanoseconds(clock), "{clock}");
        }
        assert!(!counts_nanoseconds("x86-tsc"));
        assert!(!counts_nanoseconds("counter"));
    }
}
