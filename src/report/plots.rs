//! The report's charts, as SVG text: curves of a measure over rounds, simulated time or bytes
//! (one line per configuration, the mean over its seeds, in a band from the lowest to the
//! highest seed), and the clients' label counts as stacked bars. Colours are the Okabe–Ito
//! palette for lines and Paul Tol's muted palette for classes, both told apart under the
//! common kinds of colour blindness; past seven configurations the line colours repeat, dashed.

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::runs::{Configuration, Run};
use crate::output::{RoundRecord, TierTraffic};

/// What drawing a chart can fail with (the SVG goes to a string, so only a plotting bug).
pub type DrawError = Box<dyn std::error::Error>;

/// Width and height of every chart, in pixels.
pub const SIZE: (u32, u32) = (960, 540);

/// Width of the legend column at the right of a chart, from its longest label: about 8.5
/// pixels a character at the legend's size, within a sixth and two fifths of the chart.
fn legend_width<'a>(labels: impl Iterator<Item = &'a str>) -> u32 {
    let longest = labels.map(|l| l.chars().count()).max().unwrap_or(0);
    let wanted = 64 + (longest as f64 * 8.5) as u32;
    wanted.clamp(SIZE.0 / 6, SIZE.0 * 2 / 5)
}

/// Okabe & Ito (2008), "Color Universal Design", without yellow (too pale on white).
const LINE_COLOURS: [RGBColor; 7] = [
    RGBColor(0, 114, 178),   // blue
    RGBColor(230, 159, 0),   // orange
    RGBColor(0, 158, 115),   // bluish green
    RGBColor(213, 94, 0),    // vermillion
    RGBColor(204, 121, 167), // reddish purple
    RGBColor(86, 180, 233),  // sky blue
    RGBColor(0, 0, 0),       // black
];

/// Paul Tol's "muted" scheme (nine colours) and its pale grey, for up to ten classes.
const CLASS_COLOURS: [RGBColor; 10] = [
    RGBColor(204, 102, 119), // rose
    RGBColor(51, 34, 136),   // indigo
    RGBColor(221, 204, 119), // sand
    RGBColor(17, 119, 51),   // green
    RGBColor(136, 204, 238), // cyan
    RGBColor(136, 34, 85),   // wine
    RGBColor(68, 170, 153),  // teal
    RGBColor(153, 153, 51),  // olive
    RGBColor(170, 68, 153),  // purple
    RGBColor(221, 221, 221), // pale grey
];

/// Text style of titles, axis names and tick labels.
const FONT: &str = "sans-serif";

/// One configuration's curve: at each x, the mean over its seeds and the lowest and highest.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    /// The configuration's label.
    pub label: String,
    /// The points, in round order.
    pub points: Vec<Point>,
}

/// A point of a curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Mean of the seeds' x.
    pub x: f64,
    /// Mean of the seeds' y.
    pub mean: f64,
    /// The lowest seed's y.
    pub low: f64,
    /// The highest seed's y.
    pub high: f64,
}

/// A part of a chart being drawn.
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// What a curve puts on the x axis: one value per round record of a run.
pub type XOf = fn(&Run) -> Vec<f64>;

/// The round numbers.
pub fn rounds(run: &Run) -> Vec<f64> {
    run.records.iter().map(|r| f64::from(r.round)).collect()
}

/// The simulated seconds at the end of each round.
pub fn sim_time(run: &Run) -> Vec<f64> {
    run.records.iter().map(|r| r.sim_time_s).collect()
}

/// The megabytes sent over the server's links, both ways, up to the end of each round.
pub fn server_megabytes(run: &Run) -> Vec<f64> {
    server_traffic(run, |t| t.bytes_down + t.bytes_up)
}

/// The megabytes the clients' uploads took over the server's links, up to the end of each
/// round.
pub fn uploaded_megabytes(run: &Run) -> Vec<f64> {
    server_traffic(run, |t| t.bytes_up)
}

/// The running total, in megabytes, of `bytes` of the server tier's traffic at each round.
fn server_traffic(run: &Run, bytes: fn(&TierTraffic) -> u64) -> Vec<f64> {
    let mut total = 0.0;
    run.records
        .iter()
        .map(|record| {
            let server = record.traffic.iter().find(|t| t.tier == "server");
            total += server.map_or(0.0, |t| bytes(t) as f64 / 1e6);
            total
        })
        .collect()
}

