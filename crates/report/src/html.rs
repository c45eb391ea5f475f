//! One self-contained HTML page for a run: inline CSS and inline SVG charts, nothing
//! fetched at view time, so the file can be mailed, attached to a bug or opened from disk
//! years later. The only script is the flame graphs' (zoom and search, inline); every
//! chart shows without it.
//!
//! Reading order: the verdict, what ran and where, the warnings, how latency scales with
//! the swept value, each point's distribution, where the time goes, how latency grows with
//! what each sample counted, the kernel trace, the latency table and last the KVM counters.
//! Every section is the one the other formats lay out (built in `sections`, laid out by
//! `render::html`), so the page agrees with them to the digit; what this module adds are the
//! charts, the [`Figure`]s of those sections.

mod charts;
mod flame;
mod timeline;

use vmscale_run::findings::TimelineExcerpt;
use vmscale_run::{RunRecord, Series};

use crate::document::Figure;
use crate::grid;
use crate::render;
pub use crate::render::html::escape;
use crate::sections::verdict::{self, Depth};
use crate::sections::{context, counters, growth, latency, phases, trace, vmm};
use crate::{scaling, units};
use charts::{Axis, Bar, Dash, Frame, Line};
use plotters::chart::SeriesLabelPosition;

/// Light, print-friendly styling; `color-scheme` keeps a dark-mode browser from inverting
/// the white chart backgrounds into unreadable ones.
const STYLE: &str = "
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; color: #1a1a1a;
  background: #fff; margin: 1.5rem auto; max-width: 1240px; padding: 0 1rem; line-height: 1.4; }
