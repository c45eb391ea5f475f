//! The few distribution functions the growth claims and comparisons need, written out here
//! rather than taken from a statistics crate: the normal, Student t, chi-square and binomial
//! distributions, through the error function and the regularized incomplete gamma and beta
//! functions.
//!
//! Accuracy is what p-values and interval ends compared against 0.01 or 0.001 need, and
//! every function is checked against tabulated values in the tests below:
//!
//! - [`erfc`]: Numerical Recipes' Chebyshev fit, relative error below 1.2e-7.
//! - [`ln_gamma`]: Lanczos' approximation (g = 7, nine terms), about 1e-15.
//! - [`gamma_q`] and [`beta_inc`]: the series and continued fractions of Numerical Recipes
//!   (2nd ed., 6.2 and 6.4), to a relative 1e-13.
//! - [`normal_quantile`]: Acklam's rational approximation (relative error 1.15e-9), then
//!   one Newton step on [`erfc`].
//! - [`t_quantile`]: bisection on [`t_cdf`], to 1e-10.

use std::f64::consts::{PI, SQRT_2};

/// erfc(x) with relative error below 1.2e-7 (Numerical Recipes' Chebyshev fit).
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// P(Z <= z) for a standard normal Z.
pub fn normal_cdf(z: f64) -> f64 {
    0.5 * erfc(-z / SQRT_2)
}

/// P(Z > z) for a standard normal Z.
pub fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / SQRT_2)
}