/// Whether `run` compressed its uploads (a `compression` section).
pub fn compresses(run: &Run) -> bool {
    run.config.get("compression").is_some_and(|c| !c.is_null())
}

/// The epsilon a private run had spent by the end of each round (`epsilon` among the round's
/// metrics), not a number for a record without it.
pub fn epsilon(run: &Run) -> Vec<f64> {
    run.records
        .iter()
        .map(|record| record.strategy.get("epsilon").copied().unwrap_or(f64::NAN))
        .collect()
}

/// Whether `run` is private: its rounds report the epsilon spent.
pub fn is_private(run: &Run) -> bool {
    run.records.iter().any(|r| r.strategy.contains_key("epsilon"))
}

/// A configuration's curve of `y` against `x`: the `n`-th point is the mean over the seeds of
/// each one's `n`-th record with a `y`, for as many points as every seed has. The seeds of a
/// configuration are evaluated in the same rounds, or (with `eval.every_s`, as asynchronous
/// runs are) after the same multiples of the clock, so their `n`-th values line up even where
/// the records do not.
pub fn curve(configuration: &Configuration, x: XOf, y: fn(&RoundRecord) -> Option<f64>) -> Curve {
    let series: Vec<Vec<(f64, f64)>> = configuration
        .runs
        .iter()
        .map(|run| {
            x(run)
                .into_iter()
                .zip(&run.records)
                .filter(|(x, _)| x.is_finite())
                .filter_map(|(x, record)| y(record).map(|y| (x, y)))
                .collect()
        })
        .collect();
    let length = series.iter().map(Vec::len).min().unwrap_or(0);
    let points = (0..length)
        .map(|i| {
            let n = series.len() as f64;
            let ys = || series.iter().map(|s| s[i].1);
            Point {
                x: series.iter().map(|s| s[i].0).sum::<f64>() / n,
                mean: ys().sum::<f64>() / n,
                low: ys().fold(f64::INFINITY, f64::min),
                high: ys().fold(f64::NEG_INFINITY, f64::max),
            }
        })
        .collect();
    Curve {
        label: configuration.label.clone(),
        points,
    }
}

/// The texts and scale of a line chart.
#[derive(Debug, Clone, Copy)]
pub struct Axes<'a> {
    /// The chart's title.
    pub title: &'a str,
    /// The x axis's name, with its unit.
    pub x: &'a str,
    /// The y axis's name, with its unit.
    pub y: &'a str,
    /// What y values are multiplied by before drawing (100 for fractions shown in percent).
    pub y_scale: f64,
    /// A level of y to draw across the chart, dashed in grey, with its legend text: the
    /// target accuracy a report was asked about.
    pub target: Option<(f64, &'a str)>,
}

/// The colour of a target's line.
const TARGET_COLOUR: RGBColor = RGBColor(110, 110, 110);

/// For each curve, the earlier curve whose line it would hide under (the same points), if
/// any: such a curve is drawn dashed over the other and its legend says so.
fn hidden_under(curves: &[Curve]) -> Vec<Option<usize>> {
    let line = |curve: &Curve| -> Vec<(f64, f64)> {
        curve.points.iter().map(|p| (p.x, p.mean)).collect()
    };
    curves
        .iter()
        .enumerate()
        .map(|(i, curve)| {
            let own = line(curve);
            curves[..i]
                .iter()
                .position(|earlier| !own.is_empty() && line(earlier) == own)
        })
        .collect()
}

