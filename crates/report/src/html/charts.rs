//! The page's charts as inline SVG, drawn with plotters' SVG backend.
//!
//! Every chart returns its SVG text, or a sentence saying why it could not be drawn, so a
//! page always renders. Times are in microseconds on the axes; an axis turns logarithmic
//! when its values span more than two decades, where a linear axis would flatten all but
//! the slowest values against zero.

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::element::IntoDynElement;
use plotters::prelude::*;
use vmscale_stats::linear_fit;

use crate::units;

/// The chart could not be drawn; says why.
pub(crate) type ChartError = String;

/// Colours that stay apart from each other on white (the Tableau 10 palette).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

pub(crate) fn colour(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

/// Two decades: beyond this ratio of largest to smallest value an axis goes logarithmic.
const LOG_RATIO: f64 = 100.0;
/// Points a CDF is drawn through: enough for a smooth curve, few enough to keep the page
/// small however many samples a series has.
const CDF_POINTS: usize = 400;
/// Raw samples drawn behind the growth chart's bins, at most.
const SCATTER_POINTS: usize = 1_500;

/// One axis: its range and whether it is logarithmic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Axis {
    pub lo: f64,
    pub hi: f64,
    pub log: bool,
}

impl Axis {
    /// An axis covering `values` with some air; `None` when there is no finite value.
    /// Zero and negative values cannot sit on a log axis, so only positive ones count
    /// towards making it logarithmic.
    pub(crate) fn fit(values: impl IntoIterator<Item = f64>) -> Option<Axis> {
        let values: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if values.is_empty() {
            return None;
        }
        if lo > 0.0 && hi / lo > LOG_RATIO {
            return Some(Axis {
                lo: lo / 1.3,
                hi: hi * 1.3,
                log: true,
            });
        }
        let pad = if hi > lo {
            (hi - lo) * 0.05
        } else {
            hi.abs().max(1.0) * 0.1
        };
        // Latencies and counts are never negative: start at zero rather than below it.
        let lo = if lo >= 0.0 {
            (lo - pad).max(0.0)
        } else {
            lo - pad
        };
        Some(Axis {
            lo,
            hi: hi + pad,
            log: false,
        })
    }

    /// An axis from zero, for quantities that stack up from it (phase bars).
    fn from_zero(hi: f64) -> Axis {
        Axis {
            lo: 0.0,
            hi: if hi > 0.0 { hi * 1.08 } else { 1.0 },
            log: false,
        }
    }

    /// " (log scale)" for the axis caption of a log axis.
    fn note(self) -> &'static str {
        if self.log {
            ", log scale"
        } else {
            ""
        }
    }
}

/// Calls `$body` with `$x` and `$y` bound to plotters range specs for the two axes: the
/// four combinations of linear and log axes are different types, so the generic body is
/// instantiated once per combination.
macro_rules! with_axes {
    ($xa:expr, $ya:expr, |$x:ident, $y:ident| $body:expr) => {{
        let (xa, ya): (Axis, Axis) = ($xa, $ya);
        match (xa.log, ya.log) {
            (false, false) => {
                let ($x, $y) = (xa.lo..xa.hi, ya.lo..ya.hi);
                $body
            }
            (false, true) => {
                let ($x, $y) = (xa.lo..xa.hi, (ya.lo..ya.hi).log_scale());
                $body
            }
            (true, false) => {
                let ($x, $y) = ((xa.lo..xa.hi).log_scale(), ya.lo..ya.hi);
                $body
            }
            (true, true) => {
                let ($x, $y) = ((xa.lo..xa.hi).log_scale(), (ya.lo..ya.hi).log_scale());
                $body
            }
        }
    }};
}

/// Size and captions shared by every chart.
pub(crate) struct Frame<'a> {
    pub width: u32,
    pub height: u32,
    pub title: &'a str,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    /// Where the legend goes: the corner the data leaves empty.
    pub legend: SeriesLabelPosition,
}

