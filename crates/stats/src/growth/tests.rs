//! The claims measured on seeded synthetic sweeps whose truth is known: how often each
//! truth gets each claim, over 2,000 sweeps per cell, for 3, 4, 6 and 8 points, 20, 100 and
//! 1000 samples a point, and lognormal or heavy-tailed noise.

use super::*;
use crate::units::times_interval;

/// The swept N of a sweep with `points` points.
fn ns(points: usize) -> Vec<f64> {
    [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0][..points].to_vec()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Noise {
    /// Median times exp(0.5 Z): a spread like case 3's (stdev about half the mean).
    Lognormal,
    /// Median times exp(0.25 Z), and one sample in ten times a Pareto factor of index 1.1
    /// (infinite variance): the rare very slow sample real latencies have.
    HeavyTailed,
}

fn gaussian(rng: &mut fastrand::Rng) -> f64 {
    let (u, v) = (rng.f64().max(1e-300), rng.f64());
    (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
}

fn draw(rng: &mut fastrand::Rng, scale: f64, noise: Noise) -> u64 {
    let v = match noise {
        Noise::Lognormal => scale * (0.5 * gaussian(rng)).exp(),
        Noise::HeavyTailed => {
            let body = scale * (0.25 * gaussian(rng)).exp();
            if rng.f64() < 0.1 {
                body * rng.f64().max(1e-12).powf(-1.0 / 1.1)
            } else {
                body
            }
        }
    };
    v.clamp(1.0, 1e15) as u64
}

/// One sweep: `samples` draws at each N around `truth(N)`.
fn sweep(
    rng: &mut fastrand::Rng,
    truth: &dyn Fn(f64) -> f64,
    points: usize,
    samples: usize,
    noise: Noise,
) -> Vec<(f64, Vec<u64>)> {
    ns(points)
        .into_iter()
        .map(|n| {
            let scale = truth(n);
            (n, (0..samples).map(|_| draw(rng, scale, noise)).collect())
        })
        .collect()
}

fn judged(sweep: &[(f64, Vec<u64>)], statistic: Statistic) -> Result<Growth, Unjudged> {
    let points: Vec<PointSamples> = sweep
        .iter()
        .map(|(n, s)| PointSamples {
            n: *n,
            runs: vec![s.as_slice()],
        })
        .collect();
    growth(&points, statistic, Options::default())
}

fn physical(g: &Growth) -> bool {
    g.fits
        .iter()
        .all(|f| f.t1 > 0.0 && (0.0..=1.0).contains(&f.sigma) && f.kappa >= 0.0)
}

/// How many of `trials` sweeps got each claim: grows, flat, falls, varies, inconclusive.
#[derive(Debug, Default, Clone, Copy)]
struct Tally([usize; 5]);

impl Tally {
    fn add(&mut self, claim: Claim) {
        let i = match claim {
            Claim::Grows => 0,
            Claim::Flat => 1,
            Claim::Falls => 2,
            Claim::Varies => 3,
            Claim::Inconclusive => 4,
        };
        self.0[i] += 1;
    }

    fn of(&self, claim: Claim) -> usize {
        let mut t = Tally::default();
        t.add(claim);
        let i = t.0.iter().position(|&c| c == 1).unwrap();
        self.0[i]
    }
}

const TRIALS: usize = 2_000;

fn tally(
    seed: u64,
    truth: &dyn Fn(f64) -> f64,
    points: usize,
    samples: usize,
    noise: Noise,
) -> Tally {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut tally = Tally::default();
    for _ in 0..TRIALS {
        let s = sweep(&mut rng, truth, points, samples, noise);
        let g = judged(&s, Statistic::P50).expect("every point has samples for a median");
        assert!(physical(&g), "{g:?}");
        tally.add(g.claim);
    }
    tally
}

fn row(label: &str, t: &Tally) {
    let pct = |c| format!("{:5.1}%", 100.0 * t.of(c) as f64 / TRIALS as f64);
    println!(
        "{label:<34} grows {} flat {} falls {} varies {} inconclusive {}",
        pct(Claim::Grows),
        pct(Claim::Flat),
        pct(Claim::Falls),
        pct(Claim::Varies),
        pct(Claim::Inconclusive)
    );
}

#[test]
fn order_statistic_ranks_match_the_binomial_tables() {
    // Bin(20, 1/2): P(B <= 3) = 0.0013 <= 0.005 < P(B <= 4) = 0.0059.
    assert_eq!(ranks(20, 0.5, 0.99), Some((4, 17)));
    // 0.5^8 = 0.0039 <= 0.005 < 0.5^7.
    assert_eq!(samples_needed(0.5, 0.99), 8);
    assert_eq!(ranks(7, 0.5, 0.99), None);
    // The p99 needs 0.99^n <= 0.005: n >= 528.
    assert_eq!(samples_needed(0.99, 0.99), 528);
    assert_eq!(samples_needed(0.99, 0.95), 368);
    // Any order, same interval.
    let mut rng = fastrand::Rng::with_seed(3);
    let mut samples: Vec<u64> = (0..1_000).map(|_| rng.u64(1..1_000_000)).collect();
    let mut sorted = samples.clone();
    sorted.sort_unstable();
    for q in [0.5, 0.99] {
        assert_eq!(
            quantile_interval_unsorted(&mut samples, q, 0.99),
            quantile_interval(&sorted, q, 0.99)
        );
    }
}

#[test]
fn a_median_interval_covers_the_true_median() {
    let mut rng = fastrand::Rng::with_seed(5);
    for samples in [8, 20, 100] {
        let covered = (0..TRIALS)
            .filter(|_| {
                let mut s: Vec<u64> = (0..samples)
                    .map(|_| draw(&mut rng, 1e6, Noise::Lognormal))
                    .collect();
                let i = quantile_interval_unsorted(&mut s, 0.5, 0.99).unwrap();
                i.low <= 1e6 && 1e6 <= i.high
            })
            .count();
        assert!(covered * 100 >= TRIALS * 98, "{samples}: {covered}");
    }
}

#[test]
fn a_constant_cost_is_rarely_called_growing_or_falling() {
    let constant = |_: f64| 50_000.0;
    for noise in [Noise::Lognormal, Noise::HeavyTailed] {
        for points in [3, 4, 6, 8] {
            let mut rates = Vec::new();
            for samples in [20, 100, 1_000] {
                let seed = 1_000 * points as u64 + samples as u64 + noise as u64;
                let t = tally(seed, &constant, points, samples, noise);
                row(&format!("constant {noise:?} {points} x {samples}"), &t);
                let claimed = t.of(Claim::Grows) + t.of(Claim::Falls);
                assert!(
                    claimed * 100 <= TRIALS * 2,
                    "{noise:?} {points} points x {samples}: {claimed} of {TRIALS}"
                );
                rates.push(claimed);
            }
            // More samples never make false claims more frequent: within the binomial
            // noise of 2,000 sweeps (one percentage point is about four standard errors).
            assert!(
                rates[2] <= rates[0].max(rates[1]) + TRIALS / 100,
                "{noise:?} {points}: {rates:?}"
            );
        }
    }
}

#[test]
fn a_linear_cost_with_a_quarter_serialized_is_called_growing() {
    // T(N) = T1 (1 + 0.25 (N - 1)).
    let linear = |n: f64| 40_000.0 * (1.0 + 0.25 * (n - 1.0));
    for noise in [Noise::Lognormal, Noise::HeavyTailed] {
        for points in [3, 4, 6, 8] {
            for samples in [20, 100, 1_000] {
                let seed = 7_000 + 1_000 * points as u64 + samples as u64 + noise as u64;
                let t = tally(seed, &linear, points, samples, noise);
                row(&format!("linear {noise:?} {points} x {samples}"), &t);
                if points >= 4 && samples >= 100 {
                    assert!(
                        t.of(Claim::Grows) * 100 >= TRIALS * 95,
                        "{noise:?} {points} x {samples}: {t:?}"
                    );
                }
                assert_eq!(t.of(Claim::Flat), 0, "{noise:?} {points} x {samples}");
            }
        }
    }
}

#[test]
fn a_steep_step_is_never_flat() {
    // The tour's pause-all medians: 128 us, 356 us, 3.9 ms, 7.9 ms at 1, 2, 4 and 8 vCPUs.
    let step = |n: f64| match n as u64 {
        1 => 128_000.0,
        2 => 356_000.0,
        4 => 3_900_000.0,
        _ => 7_900_000.0,
    };
    for noise in [Noise::Lognormal, Noise::HeavyTailed] {
        for samples in [20, 100, 1_000] {
            let t = tally(17 + samples as u64, &step, 4, samples, noise);
            row(&format!("step {noise:?} 4 x {samples}"), &t);
            assert_eq!(t.of(Claim::Flat), 0);
            assert_eq!(t.of(Claim::Grows), TRIALS, "{t:?}");
        }
    }
}

#[test]
fn a_square_root_is_growth_that_no_growing_model_fits() {
    // About what memslot with halted guests does over 1 to 32 vCPUs: N^0.5. A line (or a
    // USL, which can only bend upwards) misses such points once each is measured well.
    let mut rng = fastrand::Rng::with_seed(23);
    let s = sweep(
        &mut rng,
        &|n: f64| 20_000.0 * n.sqrt(),
        6,
        1_000,
        Noise::Lognormal,
    );
    let g = judged(&s, Statistic::P50).unwrap();
    assert_eq!(g.claim, Claim::Grows);
    assert!(
        g.exponent.low < 0.5 && 0.5 < g.exponent.high,
        "{:?}",
        g.exponent
    );
    assert!((g.ratio.estimate - 32f64.sqrt()).abs() < 0.1 * 32f64.sqrt());
    assert_eq!(g.model, Shape::NoModelFits, "{:?}", g.fits);
    assert!(g.misfit().is_some_and(|f| !f.fits()));
    assert!(g.prediction.is_none() && g.per_unit.is_none());
    assert!(physical(&g));
}

#[test]
fn a_line_measured_well_is_linear_with_its_cost_per_unit() {
    // 8 us more per unit of N on 20 us; the slope comes back in ns per unit of N.
    let mut rng = fastrand::Rng::with_seed(29);
    let s = sweep(
        &mut rng,
        &|n: f64| 20_000.0 + 8_000.0 * (n - 1.0),
        6,
        1_000,
        Noise::Lognormal,
    );
    let g = judged(&s, Statistic::P50).unwrap();
    assert_eq!((g.claim, g.model), (Claim::Grows, Shape::Linear), "{g:?}");
    let per = g.per_unit.unwrap();
    assert!(per.low < 8_000.0 && 8_000.0 < per.high, "{per:?}");
    let at = g.prediction.unwrap();
    assert_eq!(at.n, 64.0);
    let truth = 20_000.0 + 8_000.0 * 63.0;
    assert!(at.value.low < truth && truth < at.value.high, "{at:?}");
}

#[test]
fn a_quadratic_term_is_found_by_the_likelihood_ratio() {
    let mut rng = fastrand::Rng::with_seed(31);
    let usl = |n: f64| 10_000.0 * (1.0 + 0.05 * (n - 1.0) + 0.02 * n * (n - 1.0));
    let s = sweep(&mut rng, &usl, 6, 1_000, Noise::Lognormal);
    let g = judged(&s, Statistic::P50).unwrap();
    assert_eq!(
        (g.claim, g.model),
        (Claim::Grows, Shape::Usl),
        "{:?}",
        g.fits
    );
    let f = g.chosen().unwrap();
    assert!(f.kappa > 0.01 && f.kappa < 0.03, "{f:?}");
}

#[test]
fn falling_and_varying_costs_are_said_as_such() {
    let mut rng = fastrand::Rng::with_seed(37);
    // The tour's memslot on two loaded CPUs: 458 us down to 120 us.
    let falling = |n: f64| 460_000.0 / n.powf(0.65);
    let g = judged(
        &sweep(&mut rng, &falling, 4, 100, Noise::Lognormal),
        Statistic::P50,
    )
    .unwrap();
    assert_eq!(g.claim, Claim::Falls);
    assert!(g.ratio.high < 1.0 && g.exponent.estimate < 0.0, "{g:?}");
    assert!(g.fits.is_empty() && g.model == Shape::None);
    // Up, then down.
    let hump = |n: f64| if n == 2.0 { 300_000.0 } else { 100_000.0 };
    let g = judged(
        &sweep(&mut rng, &hump, 3, 100, Noise::Lognormal),
        Statistic::P50,
    )
    .unwrap();
    assert_eq!(g.claim, Claim::Varies, "{:?}", g.steps);
    assert_eq!(g.steps.len(), 2);
}

#[test]
fn the_p99_is_judged_only_where_every_point_has_the_samples_for_it() {
    let mut rng = fastrand::Rng::with_seed(41);
    let s = sweep(&mut rng, &|_| 10_000.0, 4, 200, Noise::Lognormal);
    assert_eq!(
        judged(&s, Statistic::P99),
        Err(Unjudged::TooFewSamples {
            n: 1.0,
            samples: 200,
            needed: 528
        })
    );
    assert!(judged(&s, Statistic::P50).is_ok());
    assert_eq!(judged(&s, Statistic::Mean), Err(Unjudged::NotAQuantile));
    let s = sweep(&mut rng, &|n| 10_000.0 * n, 4, 1_000, Noise::Lognormal);
    assert_eq!(judged(&s, Statistic::P99).unwrap().claim, Claim::Grows);
    assert_eq!(
        judged(&s[..1], Statistic::P50),
        Err(Unjudged::TooFewPoints { points: 1 })
    );
}

#[test]
fn runs_that_disagree_widen_their_points() {
    // A constant cost measured in three runs a point, each run at its own level (the
    // threads' placement differs between runs): within a run the samples agree, so the
    // order statistics alone would call the run-to-run differences growth.
    let mut rng = fastrand::Rng::with_seed(43);
    let mut tally = Tally::default();
    let mut pooled_only = Tally::default();
    for _ in 0..TRIALS {
        let runs: Vec<(f64, Vec<Vec<u64>>)> = ns(4)
            .into_iter()
            .map(|n| {
                let runs = (0..3)
                    .map(|_| {
                        let level = 50_000.0 * (0.3 * gaussian(&mut rng)).exp();
                        (0..200)
                            .map(|_| draw(&mut rng, level, Noise::Lognormal))
                            .collect()
                    })
                    .collect();
                (n, runs)
            })
            .collect();
        let points: Vec<PointSamples> = runs
            .iter()
            .map(|(n, r)| PointSamples {
                n: *n,
                runs: r.iter().map(Vec::as_slice).collect(),
            })
            .collect();
        tally.add(
            growth(&points, Statistic::P50, Options::default())
                .unwrap()
                .claim,
        );
        let merged: Vec<Vec<u64>> = runs.iter().map(|(_, r)| r.concat()).collect();
        let points: Vec<PointSamples> = runs
            .iter()
            .zip(&merged)
            .map(|((n, _), s)| PointSamples {
                n: *n,
                runs: vec![s.as_slice()],
            })
            .collect();
        pooled_only.add(
            growth(&points, Statistic::P50, Options::default())
                .unwrap()
                .claim,
        );
    }
    row("constant, 3 runs x 200, run spread", &tally);
    row("the same, runs pooled as one", &pooled_only);
    let claimed = tally.of(Claim::Grows) + tally.of(Claim::Falls);
    assert!(claimed * 100 <= TRIALS * 2, "{tally:?}");
    assert!(
        pooled_only.of(Claim::Grows) + pooled_only.of(Claim::Falls) > 10 * claimed.max(1),
        "{pooled_only:?}"
    );
}

/// Samples with a published mean and standard deviation: lognormal with those moments.
fn published(rng: &mut fastrand::Rng, mean_ms: f64, sd_ms: f64, count: usize) -> Vec<u64> {
    let sigma2 = (1.0 + (sd_ms / mean_ms).powi(2)).ln();
    let mu = (mean_ms * 1e6).ln() - sigma2 / 2.0;
    (0..count)
        .map(|_| (mu + sigma2.sqrt() * gaussian(rng)).exp() as u64)
        .collect()
}

#[test]
fn case_3_published_table() {
    // docs/cases.md, case 3: memslot commit time during boot, avg (stdev) ms over 100 boots per
    // point (1000 at 16 and 24 vCPUs), each point fed in as that many samples.
    let table = [
        (1.0, (2.1, 0.8), (2.2, 1.2)),
        (2.0, (2.5, 1.5), (3.0, 1.4)),
        (4.0, (2.2, 1.1), (3.1, 1.3)),
        (8.0, (2.4, 0.7), (3.4, 1.4)),
        (16.0, (3.6, 2.4), (12.0, 7.0)),
        (24.0, (12.5, 0.9), (20.0, 7.3)),
    ];
    let mut rng = fastrand::Rng::with_seed(47);
    let mut columns: [Vec<(f64, Vec<u64>)>; 2] = [Vec::new(), Vec::new()];
    for &(n, ioctl, pause) in &table {
        let count = if n >= 16.0 { 1_000 } else { 100 };
        columns[0].push((n, published(&mut rng, ioctl.0, ioctl.1, count)));
        columns[1].push((n, published(&mut rng, pause.0, pause.1, count)));
    }
    let [ioctl, pause] = columns
        .each_ref()
        .map(|c| judged(c, Statistic::P50).unwrap());
    let [ioctl_8, pause_8] = columns
        .each_ref()
        .map(|c| judged(&c[..4], Statistic::P50).unwrap());
    for (name, whole, to_8) in [("ioctl", &ioctl, &ioctl_8), ("pause-all", &pause, &pause_8)] {
        println!(
            "{name}: 1-24 {:?} {:.2}x [{:.2}, {:.2}], N^{:.2} [{:.2}, {:.2}], {:?}; 1-8 {:?} {:.2}x [{:.2}, {:.2}]",
            whole.claim,
            whole.ratio.estimate,
            whole.ratio.low,
            whole.ratio.high,
            whole.exponent.estimate,
            whole.exponent.low,
            whole.exponent.high,
            whole.model,
            to_8.claim,
            to_8.ratio.estimate,
            to_8.ratio.low,
            to_8.ratio.high,
        );
        // Both grow over the whole sweep, by their steep end: 6x and 10x.
        assert_eq!(whole.claim, Claim::Grows);
        assert!(physical(whole));
    }
    // Up to 8 vCPUs the ioctl's median moves by less than the margin (about +12%), but 100
    // boots a point leave its interval reaching past +20%: flat is not established. The
    // table's own means put pause-all 55% higher at 8 vCPUs than at 1 (2.2 -> 3.4 ms), and
    // its medians grow about 1.7x, beyond the margin: the data say "pause-all already grows
    // to 8 vCPUs", not "flat to 8".
    assert!(
        (ioctl_8.ratio.estimate - 1.0).abs() < DEFAULT_MARGIN,
        "{ioctl_8:?}"
    );
    assert_ne!(ioctl_8.claim, Claim::Flat);
    assert_eq!(pause_8.claim, Claim::Grows);
    assert!(
        pause_8.ratio.low > 1.0 + DEFAULT_MARGIN,
        "{:?}",
        pause_8.ratio
    );
    // At 16 vCPUs pause-all costs about 3.3 times the ioctl (12 ms against 3.6 ms).
    let at = |g: &Growth| *g.points.iter().find(|p| p.n == 16.0).unwrap();
    let times = ratio_between(&at(&ioctl), &at(&pause));
    println!("pause-all over ioctl at 16: {times:?}");
    assert!(
        times.low < 12.0 / 3.6 && 12.0 / 3.6 < times.high,
        "{times:?}"
    );
    assert!(times.low > 3.0, "{times:?}");
}

#[test]
fn claims_are_said_with_the_numbers_they_were_decided_on() {
    let mut rng = fastrand::Rng::with_seed(59);
    let step = |n: f64| match n as u64 {
        1 => 128_000.0,
        2 => 356_000.0,
        4 => 3_900_000.0,
        _ => 7_900_000.0,
    };
    let g = judged(
        &sweep(&mut rng, &step, 4, 200, Noise::Lognormal),
        Statistic::P50,
    )
    .unwrap();
    let text = g.sentence("vcpus");
    println!("{text}");
    let ratio = times_interval(g.ratio.estimate, g.ratio.low, g.ratio.high);
    assert!(
        text.starts_with(&format!("grows {ratio} from vcpus=1 to 8, as N^")),
        "{text}"
    );
    // The tour's step is no straight line or USL: said so, and nothing predicted.
    assert!(text.contains("; no model fits ("), "{text}");
    assert!(!text.contains("predicts"), "{text}");
    assert!(
        g.endpoints_text("vcpus").starts_with("p50 1"),
        "{}",
        g.endpoints_text("vcpus")
    );

    let flat = judged(
        &sweep(&mut rng, &|_| 50_000.0, 4, 1_000, Noise::Lognormal),
        Statistic::P50,
    )
    .unwrap();
    let text = flat.sentence("vcpus");
    println!("{text}");
    assert!(
        text.starts_with("flat within +-20%: every vcpus up to 8 within -"),
        "{text}"
    );
    let why = Unjudged::TooFewSamples {
        n: 4.0,
        samples: 200,
        needed: 528,
    };
    assert_eq!(
        why.text(Statistic::P99, "vcpus", CONFIDENCE),
        "p99 not judged: its 99% interval needs 528 samples a point (200 at vcpus=4)"
    );
}