/// A line chart of `curves`, each in a band over its seeds, with a legend at the right.
pub fn line_chart(axes: Axes<'_>, curves: &[Curve]) -> Result<String, DrawError> {
    let under = hidden_under(curves);
    let mut labels: Vec<String> = curves
        .iter()
        .zip(&under)
        .map(|(curve, under)| match under {
            Some(other) => format!("{} (same line as {})", curve.label, curves[*other].label),
            None => curve.label.clone(),
        })
        .collect();
    labels.extend(axes.target.map(|(_, text)| text.to_string()));
    let dashed = |i: usize| i >= LINE_COLOURS.len() || under.get(i).is_some_and(Option::is_some);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let titled = root.titled(axes.title, (FONT, 24))?;
        let legend_width = legend_width(labels.iter().map(String::as_str));
        let (plot, legend) = titled.split_horizontally(SIZE.0 - legend_width);
        let points = || curves.iter().flat_map(|c| &c.points);
        let scale = axes.y_scale;
        let target = axes.target.map(|(level, _)| level * scale);
        let (x_range, y_range) = ranges(points(), scale, target);
        let mut chart = axes_on(&plot, (x_range.clone(), y_range), (axes.x, axes.y), true)?;
        for (i, curve) in curves.iter().enumerate() {
            let colour = LINE_COLOURS[i % LINE_COLOURS.len()];
            let band: Vec<(f64, f64)> = curve
                .points
                .iter()
                .map(|p| (p.x, p.high * scale))
                .chain(curve.points.iter().rev().map(|p| (p.x, p.low * scale)))
                .collect();
            chart.draw_series(std::iter::once(Polygon::new(
                band,
                colour.mix(0.15).filled(),
            )))?;
        }
        for (i, curve) in curves.iter().enumerate() {
            let line = curve.points.iter().map(|p| (p.x, p.mean * scale));
            let style = line_style(i);
            if dashed(i) {
                chart.draw_series(DashedLineSeries::new(line, 9, 5, style))?;
            } else {
                chart.draw_series(LineSeries::new(line, style))?;
            }
        }
        if let Some(level) = target {
            let across = [(x_range.start, level), (x_range.end, level)];
            chart.draw_series(DashedLineSeries::new(across, 6, 6, target_style()))?;
        }
        draw_legend(&legend, labels.iter().map(String::as_str), |i, area, y| {
            let segment = [(8, y), (44, y)];
            if i == curves.len() {
                area.draw(&DashedPathElement::new(segment, 6, 6, target_style()))?;
            } else if dashed(i) {
                area.draw(&DashedPathElement::new(segment, 9, 5, line_style(i)))?;
            } else {
                area.draw(&PathElement::new(segment, line_style(i)))?;
            }
            Ok(())
        })?;
        root.present()?;
    }
    Ok(svg)
}

/// A chart's drawing context: x and y in data units.
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Sets up a chart on `area` over `ranges` and draws its axes, named by `names` (x, y), with
/// tick labels and a light grid (without vertical lines unless `x_grid`).
fn axes_on<'a, 'b>(
    area: &'a Area<'b>,
    ranges: (std::ops::Range<f64>, std::ops::Range<f64>),
    names: (&str, &str),
    x_grid: bool,
) -> Result<Chart<'a, 'b>, DrawError> {
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(52)
        .y_label_area_size(72)
        .build_cartesian_2d(ranges.0, ranges.1)?;
    let mut mesh = chart.configure_mesh();
    if !x_grid {
        mesh.disable_x_mesh();
    }
    mesh.x_desc(names.0)
        .y_desc(names.1)
        .axis_desc_style((FONT, 17))
        .label_style((FONT, 14))
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .bold_line_style(RGBColor(220, 220, 220))
        .light_line_style(WHITE)
        .draw()?;
    Ok(chart)
}

/// A tick label: whole numbers without decimals, others with as few as tell them apart.
fn tick(value: &f64) -> String {
    if (value - value.round()).abs() < 1e-9 {
        format!("{value:.0}")
    } else {
        let text = format!("{value:.4}");
        text.trim_end_matches('0').to_string()
    }
}

/// The style of a target's line.
fn target_style() -> ShapeStyle {
    TARGET_COLOUR.stroke_width(2)
}

/// The style of the `i`th configuration's line.
fn line_style(i: usize) -> ShapeStyle {
    LINE_COLOURS[i % LINE_COLOURS.len()].stroke_width(3)
}

/// The axis ranges that hold every point's band, y times `y_scale`, and the level `also`
/// (already scaled), with a little room.
fn ranges<'a>(
    points: impl Iterator<Item = &'a Point> + Clone,
    y_scale: f64,
    also: Option<f64>,
) -> (std::ops::Range<f64>, std::ops::Range<f64>) {
    let fold = |values: &mut dyn Iterator<Item = f64>| {
        values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        })
    };
    let (x_low, x_high) = fold(&mut points.clone().map(|p| p.x));
    let (y_low, y_high) = fold(
        &mut points
            .flat_map(|p| [p.low, p.high])
            .map(|y| y * y_scale)
            .chain(also),
    );
    let widen = |low: f64, high: f64| {
        if !low.is_finite() {
            return 0.0..1.0;
        }
        let pad = ((high - low) * 0.04).max(1e-9);
        (low - pad)..(high + pad)
    };
    (widen(x_low, x_high), widen(y_low, y_high))
}

