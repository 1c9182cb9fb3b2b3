//! The SVG chart: time to all kernels in hand per mode (left), and init +
//! first lookup as the image grows (right). Both on log scales.

use std::path::Path;

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use crate::error::BenchError;
use crate::report::Report;
use crate::scaling::Format;

const TOTAL_COLOR: RGBColor = RGBColor(0x2b, 0x6c, 0xb0);
const LOOKUP_COLOR: RGBColor = RGBColor(0xf0, 0x8c, 0x2e);
const KILN_COLOR: RGBColor = RGBColor(0x2b, 0x6c, 0xb0);
const POSTCARD_COLOR: RGBColor = RGBColor(0xc0, 0x39, 0x2b);

/// Draws `report` as an SVG at `path`.
pub fn draw(report: &Report, path: &Path) -> Result<(), BenchError> {
    let fail = |err: &dyn std::fmt::Display| BenchError::Chart {
        path: path.to_path_buf(),
        reason: err.to_string(),
    };
    let root = SVGBackend::new(path, (1280, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let (left, right) = root.split_horizontally(760);
    modes(report, &left).map_err(|e| fail(&e))?;
    scaling(report, &right).map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Powers of ten around `values` (positive), for a log axis.
fn log_bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| *v > 0.0 && v.is_finite())
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return (1e-3, 1.0);
    }
    (
        10f64.powf(lo.log10().floor()),
        10f64.powf(hi.log10().ceil() + 0.3),
    )
}

fn modes(report: &Report, area: &Area<'_>) -> DrawResult {
    let modes = &report.modes;
    let n = modes.len().max(1);
    let (lo, hi) = log_bounds(modes.iter().flat_map(|s| [s.total_ms, s.lookup_ms]));
    let title = format!(
        "Time to all {} kernels in hand, fresh process ({} set)",
        modes.first().map_or(0, |s| s.kernels),
        report.workload
    );
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(175)
        .build_cartesian_2d((lo..hi).log_scale(), (0..n).into_segmented())?;
    let names: Vec<&str> = modes.iter().map(|s| s.mode.name()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc("time (log scale)")
        .x_label_formatter(&|x| format_ms(*x))
        .y_labels(n)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                names.get(*i).map_or_else(String::new, |s| (*s).to_owned())
            }
            SegmentValue::Last => String::new(),
        })
        .draw()?;
    // Two bars per mode: total in the upper half of its row, lookups in the
    // lower half (margins in pixels).
    let row = chart.plotting_area().dim_in_pixel().1 / (n as u32 + 1);
    let half = row / 2;
    let gap = row / 8;
    let bar = |i: usize, value: f64, color: RGBColor, top: bool| {
        let mut rect = Rectangle::new(
            [
                (lo, SegmentValue::Exact(i)),
                (value, SegmentValue::Exact(i + 1)),
            ],
            color.filled(),
        );
        if top {
            rect.set_margin(gap, half, 0, 0);
        } else {
            rect.set_margin(half, gap, 0, 0);
        }
        rect
    };
    chart
        .draw_series(
            modes
                .iter()
                .enumerate()
                .map(|(i, s)| bar(i, s.total_ms, TOTAL_COLOR, true)),
        )?
        .label("main → all kernels in hand")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], TOTAL_COLOR.filled()));
    chart
        .draw_series(
            modes
                .iter()
                .enumerate()
                .map(|(i, s)| bar(i, s.lookup_ms, LOOKUP_COLOR, false)),
        )?
        .label("lookups only (owners and keys known)")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], LOOKUP_COLOR.filled()));
    chart.draw_series(modes.iter().enumerate().map(|(i, s)| {
        Text::new(
            format!(" {}", format_ms(s.total_ms)),
            (s.total_ms, SegmentValue::CenterOf(i)),
            ("sans-serif", 12).into_font(),
        )
    }))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn scaling(report: &Report, area: &Area<'_>) -> DrawResult {
    let points = &report.scaling;
    let (xlo, xhi) = log_bounds(points.iter().map(|s| s.entries as f64));
    let (ylo, yhi) = log_bounds(points.iter().map(|s| s.total_ms));
    let mut chart = ChartBuilder::on(area)
        .caption("Init + first lookup as the image grows", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((xlo..xhi).log_scale(), (ylo..yhi).log_scale())?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_labels(5)
        .y_labels(6)
        .x_desc("entries in the image (log)")
        .y_desc("ms (log)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format_ms(*y))
        .draw()?;
    for (format, color) in [
        (Format::Kiln, KILN_COLOR),
        (Format::Postcard, POSTCARD_COLOR),
    ] {
        let series: Vec<(f64, f64)> = points
            .iter()
            .filter(|s| s.format == format)
            .map(|s| (s.entries as f64, s.total_ms))
            .collect();
        if series.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(series.clone(), color.stroke_width(2)))?
            .label(format.name())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
        chart.draw_series(PointSeries::of_element(
            series,
            4,
            color.filled(),
            &|c, s, st| Circle::new(c, s, st),
        ))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// `12.3 ms`, `45 µs`, `3.2 s`.
fn format_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else if ms >= 1.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.0} µs", ms * 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_bounds_are_powers_of_ten_around_the_values() {
        let (lo, hi) = log_bounds([0.02, 3.0, 450.0].into_iter());
        assert!((lo - 0.01).abs() < 1e-12);
        assert!((1000.0..2100.0).contains(&hi));
        assert_eq!(log_bounds(std::iter::empty()), (1e-3, 1.0));
    }

    #[test]
    fn milliseconds_are_shown_in_a_readable_unit() {
        assert_eq!(format_ms(0.045), "45 µs");
        assert_eq!(format_ms(12.34), "12.3 ms");
        assert_eq!(format_ms(3200.0), "3.2 s");
    }
}
