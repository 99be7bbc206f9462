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
}