/// Draws a legend in `area`: for each label, a key (drawn by `key(i, area, y)` left of the
/// text) and the label.
fn draw_legend<'a>(
    area: &Area<'_>,
    labels: impl Iterator<Item = &'a str>,
    key: impl Fn(usize, &Area<'_>, i32) -> Result<(), DrawError>,
) -> Result<(), DrawError> {
    for (i, label) in labels.enumerate() {
        let y = 40 + 28 * i32::try_from(i).unwrap_or(i32::MAX / 56);
        key(i, area, y)?;
        area.draw(&Text::new(
            label.to_string(),
            (52, y - 8),
            (FONT, 15).into_font().color(&BLACK),
        ))?;
    }
    Ok(())
}

/// At most this many clients are drawn in a label chart, so bars stay visible.
const MAX_CLIENTS_DRAWN: usize = 100;

/// Stacked bars of each client's samples per class (`counts[client][class]`), the first
/// `MAX_CLIENTS_DRAWN` (100) clients when there are more.
pub fn label_distribution(counts: &[Vec<usize>], title: &str) -> Result<String, DrawError> {
    let shown = &counts[..counts.len().min(MAX_CLIENTS_DRAWN)];
    let classes = shown.first().map_or(0, Vec::len);
    let tallest = shown
        .iter()
        .map(|c| c.iter().sum::<usize>())
        .max()
        .unwrap_or(1);
    let x_desc = if shown.len() < counts.len() {
        format!("client (the first {} of {})", shown.len(), counts.len())
    } else {
        "client".to_string()
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let titled = root.titled(title, (FONT, 22))?;
        let (plot, legend) = titled.split_horizontally(SIZE.0 - 120);
        let ranges = (-0.5..shown.len() as f64 - 0.5, 0.0..tallest as f64 * 1.03);
        let mut chart = axes_on(&plot, ranges, (&x_desc, "training samples"), false)?;
        let bars = shown.iter().enumerate().flat_map(|(client, row)| {
            let x = client as f64;
            row.iter()
                .enumerate()
                .scan(0.0, move |base: &mut f64, (class, &count)| {
                    let bottom = *base;
                    *base += count as f64;
                    let colour = CLASS_COLOURS[class % CLASS_COLOURS.len()];
                    Some(Rectangle::new(
                        [(x - 0.42, bottom), (x + 0.42, *base)],
                        colour.filled(),
                    ))
                })
        });
        chart.draw_series(bars)?;
        let class_names: Vec<String> = (0..classes).map(|c| format!("class {c}")).collect();
        draw_legend(
            &legend,
            class_names.iter().map(String::as_str),
            |class, area, y| {
                let colour = CLASS_COLOURS[class % CLASS_COLOURS.len()];
                area.draw(&Rectangle::new([(8, y - 9), (40, y + 9)], colour.filled()))?;
                Ok(())
            },
        )?;
        root.present()?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(round: u32, accuracy: f64) -> RoundRecord {
        serde_json::from_value(json!({
            "round": round, "clients": [], "dropped": [], "train_loss": null,
            "test_accuracy": accuracy, "test_loss": 1.0, "traffic": [], "sim_round_s": 1.0,
            "sim_time_s": f64::from(round), "wall_ms": 1.0
        }))
        .unwrap()
    }

    #[test]
    fn a_curve_is_the_mean_of_the_seeds_within_their_lowest_and_highest() {
        let run = |accuracies: [f64; 2]| Run {
            dir: Default::default(),
            config: json!({}),
            records: vec![record(1, accuracies[0]), record(2, accuracies[1])],
        };
        let configuration = Configuration {
            label: "a".into(),
            settings: Default::default(),
            runs: vec![run([0.2, 0.6]), run([0.4, 0.5]), run([0.3, 0.7])],
        };
        let curve = curve(&configuration, rounds, |r| r.test_accuracy);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        let [first, second] = curve.points[..] else {
            panic!("two points")
        };
        assert!(close(first.x, 1.0) && close(first.mean, 0.3));
        assert!(close(first.low, 0.2) && close(first.high, 0.4));
        assert!(close(second.x, 2.0) && close(second.mean, 0.6));
        assert!(close(second.low, 0.5) && close(second.high, 0.7));
    }

    #[test]
    fn a_private_runs_accuracy_is_drawn_against_the_epsilon_it_spent() {
        let mut spent = record(1, 0.5);
        spent.strategy.insert("epsilon".into(), 2.5);
        let run = Run {
            dir: Default::default(),
            config: json!({}),
            // Round 2 reports no epsilon: it has no point on this chart.
            records: vec![spent, record(2, 0.7)],
        };
        assert!(is_private(&run));
        let configuration = Configuration {
            label: "private".into(),
            settings: Default::default(),
            runs: vec![run],
        };
        let curve = curve(&configuration, epsilon, |r| r.test_accuracy);
        let [point] = curve.points[..] else {
            panic!("one point: {:?}", curve.points)
        };
        assert_eq!((point.x, point.mean), (2.5, 0.5));
        let plain = Run {
            dir: Default::default(),
            config: json!({}),
            records: vec![record(1, 0.5)],
        };
        assert!(!is_private(&plain));
    }

    #[test]
    fn uploads_are_counted_apart_for_runs_that_compress() {
        let mut first = record(1, 0.5);
        let traffic = json!([{"tier": "server", "messages_down": 2, "bytes_down": 4_000_000,
                              "messages_up": 2, "bytes_up": 1_000_000}]);
        first.traffic = serde_json::from_value(traffic).unwrap();
        let mut second = first.clone();
        second.round = 2;
        let run = Run {
            dir: Default::default(),
            config: json!({"compression": {"uplink": {"name": "topk"}}}),
            records: vec![first, second],
        };
        assert!(compresses(&run));
        assert_eq!(uploaded_megabytes(&run), [1.0, 2.0]);
        assert_eq!(server_megabytes(&run), [5.0, 10.0]);
        let plain = Run {
            config: json!({"compression": null}),
            ..run
        };
        assert!(!compresses(&plain));
    }

    #[test]
    fn a_line_under_an_equal_one_is_dashed_and_named_and_a_target_is_drawn() {
        let curve = |label: &str, ys: [f64; 2]| Curve {
            label: label.into(),
            points: ys
                .iter()
                .zip([1.0, 2.0])
                .map(|(&y, x)| Point {
                    x,
                    mean: y,
                    low: y,
                    high: y,
                })
                .collect(),
        };
        let curves = [
            curve("flat", [0.5, 0.9]),
            curve("relay", [0.5, 0.9]),
            curve("other", [0.4, 0.8]),
        ];
        assert_eq!(hidden_under(&curves), [None, Some(0), None]);
        let axes = Axes {
            title: "t",
            x: "round",
            y: "test accuracy (%)",
            y_scale: 100.0,
            target: Some((0.95, "target 95%")),
        };
        let svg = line_chart(axes, &curves).unwrap();
        assert!(svg.contains("relay (same line as flat)"), "{svg}");
        assert!(svg.contains("target 95%"));
        // A dashed line is drawn as many short segments: the second line's colour (orange)
        // and the target's grey are, the first line's (blue) is one stroke and its key.
        let strokes = |colour: &str| svg.matches(&format!("stroke=\"{colour}\"")).count();
        assert_eq!(strokes("#0072B2"), 2);
        assert!(strokes("#E69F00") > 10 && strokes("#6E6E6E") > 10);
    }

    #[test]
    fn seeds_evaluated_at_other_records_pair_their_nth_evaluations() {
        // Asynchronous runs evaluated on the clock: one seed's first evaluation is at its
        // second step, the other's at its third.
        let unevaluated = |round: u32| {
            let mut r = record(round, 0.0);
            r.test_accuracy = None;
            r
        };
        let run = |records: Vec<RoundRecord>| Run {
            dir: Default::default(),
            config: json!({}),
            records,
        };
        let configuration = Configuration {
            label: "a".into(),
            settings: Default::default(),
            runs: vec![
                run(vec![unevaluated(1), record(2, 0.4), record(3, 0.8)]),
                run(vec![unevaluated(1), unevaluated(2), record(3, 0.6)]),
            ],
        };
        let curve = curve(&configuration, sim_time, |r| r.test_accuracy);
        let [point] = curve.points[..] else {
            panic!("one point: {:?}", curve.points)
        };
        assert!((point.x - 2.5).abs() < 1e-12 && (point.mean - 0.5).abs() < 1e-12);
    }
}