/// The z with P(Z <= z) = p, for 0 < p < 1 (Acklam's approximation, refined once).
pub fn normal_quantile(p: f64) -> f64 {
    assert!(p > 0.0 && p < 1.0, "normal quantile of {p}");
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let low = 0.024_25;
    let tail = |q: f64| {
        let r = (-2.0 * q.ln()).sqrt();
        (((((C[0] * r + C[1]) * r + C[2]) * r + C[3]) * r + C[4]) * r + C[5])
            / ((((D[0] * r + D[1]) * r + D[2]) * r + D[3]) * r + 1.0)
    };
    let x = if p < low {
        tail(p)
    } else if p > 1.0 - low {
        -tail(1.0 - p)
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    };
    // One Newton step on the CDF brings it to the accuracy of erfc.
    let density = (-0.5 * x * x).exp() / (2.0 * PI).sqrt();
    if density > 0.0 {
        x - (normal_cdf(x) - p) / density
    } else {
        x
    }
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7).
pub fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const COEFFICIENTS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1 - x) = π / sin(π x).
        return (PI / (PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = COEFFICIENTS[0];
    for (i, &c) in COEFFICIENTS.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + G + 0.5;
    0.5 * (2.0 * PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

const EPSILON: f64 = 1e-14;
const TINY: f64 = 1e-300;
const MAX_ITERATIONS: usize = 100_000;

/// The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x), a > 0, x >= 0.
pub fn gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let front = (-x + a * x.ln() - ln_gamma(a)).exp();
    if x < a + 1.0 {
        // Series for P.
        let (mut term, mut sum, mut ap) = (1.0 / a, 1.0 / a, a);
        for _ in 0..MAX_ITERATIONS {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if term.abs() < sum.abs() * EPSILON {
                break;
            }
        }
        (1.0 - sum * front).clamp(0.0, 1.0)
    } else {
        // Continued fraction for Q (modified Lentz).
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / TINY;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..MAX_ITERATIONS {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < TINY {
                d = TINY;
            }
            c = b + an / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if (delta - 1.0).abs() < EPSILON {
                break;
            }
        }
        (front * h).clamp(0.0, 1.0)
    }
}

/// P(X > x) for X chi-square with `df` degrees of freedom (df > 0).
pub fn chi_square_sf(x: f64, df: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    gamma_q(df / 2.0, x / 2.0)
}

/// The regularized incomplete beta function I_x(a, b), a, b > 0, 0 <= x <= 1.
pub fn beta_inc(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    // The continued fraction converges fast on this side of the mean; the symmetry
    // I_x(a, b) = 1 - I_{1-x}(b, a) covers the other.
    if x < (a + 1.0) / (a + b + 2.0) {
        (front * beta_fraction(a, b, x) / a).clamp(0.0, 1.0)
    } else {
        (1.0 - front * beta_fraction(b, a, 1.0 - x) / b).clamp(0.0, 1.0)
    }
}

/// The continued fraction of the incomplete beta function (modified Lentz).
fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..MAX_ITERATIONS {
        let m = m as f64;
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() < EPSILON {
            break;
        }
    }
    h
}

/// P(T <= t) for T Student-t with `df` degrees of freedom (df > 0).
pub fn t_cdf(t: f64, df: f64) -> f64 {
    let tail = 0.5 * beta_inc(df / 2.0, 0.5, df / (df + t * t));
    if t >= 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// The t with P(T <= t) = p for T Student-t with `df` degrees of freedom, 0 < p < 1.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    assert!(p > 0.0 && p < 1.0 && df > 0.0, "t quantile of {p} at {df}");
    if p < 0.5 {
        return -t_quantile(1.0 - p, df);
    }
    // The normal quantile is a lower bound; double until the CDF passes p, then bisect.
    let (mut lo, mut hi) = (0.0, normal_quantile(p).max(1.0));
    while t_cdf(hi, df) < p {
        lo = hi;
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-10 * hi.max(1.0) {
            break;
        }
    }
    0.5 * (lo + hi)
}

/// P(B <= k) for B binomial with `n` trials of probability `p`.
pub fn binomial_cdf(k: u64, n: u64, p: f64) -> f64 {
    if k >= n {
        return 1.0;
    }
    if p <= 0.0 {
        return 1.0;
    }
    if p >= 1.0 {
        return 0.0;
    }
    // P(B <= k) = I_{1-p}(n - k, k + 1).
    beta_inc((n - k) as f64, (k + 1) as f64, 1.0 - p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(actual: f64, expected: f64, relative: f64) -> bool {
        (actual - expected).abs() <= relative * expected.abs().max(1e-300)
    }

    #[test]
    fn normal_quantiles_match_the_tables() {
        for (p, z) in [
            (0.975, 1.959_963_984_540_054),
            (0.995, 2.575_829_303_548_901),
            (0.9995, 3.290_526_731_491_926),
            (0.5, 0.0),
            (0.1, -1.281_551_565_544_601),
        ] {
            let q = normal_quantile(p);
            assert!((q - z).abs() < 1e-6, "{p}: {q} vs {z}");
        }
        assert!((normal_sf(1.959_963_984_540_054) - 0.025).abs() < 1e-8);
    }

    #[test]
    fn gamma_is_factorial() {
        for (n, factorial) in [(1.0, 1.0), (5.0, 24.0), (11.0, 3_628_800.0)] {
            assert!(close(ln_gamma(n).exp(), factorial, 1e-12), "{n}");
        }
        // Γ(1/2) = sqrt(π).
        assert!(close(ln_gamma(0.5).exp(), PI.sqrt(), 1e-12));
    }

    #[test]
    fn chi_square_tails_match_the_tables() {
        // Upper-tail critical values: P(X > x) at df.
        for (x, df, p) in [
            (3.841_458_820_694_124, 1.0, 0.05),
            (6.634_896_601_021_214, 1.0, 0.01),
            (10.827_566_170_662_733, 1.0, 0.001),
            (9.210_340_371_976_182, 2.0, 0.01),
            (18.307_038_053_275_146, 10.0, 0.05),
            (124.342_113_404_880_6, 100.0, 0.05),
        ] {
            assert!(close(chi_square_sf(x, df), p, 1e-6), "{x} {df}");
        }
        assert_eq!(chi_square_sf(0.0, 3.0), 1.0);
        // Far tails stay positive and tiny rather than rounding to nonsense.
        let far = chi_square_sf(80.0, 2.0);
        assert!(close(far, (-40.0f64).exp(), 1e-6), "{far}");
    }

    #[test]
    fn t_quantiles_match_the_tables() {
        for (p, df, t) in [
            (0.975, 1.0, 12.706_204_736_174_7),
            (0.995, 1.0, 63.656_741_162_871_6),
            (0.975, 2.0, 4.302_652_729_749_46),
            (0.995, 2.0, 9.924_843_200_918_28),
            (0.995, 4.0, 4.604_094_871_350_6),
            (0.975, 30.0, 2.042_272_456_301_24),
        ] {
            let q = t_quantile(p, df);
            assert!(close(q, t, 1e-7), "{p} {df}: {q} vs {t}");
            assert!(close(t_cdf(t, df), p, 1e-9), "{p} {df}");
        }
        assert!((t_quantile(0.025, 3.0) + t_quantile(0.975, 3.0)).abs() < 1e-9);
    }

    #[test]
    fn binomial_cdf_sums_the_terms() {
        // n = 10, p = 0.5: P(B <= 2) = (1 + 10 + 45) / 1024.
        assert!(close(binomial_cdf(2, 10, 0.5), 56.0 / 1024.0, 1e-12));
        // n = 20, p = 0.99: P(B <= 18) = 1 - 0.99^20 - 20 * 0.01 * 0.99^19.
        let exact = 1.0 - 0.99f64.powi(20) - 20.0 * 0.01 * 0.99f64.powi(19);
        assert!(close(binomial_cdf(18, 20, 0.99), exact, 1e-10));
        assert_eq!(binomial_cdf(20, 20, 0.3), 1.0);
        // Large n against the normal approximation with continuity correction.
        let (n, p) = (100_000u64, 0.5);
        let k = 50_200;
        let z = (k as f64 + 0.5 - n as f64 * p) / (n as f64 * p * (1.0 - p)).sqrt();
        assert!((binomial_cdf(k, n, p) - normal_cdf(z)).abs() < 1e-4);
    }
}