/// One line of a chart: points, colour and dash.
pub(crate) struct Line {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub colour: RGBColor,
    pub dash: Dash,
    /// Dots drawn on the line (p50 and p99 of a CDF).
    pub marks: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Dash {
    Solid,
    Dashed,
    Dotted,
}

/// Renders `draw` into an SVG string of the frame's size.
fn svg(
    frame: &Frame,
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<(), ChartError>,
) -> Result<String, ChartError> {
    let mut out = String::new();
    {
        let root =
            SVGBackend::with_string(&mut out, (frame.width, frame.height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        draw(&root)?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// Numbers on an axis: three significant figures without trailing zeros, so a count
/// reads "16" and a latency "0.5", not "16.0" and "0.500".
fn tick(value: &f64) -> String {
    let text = units::significant(*value, 3, 3);
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// A chart of lines over two axes, with a legend; the scaling curve, the CDFs and the
/// growth lines are all drawn by this.
pub(crate) fn lines(
    frame: &Frame,
    x: Axis,
    y: Axis,
    lines: &[Line],
    scatter: &[(f64, f64)],
) -> Result<String, ChartError> {
    let extras = Extras {
        scatter,
        ..Extras::default()
    };
    lines_with(frame, x, y, lines, &extras)
}

/// A shaded range under a line: a confidence band.
pub(crate) struct Band {
    /// (x, low, high), in x order.
    pub points: Vec<(f64, f64, f64)>,
    pub colour: RGBColor,
}

/// Vertical bars from each point's low to its high: a confidence interval per point.
pub(crate) struct ErrorBars {
    /// (x, low, high).
    pub points: Vec<(f64, f64, f64)>,
    pub colour: RGBColor,
}

/// What a line chart may draw besides its lines, bottom first.
#[derive(Default)]
pub(crate) struct Extras<'a> {
    pub scatter: &'a [(f64, f64)],
    pub bands: &'a [Band],
    pub errors: &'a [ErrorBars],
    /// Vertical rules at these x values (a knee, the largest N measured).
    pub rules: &'a [f64],
}

pub(crate) fn lines_with(
    frame: &Frame,
    x: Axis,
    y: Axis,
    lines: &[Line],
    extras: &Extras,
) -> Result<String, ChartError> {
    let x_desc = format!("{}{}", frame.x_desc, x.note());
    let y_desc = format!("{}{}", frame.y_desc, y.note());
    svg(frame, |root| {
        with_axes!(x, y, |xs, ys| draw_lines(
            root, frame, &x_desc, &y_desc, xs, ys, lines, extras
        ))
    })
}

#[allow(clippy::too_many_arguments)]
fn draw_lines<'b, X, Y>(
    root: &DrawingArea<SVGBackend<'b>, Shift>,
    frame: &Frame,
    x_desc: &str,
    y_desc: &str,
    xs: X,
    ys: Y,
    lines: &[Line],
    extras: &Extras,
) -> Result<(), ChartError>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let mut chart = ChartBuilder::on(root)
        .caption(frame.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(46)
        .y_label_area_size(64)
        .build_cartesian_2d(xs, ys)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .light_line_style(RGBColor(235, 235, 235))
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;

    let grey = RGBColor(170, 170, 170).mix(0.5);
    chart
        .draw_series(
            extras
                .scatter
                .iter()
                .map(|&p| Circle::new(p, 2, grey.filled())),
        )
        .map_err(|e| err(&e))?;
    for band in extras.bands {
        let outline: Vec<(f64, f64)> = band
            .points
            .iter()
            .map(|&(x, _, hi)| (x, hi))
            .chain(band.points.iter().rev().map(|&(x, lo, _)| (x, lo)))
            .collect();
        chart
            .draw_series(std::iter::once(Polygon::new(
                outline,
                band.colour.mix(0.18).filled(),
            )))
            .map_err(|e| err(&e))?;
    }
    for bars in extras.errors {
        let style = bars.colour.stroke_width(2);
        chart
            .draw_series(
                bars.points
                    .iter()
                    .map(|&(x, lo, hi)| PathElement::new(vec![(x, lo), (x, hi)], style)),
            )
            .map_err(|e| err(&e))?;
    }
    let (y_lo, y_hi) = {
        let range = chart.y_range();
        (range.start, range.end)
    };
    // A rule outside the drawn range would be clamped to the chart's edge by plotters.
    let x_range = chart.x_range();
    for &rule in extras.rules.iter().filter(|&&r| x_range.contains(&r)) {
        chart
            .draw_series(DashedLineSeries::new(
                [(rule, y_lo), (rule, y_hi)],
                4,
                4,
                RGBColor(120, 120, 120).stroke_width(1),
            ))
            .map_err(|e| err(&e))?;
    }

    for line in lines {
        let style = line.colour.stroke_width(2);
        let points = line.points.iter().copied();
        let legend = match line.dash {
            Dash::Solid => chart.draw_series(LineSeries::new(points, style)),
            Dash::Dashed => chart.draw_series(DashedLineSeries::new(points, 8, 5, style)),
            Dash::Dotted => chart.draw_series(DashedLineSeries::new(points, 2, 4, style)),
        }
        .map_err(|e| err(&e))?;
        let (colour, dash) = (line.colour, line.dash);
        legend
            .label(line.label.as_str())
            .legend(move |(x, y)| legend_mark(x, y, colour, dash));
        chart
            .draw_series(
                line.marks
                    .iter()
                    .map(|&p| Circle::new(p, 4, line.colour.filled())),
            )
            .map_err(|e| err(&e))?;
    }

    chart
        .configure_series_labels()
        .position(frame.legend.clone())
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(|e| err(&e))?;
    Ok(())
}

/// The legend's sample of a line: a short stroke, gapped like the line. Always four
/// strokes (overlapping for a solid line), so every dash is one element type.
fn legend_mark<'a, DB: DrawingBackend + 'a>(
    x: i32,
    y: i32,
    colour: RGBColor,
    dash: Dash,
) -> impl IntoDynElement<'a, DB, (i32, i32)> {
    let style = colour.stroke_width(2);
    let strokes: [(i32, i32); 4] = match dash {
        Dash::Solid => [(0, 6), (6, 12), (12, 18), (18, 22)],
        Dash::Dashed => [(0, 8), (0, 8), (13, 21), (13, 21)],
        Dash::Dotted => [(0, 2), (7, 9), (14, 16), (21, 23)],
    };
    let stroke = |(from, to): (i32, i32)| PathElement::new(vec![(from, 0), (to, 0)], style);
    EmptyElement::at((x, y))
        + stroke(strokes[0])
        + stroke(strokes[1])
        + stroke(strokes[2])
        + stroke(strokes[3])
}

/// One stacked bar: its label under the axis and its segments bottom up.
pub(crate) struct Bar {
    pub label: String,
    /// Height of each segment, in the order of the chart's segment names.
    pub segments: Vec<f64>,
}

/// Stacked bars, one per point, segments coloured by name with a legend.
pub(crate) fn stacked_bars(
    frame: &Frame,
    names: &[String],
    bars: &[Bar],
) -> Result<String, ChartError> {
    let top = bars
        .iter()
        .map(|b| b.segments.iter().sum::<f64>())
        .fold(0.0, f64::max);
    let y = Axis::from_zero(top);
    let count = bars.len().max(1);
    svg(frame, |root| {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        // Bars sit at whole x; the labels are the bars' own, not numbers.
        let label = |x: &f64| {
            let index = x.round();
            if (x - index).abs() > 1e-6 || index < 0.0 {
                return String::new();
            }
            bars.get(index as usize)
                .map_or(String::new(), |b| b.label.clone())
        };
        let mut chart = ChartBuilder::on(root)
            .caption(frame.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(46)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.6..(count as f64 - 0.4), y.lo..y.hi)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(count + 1)
            .x_label_formatter(&label)
            .y_label_formatter(&tick)
            .x_desc(frame.x_desc)
            .y_desc(frame.y_desc)
            .light_line_style(RGBColor(235, 235, 235))
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .draw()
            .map_err(|e| err(&e))?;
        for (segment, name) in names.iter().enumerate() {
            let fill = colour(segment).filled();
            let rects = bars.iter().enumerate().map(|(i, bar)| {
                let below: f64 = bar.segments[..segment].iter().sum();
                let height = bar.segments.get(segment).copied().unwrap_or(0.0);
                let x = i as f64;
                Rectangle::new([(x - 0.3, below), (x + 0.3, below + height)], fill)
            });
            chart
                .draw_series(rects)
                .map_err(|e| err(&e))?
                .label(name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], fill));
        }
        chart
            .configure_series_labels()
            .position(frame.legend.clone())
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;
        Ok(())
    })
}

/// The empirical CDF of `samples_ns` in microseconds, through at most [`CDF_POINTS`]
/// points; empty without samples.
pub(crate) fn cdf(samples_ns: &[u64]) -> Vec<(f64, f64)> {
    let mut sorted = samples_ns.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let steps = CDF_POINTS.min(n);
    (0..=steps)
        .map(|step| (step * (n - 1)).div_ceil(steps))
        .map(|index| {
            (
                sorted[index] as f64 / 1_000.0,
                (index + 1) as f64 / n as f64,
            )
        })
        .collect()
}

/// The growth chart's data for one series: each bin's (median x, p50 us) and
/// (median x, p99 us), a thinned scatter of raw samples, and the least-squares line.
pub(crate) struct GrowthData {
    pub p50: Vec<(f64, f64)>,
    pub p99: Vec<(f64, f64)>,
    pub scatter: Vec<(f64, f64)>,
    pub fit: Vec<(f64, f64)>,
}

/// The growth table's bins of (x, latency) pairs (so the chart and the table beside it
/// agree bin for bin); `None` when x and samples do not pair up or there are none.
pub(crate) fn growth(xs: &[u64], ys: &[u64]) -> Option<GrowthData> {
    if xs.len() != ys.len() || xs.is_empty() {
        return None;
    }
    let (lo, hi) = (*xs.iter().min()?, *xs.iter().max()?);
    let bins = crate::growth::bin(xs, ys);
    let p50 = bins
        .iter()
        .map(|b| (b.median_x, b.summary.p50_ns as f64 / 1_000.0))
        .collect();
    let p99 = bins
        .iter()
        .map(|b| (b.median_x, b.summary.p99_ns as f64 / 1_000.0))
        .collect();
    let stride = xs.len().div_ceil(SCATTER_POINTS);
    let scatter = xs
        .iter()
        .zip(ys)
        .step_by(stride)
        .map(|(&x, &y)| (x as f64, y as f64 / 1_000.0))
        .collect();
    let as_f64 = |values: &[u64]| values.iter().map(|&v| v as f64).collect::<Vec<f64>>();
    let fit = linear_fit(&as_f64(xs), &as_f64(ys))
        .map(|f| {
            [lo as f64, hi as f64]
                .map(|x| (x, (f.intercept + f.slope * x) / 1_000.0))
                .to_vec()
        })
        .unwrap_or_default();
    Some(GrowthData {
        p50,
        p99,
        scatter,
        fit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_drop_trailing_zeros() {
        assert_eq!(tick(&16.0), "16");
        assert_eq!(tick(&0.5), "0.5");
        assert_eq!(tick(&0.125), "0.125");
        assert_eq!(tick(&1234.0), "1234");
        assert_eq!(tick(&100.0), "100");
    }

    #[test]
    fn axes_turn_logarithmic_beyond_two_decades() {
        assert!(!Axis::fit([1.0, 50.0]).unwrap().log);
        assert!(Axis::fit([1.0, 500.0]).unwrap().log);
        // A zero cannot sit on a log axis.
        assert!(!Axis::fit([0.0, 500.0]).unwrap().log);
        assert_eq!(Axis::fit([]), None);
        let flat = Axis::fit([5.0, 5.0]).unwrap();
        assert!(flat.lo < 5.0 && flat.hi > 5.0, "{flat:?}");
    }

    #[test]
    fn cdf_runs_from_the_fastest_to_the_slowest_sample() {
        let samples: Vec<u64> = (1..=10_000).map(|i| i * 1_000).collect();
        let points = cdf(&samples);
        assert!(points.len() <= CDF_POINTS + 1);
        assert_eq!(points.first(), Some(&(1.0, 1.0 / 10_000.0)));
        assert_eq!(points.last(), Some(&(10_000.0, 1.0)));
        assert!(points
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert!(cdf(&[]).is_empty());
    }

    #[test]
    fn growth_bins_follow_a_steady_slope() {
        let xs: Vec<u64> = (0..1_000).collect();
        let ys: Vec<u64> = xs.iter().map(|x| 10_000 + 5 * x).collect();
        let data = growth(&xs, &ys).unwrap();
        assert_eq!(data.p50.len(), 10);
        assert!(data.p50.windows(2).all(|w| w[0].1 < w[1].1));
        let fit = &data.fit;
        assert!((fit[1].1 - fit[0].1 - 4.995).abs() < 1e-6, "{fit:?}");
        assert!(growth(&[1, 2], &[1]).is_none());
    }
}
