// Charts as inline SVG with real axes: "nice" tick steps (1, 2 or 5 x 10^k), tick labels, axis
// titles with units, a light grid and a legend. Lines, markers, labelled points and histogram
// bars; every series of a chart shares its axes, so two servers overlay on the same scale.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace pagoda::bench {

// The smallest step of the form {1, 2, 5} x 10^k that divides `span` into at most `target` parts.
double nice_step(double span, int target);

// Ticks at multiples of a nice step covering [lo, hi]: the first <= lo, the last >= hi. A zero or
// negative span is widened around lo so there is always an axis to draw.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

// A tick's text: as many decimals as the step needs, no trailing noise ("0.3", not
// "0.30000000000000004"); thousands and up without decimals.
std::string tick_label(double v, double step);

struct PlotSeries {
  enum class Kind { Line, Bars };
  Kind kind = Kind::Line;
  std::string name;                             // legend entry; empty: none
  std::string color;
  std::vector<std::pair<double, double>> xy;    // Line: points; Bars: (left edge, height)
  double bar_width = 0;                         // Bars: data units
  bool markers = false;                         // Line: a dot at each point
  bool dashed = false;
  std::vector<std::string> point_labels;        // Line: text beside each point (may be empty)
};

class SvgPlot {
 public:
  SvgPlot(std::string title, std::string x_label, std::string y_label, int width = 560, int height = 320);

  void add(PlotSeries s) { series_.push_back(std::move(s)); }
  // Axes start at zero unless told otherwise (latency CDFs start where the data does).
  void x_from_zero(bool v) { x_from_zero_ = v; }
  void y_from_zero(bool v) { y_from_zero_ = v; }
  void y_range(double lo, double hi) { y_fixed_ = {lo, hi}; has_y_fixed_ = true; }

  // A <figure> holding the SVG; "no data" when every series is empty.
  std::string render() const;

 private:
  std::string title_, x_label_, y_label_;
  int width_, height_;
  bool x_from_zero_ = true, y_from_zero_ = true, has_y_fixed_ = false;
  std::pair<double, double> y_fixed_;
  std::vector<PlotSeries> series_;
};

// Escapes text for HTML and SVG.
std::string html_escape(const std::string& s);

// Colours of the first and second target, and a third for a second series of one target.
inline const char* kSeriesColors[] = {"#1f6fd1", "#d9480f", "#2b8a3e", "#7048e8"};

}  // namespace pagoda::bench