h1 { font-size: 1.5rem; margin-bottom: .5rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
h3 { font-size: 1.02rem; margin: 1.2rem 0 .4rem; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; margin: 0; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
.warnings { background: #fff4e5; border-left: 4px solid #e08a00; padding: .5rem 1rem; margin: 1rem 0; }
.warnings ul { margin: .2rem 0; padding-left: 1.2rem; }
.charts { display: flex; flex-wrap: wrap; gap: 1rem; }
figure { margin: 0 0 1rem; }
figcaption { font-size: .9rem; color: #444; max-width: 600px; }
.growth { flex: 0 1 590px; min-width: 0; }
figure svg { display: block; max-width: 100%; height: auto; border: 1px solid #eee; }
table { border-collapse: collapse; font-size: .85rem; margin: .4rem 0 1rem; }
th, td { border: 1px solid #d6d6d6; padding: .2rem .5rem; vertical-align: top; }
th { background: #f3f3f3; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f7f7f7; border: 1px solid #e3e3e3; padding: .4rem .6rem; font-size: .8rem;
  overflow-x: auto; margin: .2rem 0 .6rem; }
ol.findings li, ul.lines li { margin: .2rem 0; }
.muted { color: #666; }
";

/// The run as one HTML page.
pub fn render_html(record: &RunRecord) -> String {
    let title = format!(
        "{}: {} latency by {}",
        record.tool.name,
        record.scenario,
        grid::sweep_header(record)
    );
    let mut body = format!("<h1>{}</h1>\n", escape(&title));
    let figures = |f: &Figure| draw(record, f);
    let section = |section: &crate::document::Section| render::html::section(&figures, section);
    body.extend(verdict::section(record, Depth::Full).as_ref().map(section));
    body.push_str(&section(&context::section(record)));
    body.extend(
        crate::sections::scaling::section(record, None)
            .as_ref()
            .map(section),
    );
    body.extend(latency::distributions(record).as_ref().map(section));
    body.extend(phases::section(record).as_ref().map(section));
    body.push_str(&growth_sections(record));
    body.extend(vmm::section(record).as_ref().map(section));
    let flame_graphs = crate::sections::flame::section(record);
    body.extend(flame_graphs.as_ref().map(section));
    body.extend(record.trace.as_ref().map(|t| section(&trace::section(t))));
    body.extend(latency::section(record).as_ref().map(section));
    body.extend(counters::sections(record).iter().map(section));
    if flame_graphs.is_some() {
        body.push_str(&format!("<script>{}</script>\n", flame::SCRIPT));
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n",
        escape(&title)
    )
}

/// A tour as one page: a table of every scenario's first finding, then per scenario its
/// verdict, how its cost grows (the growth charts) and where its CPU time went (the flame
/// graph), each linking to the scenario's own full report. `banner` says where a tour that
/// stopped early stopped.
pub fn render_tour_html(runs: &[(&RunRecord, String)], banner: Option<&str>) -> String {
    let mut body = String::from("<h1>vmscale tour</h1>\n");
    if let Some(banner) = banner {
        body.push_str(&format!("<p><strong>{}</strong></p>\n", escape(banner)));
    }
    body.push_str("<table>\n<tr><th>scenario</th><th>cause</th><th>verdict</th></tr>\n");
    for (record, _) in runs {
        let (cause, summary) = record.verdict.first().map_or(("", String::new()), |f| {
            (f.cause.label(), f.summary.clone())
        });
        body.push_str(&format!(
            "<tr><td><a href=\"#{}\">{}</a></td><td>{}</td><td>{}</td></tr>\n",
            escape(&record.scenario),
            escape(&record.scenario),
            escape(cause),
            escape(&summary)
        ));
    }
    body.push_str("</table>\n");
    let mut any_flame = false;
    for (record, link) in runs {
        body.push_str(&format!(
            "<h2 id=\"{}\">{} <a class=\"muted\" href=\"{}\">(the full report)</a></h2>\n",
            escape(&record.scenario),
            escape(&record.scenario),
            escape(link)
        ));
        let figures = |f: &Figure| draw(record, f);
        let section = |s: &crate::document::Section| render::html::section(&figures, s);
        body.extend(verdict::section(record, Depth::Brief).as_ref().map(section));
        body.extend(
            crate::sections::scaling::section(record, None)
                .as_ref()
                .map(section),
        );
        let flame_graphs = crate::sections::flame::section(record);
        any_flame |= flame_graphs.is_some();
        body.extend(flame_graphs.as_ref().map(section));
    }
    if any_flame {
        body.push_str(&format!("<script>{}</script>\n", flame::SCRIPT));
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>vmscale tour</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n"
    )
}

/// A figure of a section built from `record`, drawn.
pub(crate) fn draw(record: &RunRecord, figure: &Figure) -> String {
    match figure {
        Figure::Timeline(excerpt) => timeline(excerpt),
        Figure::Scaling => scaling_charts(record),
        Figure::Distributions => distribution_charts(record),
        Figure::Phases => phase_charts(record),
        Figure::Flame => record
            .trace
            .as_ref()
            .and_then(|t| t.on_cpu.as_ref())
            .map(|p| {
                let caption = "Every frame is as wide as the samples in it and its callees; \
                    the root is at the bottom, then process, thread, user and kernel frames. \
                    Click a frame to zoom, the bottom frame or Reset zoom to go back; Search \
                    highlights frames by regular expression and says what share they hold.";
                self::figure(Ok(flame::flame_svg("flame-on-cpu", p)), caption)
            })
            .unwrap_or_default(),
        Figure::FlameDiff => match record.trace.as_ref().map(|t| t.on_cpu_by_n.as_slice()) {
            Some([small, large]) => self::figure(
                Ok(flame::diff_svg(
                    "flame-diff",
                    &small.profile,
                    &large.profile,
                )),
                "Red: a larger share of the samples at the larger value; blue: a smaller \
                 one; hover a frame for both shares.",
            ),
            _ => String::new(),
        },
        Figure::FlameOffCpu => record
            .trace
            .as_ref()
            .and_then(vmscale_run::wait_chains::profile)
            .map(|p| {
                self::figure(
                    Ok(flame::flame_svg("flame-off-cpu", &p)),
                    "Every frame is as wide as the time in it and above it, in microseconds; \
                     the root is at the bottom, then whose time it is, the wait, who ended it \
                     (or held the CPU), and what that task did meanwhile, hop by hop. A \
                     wait's time that no waker accounts for ends at the wait's own frame.",
                )
            })
            .unwrap_or_default(),
        Figure::Growth { point, series } => {
            let names = grid::series_names(record);
            record
                .points
                .get(*point)
                .and_then(|p| p.series.get(*series))
                .map(|s| growth_chart(s, colour_of(&names, &s.name)))
                .unwrap_or_default()
        }
    }
}

/// The trace around its worst wait: who ran where, who waited and who held the lock.
fn timeline(excerpt: &TimelineExcerpt) -> String {
    let mut caption = format!(
        "{:.2} ms around {}. Lanes: the task on each CPU, then each task that waited on or \
         held a lock (state, then waits, then holds). Hover a bar for its task, lock and length.",
        excerpt.end_ns.saturating_sub(excerpt.start_ns) as f64 / 1e6,
        excerpt.focus
    );
    if excerpt.truncated {
        caption.push_str(" Some lanes or slices were left out to keep the page small.");
    }
    figure(timeline::timeline_svg(excerpt), &caption)
}

/// A chart in a figure with its caption; a chart that could not be drawn shows why.
fn figure(chart: Result<String, charts::ChartError>, caption: &str) -> String {
    let content = match chart {
        Ok(svg) => svg,
        Err(why) => format!("<p class=\"muted\">chart not drawn: {}</p>", escape(&why)),
    };
    format!(
        "<figure>\n{content}\n<figcaption>{}</figcaption>\n</figure>\n",
        escape(caption)
    )
}

fn colour_of(names: &[&str], name: &str) -> plotters::style::RGBColor {
    charts::colour(names.iter().position(|n| *n == name).unwrap_or(0))
}

/// p50, p99 and mean of every series against the swept value, then each series' fit.
fn scaling_charts(record: &RunRecord) -> String {
    let names = grid::series_names(record);
    let sweep = grid::sweep_header(record);
    let mut lines = Vec::new();
    for &name in &names {
        let summaries: Vec<(f64, &vmscale_stats::Summary)> = record
            .points
            .iter()
            .flat_map(|p| p.series.iter().map(move |s| (p.n as f64, s)))
            .filter(|(_, s)| s.name == name)
            .filter_map(|(n, s)| s.summary.as_ref().map(|summary| (n, summary)))
            .collect();
        let stat = |pick: fn(&vmscale_stats::Summary) -> f64| {
            summaries
                .iter()
                .map(|(n, s)| (*n, pick(s) / 1_000.0))
                .collect::<Vec<_>>()
        };
        let colour = colour_of(&names, name);
        for (label, dash, points) in [
            ("p50", Dash::Solid, stat(|s| s.p50_ns as f64)),
            ("p99", Dash::Dashed, stat(|s| s.p99_ns as f64)),
            ("mean", Dash::Dotted, stat(|s| s.mean_ns)),
        ] {
            lines.push(Line {
                label: format!("{name} {label}"),
                marks: points.clone(),
                points,
                colour,
                dash,
            });
        }
    }
    let mut out = String::new();
    let xs = record.points.iter().map(|p| p.n as f64);
    let ys = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
    let (Some(x), Some(y)) = (Axis::fit(xs), Axis::fit(ys)) else {
        out.push_str("<p class=\"muted\">no samples to plot</p>\n");
        return out;
    };
    let x_desc = sweep.to_string();
    let frame = Frame {
        width: 1000,
        height: 520,
        title: "latency by sweep value",
        x_desc: &x_desc,
        y_desc: "latency (us)",
        legend: SeriesLabelPosition::UpperLeft,
    };
    let caption = format!(
        "p50 (solid), p99 (dashed) and mean (dotted) latency of every strategy against {sweep}; \
         one dot per measured point."
    );
    out.push_str(&figure(charts::lines(&frame, x, y, &lines, &[]), &caption));
    out.push_str(&fit_charts(record, &names));
    out
}

/// Per series: each point's p50 with its interval, and the model's curve with its band
/// only where the model fits (out to twice the largest N for a growing one); a growth no
/// model fits is flagged in the title and the caption instead of drawn through.
fn fit_charts(record: &RunRecord, names: &[&str]) -> String {
    let curves = scaling::p50_curves(record);
    if curves.is_empty() {
        return String::new();
    }
    let sweep = grid::sweep_header(record);
    let mut out = String::from("<div class=\"charts\">\n");
    for curve in &curves {
        let colour = colour_of(names, &curve.series);
        let us = |v: f64| v / 1_000.0;
        let mut lines = vec![Line {
            label: format!("{} p50", curve.series),
            points: Vec::new(),
            marks: curve
                .measured
                .iter()
                .map(|&(n, v, _, _)| (n, us(v)))
                .collect(),
            colour,
            dash: Dash::Solid,
        }];
        if let Some(model) = curve.model {
            lines.push(Line {
                label: format!("{model} fit"),
                points: curve.curve.iter().map(|&(n, v)| (n, us(v))).collect(),
                marks: Vec::new(),
                colour,
                dash: Dash::Dashed,
            });
        }
        let band = charts::Band {
            points: curve
                .band
                .iter()
                .map(|&(n, lo, hi)| (n, us(lo), us(hi)))
                .collect(),
            colour,
        };
        let errors = charts::ErrorBars {
            points: curve
                .measured
                .iter()
                .map(|&(n, _, lo, hi)| (n, us(lo), us(hi)))
                .collect(),
            colour,
        };
        let mut rules = vec![curve.largest];
        rules.extend(curve.knee);
        let xs = curve
            .measured
            .iter()
            .map(|p| p.0)
            .chain(curve.curve.iter().map(|p| p.0));
        let ys = errors
            .points
            .iter()
            .flat_map(|p| [p.1, p.2])
            .chain(lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)))
            .chain(band.points.iter().flat_map(|p| [p.1, p.2]));
        let (Some(x), Some(y)) = (Axis::fit(xs), Axis::fit(ys)) else {
            continue;
        };
        let title = match &curve.misfit {
            Some(_) => format!("{}: p50, no model fits", curve.series),
            None => format!("{}: p50 growth", curve.series),
        };
        let frame = Frame {
            width: 590,
            height: 380,
            title: &title,
            x_desc: sweep,
            y_desc: "p50 latency (us)",
            legend: SeriesLabelPosition::UpperLeft,
        };
        let bands = if band.points.is_empty() {
            Vec::new()
        } else {
            vec![band]
        };
        let extras = charts::Extras {
            bands: &bands,
            errors: std::slice::from_ref(&errors),
            rules: &rules,
            ..charts::Extras::default()
        };
        let confidence = format!("{:.0}%", curve.confidence * 100.0);
        let knee = curve
            .knee
            .map(|k| format!(" Rules: the largest {sweep} measured and the knee at {k:.1}."))
            .unwrap_or_default();
        let shape = match (&curve.misfit, curve.model) {
            (Some(misfit), _) => {
                format!(" The curve is not drawn: {misfit}, so nothing is extrapolated.")
            }
            (None, Some(model)) => format!(
                " Dashed: the {model} fit with its {confidence} band, to {} {sweep}.",
                if curve.curve.last().is_some_and(|p| p.0 > curve.largest) {
                    "twice the largest"
                } else {
                    "the largest"
                }
            ),
            (None, None) => String::new(),
        };
        let caption = format!(
            "{}: each point's p50 (dot) with its {confidence} interval (bar); {}.{shape}{knee}",
            curve.series, curve.claim
        );
        out.push_str(&format!(
            "<div class=\"growth\">{}</div>\n",
            figure(charts::lines_with(&frame, x, y, &lines, &extras), &caption)
        ));
    }
    out.push_str("</div>\n");
    out
}

/// One CDF chart per point, a line per series, p50 and p99 marked.
fn distribution_charts(record: &RunRecord) -> String {
    let names = grid::series_names(record);
    let sweep = grid::sweep_header(record);
    let mut out = String::from("<div class=\"charts\">\n");
    for point in &record.points {
        let lines: Vec<Line> = point
            .series
            .iter()
            .filter(|s| !s.samples_ns.is_empty())
            .map(|s| cdf_line(s, colour_of(&names, &s.name)))
            .collect();
        let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
        let Some(x) = Axis::fit(xs) else {
            continue;
        };
        let y = Axis {
            lo: 0.0,
            hi: 1.02,
            log: false,
        };
        let title = format!("{sweep}={}", point.n);
        let frame = Frame {
            width: 600,
            height: 360,
            title: &title,
            x_desc: "latency (us)",
            y_desc: "share of samples",
            legend: SeriesLabelPosition::LowerRight,
        };
        let caption = format!("Distribution at {sweep}={}.", point.n);
        out.push_str(&figure(charts::lines(&frame, x, y, &lines, &[]), &caption));
    }
    out.push_str("</div>\n");
    out
}

/// A series' CDF, labelled with its p50 and p99 from the stored summary (the numbers the
/// tables print).
fn cdf_line(series: &Series, colour: plotters::style::RGBColor) -> Line {
    let mut label = series.name.clone();
    let mut marks = Vec::new();
    if let Some(s) = &series.summary {
        label.push_str(&format!(
            " (p50 {} us, p99 {} us)",
            units::micros_u64(s.p50_ns),
            units::micros_u64(s.p99_ns)
        ));
        marks = vec![
            (s.p50_ns as f64 / 1_000.0, 0.5),
            (s.p99_ns as f64 / 1_000.0, 0.99),
        ];
    }
    Line {
        label,
        points: charts::cdf(&series.samples_ns),
        colour,
        dash: Dash::Solid,
        marks,
    }
}

/// Stacked bars of each phased series' mean phase times per point.
fn phase_charts(record: &RunRecord) -> String {
    let sweep = grid::sweep_header(record);
    let mut out = String::from(
        "<p>Mean time of each phase of a sample; the phases of a sample add up to it.</p>\n\
         <div class=\"charts\">\n",
    );
    for name in grid::series_names(record) {
        let phased: Vec<(u64, &Series)> = record
            .points
            .iter()
            .flat_map(|p| p.series.iter().map(move |s| (p.n, s)))
            .filter(|(_, s)| s.name == name && !s.phases.is_empty())
            .collect();
        let Some((_, first)) = phased.first() else {
            continue;
        };
        let phase_names: Vec<String> = first.phases.iter().map(|p| p.name.clone()).collect();
        let bars: Vec<Bar> = phased
            .iter()
            .map(|(n, series)| Bar {
                label: n.to_string(),
                segments: phase_names
                    .iter()
                    .map(|phase| mean_us(series, phase))
                    .collect(),
            })
            .collect();
        let title = format!("{name}: mean per phase");
        let frame = Frame {
            width: 600,
            height: 360,
            title: &title,
            x_desc: sweep,
            y_desc: "mean latency (us)",
            legend: SeriesLabelPosition::UpperLeft,
        };
        let caption = format!("Phases of {name}, stacked bottom up in the order they run.");
        out.push_str(&figure(
            charts::stacked_bars(&frame, &phase_names, &bars),
            &caption,
        ));
    }
    out.push_str("</div>\n");
    out
}

/// Mean of the named phase in microseconds; 0 when the series lacks it or its samples.
fn mean_us(series: &Series, phase: &str) -> f64 {
    series
        .phases
        .iter()
        .find(|p| p.name == phase)
        .and_then(|p| p.summary.as_ref())
        .map_or(0.0, |s| s.mean_ns / 1_000.0)
}

/// The growth sections side by side, each with its chart, bins and fitted lines.
fn growth_sections(record: &RunRecord) -> String {
    let sections = growth::sections(record);
    if sections.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<h2 id=\"growth\">How latency grows with what each sample counted</h2>\n\
         <div class=\"charts\">\n",
    );
    for section in &sections {
        out.push_str("<div class=\"growth\">\n");
        out.push_str(&render::html::titled(&|f| draw(record, f), section, 3));
        out.push_str("</div>\n");
    }
    out.push_str("</div>\n");
    out
}

fn growth_chart(series: &Series, colour: plotters::style::RGBColor) -> String {
    let Some(data) = charts::growth(&series.sample_x, &series.samples_ns) else {
        return String::new();
    };
    let xs = data.scatter.iter().map(|p| p.0);
    let ys = data
        .scatter
        .iter()
        .chain(&data.p99)
        .chain(&data.fit)
        .map(|p| p.1)
        .filter(|y| *y > 0.0);
    let (Some(x), Some(y)) = (Axis::fit(xs), Axis::fit(ys)) else {
        return String::new();
    };
    let x_desc = if series.sample_x_is.is_empty() {
        "x".to_string()
    } else {
        series.sample_x_is.clone()
    };
    let lines = [
        Line {
            label: "p50 per bin".into(),
            marks: data.p50.clone(),
            points: data.p50,
            colour,
            dash: Dash::Solid,
        },
        Line {
            label: "p99 per bin".into(),
            marks: data.p99.clone(),
            points: data.p99,
            colour,
            dash: Dash::Dashed,
        },
        Line {
            label: "least squares over all samples".into(),
            points: data.fit,
            colour: plotters::style::RGBColor(60, 60, 60),
            dash: Dash::Dotted,
            marks: Vec::new(),
        },
    ];
    let title = format!("{} against {x_desc}", series.name);
    let frame = Frame {
        width: 600,
        height: 360,
        title: &title,
        x_desc: &x_desc,
        y_desc: "latency (us)",
        legend: SeriesLabelPosition::UpperLeft,
    };
    let caption = "Grey dots: samples (thinned); lines: p50 and p99 of each bin, placed at \
                   the bin's median x; dotted: the least-squares line, whose slope is given \
                   below.";
    figure(charts::lines(&frame, x, y, &lines, &data.scatter), caption)
}

/// Two runs of the same sweep on one page (`vmscale compare --html`): the comparison's
/// sections (the ones the terminal and Markdown lay out), then every series' p50 against N
/// and its CDF of A (solid) and B (dashed) at every point both measured.
pub fn render_compare_html(
    a: &RunRecord,
    b: &RunRecord,
    comparison: &crate::compare::Comparison,
) -> String {
    let title = format!(
        "{}: {} compared (A solid, B dashed)",
        a.tool.name, a.scenario
    );
    let sweep = grid::sweep_header(a);
    let names = grid::series_names(a);
    let mut body = format!("<h1>{}</h1>\n", escape(&title));
    for section in crate::compare::sections(comparison) {
        body.push_str(&render::html::section(&|f| draw(a, f), &section));
    }

    let mut p50_lines = Vec::new();
    for (run, dash, tag) in [(a, Dash::Solid, "A"), (b, Dash::Dashed, "B")] {
        for &name in &names {
            let points: Vec<(f64, f64)> = run
                .points
                .iter()
                .filter_map(|p| {
                    let s = p.series.iter().find(|s| s.name == name)?.summary.as_ref()?;
                    Some((p.n as f64, s.p50_ns as f64 / 1_000.0))
                })
                .collect();
            p50_lines.push(Line {
                label: format!("{tag} {name} p50"),
                marks: points.clone(),
                points,
                colour: colour_of(&names, name),
                dash,
            });
        }
    }
    let xs = a.points.iter().chain(&b.points).map(|p| p.n as f64);
    let ys = p50_lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
    if let (Some(x), Some(y)) = (Axis::fit(xs), Axis::fit(ys)) {
        let frame = Frame {
            width: 1000,
            height: 480,
            title: "p50 by sweep value",
            x_desc: sweep,
            y_desc: "latency (us)",
            legend: SeriesLabelPosition::UpperLeft,
        };
        body.push_str("<h2 id=\"scaling\">Scaling, A against B</h2>\n");
        body.push_str(&figure(
            charts::lines(&frame, x, y, &p50_lines, &[]),
            &format!("p50 of every strategy against {sweep}: A solid, B dashed."),
        ));
    }

    body.push_str(
        "<h2 id=\"distributions\">Distributions, A against B</h2>\n<div class=\"charts\">\n",
    );
    for pa in &a.points {
        let Some(pb) = b.points.iter().find(|p| p.n == pa.n) else {
            continue;
        };
        for sa in &pa.series {
            let Some(sb) = pb.series.iter().find(|s| s.name == sa.name) else {
                continue;
            };
            let colour = colour_of(&names, &sa.name);
            let mut line_a = cdf_line(sa, colour);
            line_a.label = format!("A {}", line_a.label);
            let mut line_b = cdf_line(sb, colour);
            line_b.label = format!("B {}", line_b.label);
            line_b.dash = Dash::Dashed;
            let lines = [line_a, line_b];
            let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
            let Some(x) = Axis::fit(xs) else {
                continue;
            };
            let y = Axis {
                lo: 0.0,
                hi: 1.02,
                log: false,
            };
            let chart_title = format!("{} at {sweep}={}", sa.name, pa.n);
            let frame = Frame {
                width: 600,
                height: 360,
                title: &chart_title,
                x_desc: "latency (us)",
                y_desc: "share of samples",
                legend: SeriesLabelPosition::LowerRight,
            };
            body.push_str(&figure(
                charts::lines(&frame, x, y, &lines, &[]),
                &format!("{chart_title}: A solid, B dashed."),
            ));
        }
    }
    body.push_str("</div>\n");
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n",
        escape(&title)
    )
}

#[cfg(test)]
mod tests {
    use vmscale_run::{HostFacts, Phase, Point, ToolInfo, TraceSection};
    use vmscale_stats::Summary;

    use super::*;

    fn series(name: &str, samples_ns: Vec<u64>) -> Series {
        Series {
            name: name.into(),
            summary: Summary::from_samples(&samples_ns),
            samples_ns,
            ..Series::default()
        }
    }

    fn record() -> RunRecord {
        let host: HostFacts = serde_json::from_value(serde_json::json!({
            "hostname": "h", "kernel_release": "6.8", "kernel_version": "#1",
            "cpu_model": "cpu", "online_cpus": 2, "memory_bytes": 0, "kvm": null
        }))
        .expect("host facts match the schema");
        let point = |n: u64| {
            let mut phased = series("pause-all", (1..=50).map(|i| i * 3_000 * n).collect());
            phased.phases = vec![
                Phase::new("kick+wait", (1..=50).map(|i| i * 2_000 * n).collect()),
                Phase::new("update", (1..=50).map(|i| i * 1_000 * n).collect()),
            ];
            let mut evil = series("<script>", (1..=50).map(|i| 1_000 + i * n).collect());
            evil.sample_x = (0..50).collect();
            evil.sample_x_is = "irqfds & \"friends\"".into();
            Point {
                n,
                vcpus_per_host_cpu: n as f64 / 2.0,
                series: vec![series("direct", vec![1_000 * n; 50]), phased, evil],
            }
        };
        RunRecord {
            schema_version: vmscale_run::SCHEMA_VERSION,
            verdict: Vec::new(),
            scaling: Vec::new(),
            tool: ToolInfo::current("0.1.0"),
            scenario: "pause".into(),
            sweep: "vcpus".into(),
            command_line: vec!["vmscale".into(), "run".into()],
            started_utc: "2026-01-02T03:04:05Z".into(),
            finished_utc: String::new(),
            host,
            knobs: serde_json::json!({"iterations": 50}),
            background: None,
            points: vec![point(1), point(4)],
            trace: Some(TraceSection {
                events: vec!["lock:contention_begin".into(), "lock:contention_end".into()],
                ..TraceSection::default()
            }),
            warnings: vec!["a <b>bold</b> warning".into()],
        }
    }

    #[test]
    fn the_page_has_the_charts_and_names_every_series() {
        let html = render_html(&record());
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("latency by sweep value"), "scaling curve");
        assert!(
            html.contains(
                "<h2 id=\"scaling\">How it scales with N</h2>\n<p class=\"muted\">Claims at 99% \
                 confidence, intervals in brackets; flat: every point within the margin of the \
                 smallest N; fits by weighted least squares within T1 &gt; 0, 0 &lt;= s &lt;= 1, \
                 k &gt;= 0 (s: contention, k: coherency), drawn only where they fit.</p>\n<figure>\n<svg"
            ),
            "scaling svg"
        );
        for name in ["direct", "pause-all", "kick+wait", "update"] {
            assert!(html.contains(name), "{name} missing");
        }
        // Scaling, two CDFs, one phase chart, two growth charts.
        assert_eq!(html.matches("<svg").count(), 6);
        assert!(
            html.contains("least squares over all 50 samples"),
            "growth caption"
        );
        assert!(html.contains(crate::sections::contention::NO_CONTENTION));
    }

    #[test]
    fn text_from_the_record_stays_inert() {
        let html = render_html(&record());
        assert!(!html.contains("<script"), "a series name became markup");
        assert!(html.contains("&lt;script&gt;"));
        assert!(html.contains("a &lt;b&gt;bold&lt;/b&gt; warning"));
        assert!(!html.contains("<b>bold"));
        assert!(html.contains("irqfds &amp; &quot;friends&quot;"));
        assert_eq!(escape("<a href='x'>&"), "&lt;a href=&#39;x&#39;&gt;&amp;");
    }

    #[test]
    fn nothing_is_fetched_at_view_time() {
        let html = render_html(&record());
        for attribute in ["src=", "href="] {
            for quote in ['"', '\''] {
                let fetch = format!("{attribute}{quote}http");
                assert!(!html.contains(&fetch), "external {fetch}");
            }
        }
        assert!(!html.contains("<link"), "no external stylesheet");
        assert!(!html.contains("@import"));
        assert!(!html.contains("url("));
    }

    #[test]
    fn svg_elements_are_balanced() {
        let html = render_html(&record());
        assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
        let opened = html.matches("<table>").count();
        assert_eq!(opened, html.matches("</table>").count());
        assert!(html.trim_end().ends_with("</html>"));
    }

    #[test]
    fn a_run_without_points_still_renders_its_context() {
        let mut record = record();
        record.points.clear();
        let html = render_html(&record);
        assert!(!html.contains("<svg"));
        assert!(html.contains("<dl class=\"facts\">"));
    }
}
