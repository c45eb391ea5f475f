//! `growth`: how each series grows over the sweep, per statistic: the claim with its
//! intervals, the model it rests on and that model's parameters, and the sentence reports
//! print. A statistic that could not be judged is a row too, its claim `unjudged` and its
//! text saying why.

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use serde::Serialize;
use vmscale_run::RunRecord;
use vmscale_stats::growth::{Growth, Interval};

use crate::parquet::batch::*;

#[derive(Serialize, Default)]
struct Row<'a> {
    run_id: &'a str,
    series: &'a str,
    statistic: &'a str,
    claim: &'a str,
    ratio: Option<f64>,
    ratio_low: Option<f64>,
    ratio_high: Option<f64>,
    exponent: Option<f64>,
    exponent_low: Option<f64>,
    exponent_high: Option<f64>,
    model: Option<String>,
    t1_ns: Option<f64>,
    sigma: Option<f64>,
    kappa: Option<f64>,
    fit_p: Option<f64>,
    per_unit_ns: Option<f64>,
    per_unit_low_ns: Option<f64>,
    per_unit_high_ns: Option<f64>,
    predicted_n: Option<f64>,
    predicted_ns: Option<f64>,
    predicted_low_ns: Option<f64>,
    predicted_high_ns: Option<f64>,
    knee_n: Option<f64>,
    flat_to_n: Option<f64>,
    margin: Option<f64>,
    confidence: Option<f64>,
    first_n: Option<f64>,
    last_n: Option<f64>,
    text: String,
}

pub(super) fn schema() -> SchemaRef {
    let mut fields = vec![
        text("run_id"),
        text("series"),
        text("statistic"),
        text("claim"),
    ];
    fields.extend(
        [
            "ratio",
            "ratio_low",
            "ratio_high",
            "exponent",
            "exponent_low",
            "exponent_high",
        ]
        .map(float_or_null),
    );
    fields.push(text_or_null("model"));
    fields.extend(
        [
            "t1_ns",
            "sigma",
            "kappa",
            "fit_p",
            "per_unit_ns",
            "per_unit_low_ns",
            "per_unit_high_ns",
            "predicted_n",
            "predicted_ns",
            "predicted_low_ns",
            "predicted_high_ns",
            "knee_n",
            "flat_to_n",
            "margin",
            "confidence",
            "first_n",
            "last_n",
        ]
        .map(float_or_null),
    );
    fields.push(text("text"));
    schema_of(fields)
}

fn ends(i: Option<&Interval>) -> (Option<f64>, Option<f64>, Option<f64>) {
    match i {
        Some(i) => (finite(i.estimate), finite(i.low), finite(i.high)),
        None => (None, None, None),
    }
}

fn judged<'a>(id: &'a str, series: &'a str, g: &'a Growth, sweep: &str) -> Row<'a> {
    let (ratio, ratio_low, ratio_high) = ends(Some(&g.ratio));
    let (exponent, exponent_low, exponent_high) = ends(Some(&g.exponent));
    let (per_unit_ns, per_unit_low_ns, per_unit_high_ns) = ends(g.per_unit.as_ref());
    let (predicted_ns, predicted_low_ns, predicted_high_ns) =
        ends(g.prediction.as_ref().map(|p| &p.value));
    let fit = g.chosen();
    Row {
        run_id: id,
        series,
        statistic: g.statistic.name(),
        claim: g.claim.name(),
        ratio,
        ratio_low,
        ratio_high,
        exponent,
        exponent_low,
        exponent_high,
        model: Some(serde_name(g.model)),
        t1_ns: fit.and_then(|f| finite(f.t1)),
        sigma: fit.and_then(|f| finite(f.sigma)),
        kappa: fit.and_then(|f| finite(f.kappa)),
        fit_p: fit.and_then(|f| finite(f.fit_p)),
        per_unit_ns,
        per_unit_low_ns,
        per_unit_high_ns,
        predicted_n: g.prediction.as_ref().and_then(|p| finite(p.n)),
        predicted_ns,
        predicted_low_ns,
        predicted_high_ns,
        knee_n: g.knee.as_ref().and_then(|k| finite(k.at)),
        flat_to_n: g.flat_to.and_then(finite),
        margin: finite(g.margin),
        confidence: finite(g.confidence),
        first_n: g.points.first().and_then(|p| finite(p.n)),
        last_n: g.points.last().and_then(|p| finite(p.n)),
        text: g.sentence(sweep),
    }
}

pub(super) fn batch(id: &str, record: &RunRecord) -> Result<RecordBatch, ArrowError> {
    let sweep = if record.sweep.is_empty() {
        "n"
    } else {
        record.sweep.as_str()
    };
    let mut rows = Vec::new();
    for s in &record.scaling {
        rows.extend(s.growth.iter().map(|g| judged(id, &s.series, g, sweep)));
        let confidence = s
            .growth
            .first()
            .map_or(vmscale_stats::growth::CONFIDENCE, |g| g.confidence);
        rows.extend(s.unjudged.iter().map(|u| Row {
            run_id: id,
            series: &s.series,
            statistic: u.statistic.name(),
            claim: "unjudged",
            text: u.why.text(u.statistic, sweep, confidence),
            ..Row::default()
        }));
    }
    to_batch(schema(), &rows)
}
