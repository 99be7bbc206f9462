//! Sparklines as SVG, drawn server-side with plotters from the history's numbers only (no text
//! from the keyspace reaches a chart).

use plotters::prelude::*;

/// A line of `values` (oldest first) in a `width` x `height` SVG, scaled to its own maximum;
/// a flat line at the bottom for no data.
pub fn sparkline(values: &[f64], width: u32, height: u32) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        let top = values.iter().copied().fold(0.0_f64, f64::max).max(1.0);
        let n = values.len().max(2);
        let drawn = ChartBuilder::on(&root)
            .margin(2)
            .build_cartesian_2d(0..(n - 1), 0.0..top)
            .and_then(|mut chart| {
                let points: Vec<(usize, f64)> = if values.is_empty() {
                    vec![(0, 0.0), (1, 0.0)]
                } else {
                    values.iter().copied().enumerate().collect()
                };
                chart
                    .draw_series(LineSeries::new(
                        points,
                        RGBColor(37, 99, 235).stroke_width(2),
                    ))
                    .map(|_| ())
            });
        // Drawing into a string cannot fail for want of a device; an empty chart is the worst case.
        if drawn.is_err() {
            return String::new();
        }
        if root.present().is_err() {
            return String::new();
        }
    }
    svg
}

/// Seconds between two ticks of a timeline's time axis.
pub const TICK_S: u32 = 15;

/// Lines of `(age, value)` points, each age the seconds before now, over the last `window_s`
/// seconds in a `width` x `height` SVG scaled to their maximum, on a time axis: a baseline with
/// a tick every [`TICK_S`] seconds up to now at the right (the page labels it, as plotters
/// draws no text here).
pub fn timeline(
    lines: &[(Vec<(f64, f64)>, RGBColor)],
    window_s: u32,
    width: u32,
    height: u32,
) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        let top = lines
            .iter()
            .flat_map(|(points, _)| points.iter().map(|p| p.1))
            .fold(0.0_f64, f64::max)
            .max(1.0)
            * 1.05;
        let left = -f64::from(window_s);
        let drawn = ChartBuilder::on(&root)
            .margin(2)
            .build_cartesian_2d(left..0.0, 0.0..top)
            .and_then(|mut chart| {
                let axis = RGBColor(156, 163, 175);
                chart.draw_series(LineSeries::new([(left, 0.0), (0.0, 0.0)], axis))?;
                for tick in (0..=window_s).step_by(TICK_S as usize) {
                    let x = -f64::from(tick);
                    chart.draw_series(LineSeries::new([(x, 0.0), (x, top * 0.12)], axis))?;
                }
                for (points, color) in lines {
                    let points = points.iter().filter(|p| p.0 <= f64::from(window_s));
                    chart.draw_series(LineSeries::new(
                        points.map(|&(age, v)| (-age, v)),
                        color.stroke_width(2),
                    ))?;
                }
                Ok(())
            });
        if drawn.is_err() || root.present().is_err() {
            return String::new();
        }
    }
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparkline_is_an_svg_with_a_line() {
        let svg = sparkline(&[0.0, 3.0, 1.0, 5.0], 120, 24);
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.contains("<polyline"), "{svg}");
        assert!(sparkline(&[], 120, 24).contains("<polyline"));
    }

    #[test]
    fn a_timeline_has_its_axis_ticks_and_a_line_for_each_series() {
        let blue = RGBColor(37, 99, 235);
        let svg = timeline(
            &[(vec![(60.0, 1.0), (30.0, 4.0), (0.0, 2.0)], blue)],
            60,
            240,
            48,
        );
        assert!(svg.starts_with("<svg"), "{svg}");
        // The baseline, five ticks (60, 45, 30, 15 and 0 s ago) and the series.
        assert_eq!(svg.matches("<polyline").count(), 1 + 5 + 1, "{svg}");
        assert!(timeline(&[], 60, 240, 48).contains("<polyline"));
    }
}
