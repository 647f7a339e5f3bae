#include "server/bench/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace pagoda::bench {

double nice_step(double span, int target) {
  if (!(span > 0) || !std::isfinite(span)) return 1;
  target = std::max(1, target);
  const double raw = span / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (;;) {
    for (double m : {1.0, 2.0, 5.0}) {
      // A small tolerance so 0.3 / 3 lands on 0.1, not 0.2.
      if (m * mag >= raw * (1 - 1e-9)) return m * mag;
    }
    mag *= 10;
  }
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo <= 0) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
    if (lo < 0 && hi - pad >= 0 && lo + pad >= 0) lo = 0;  // keep a non-negative axis non-negative
  }
  const double step = nice_step(hi - lo, target);
  const double first = std::floor(lo / step + 1e-9) * step;
  std::vector<double> t;
  for (int i = 0; i < 1000; ++i) {
    double v = first + i * step;
    if (std::abs(v) < step * 1e-9) v = 0;  // no "-0" or 1e-17
    t.push_back(v);
    if (v >= hi - step * 1e-9) break;
  }
  return t;
}

std::string tick_label(double v, double step) {
  char buf[48];
  int decimals = 0;
  if (step > 0 && step < 1) decimals = std::min(9, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s == "-0") s = "0";
  if (decimals == 0 && std::abs(v) >= 10000) {  // 12,000 reads better than 12000
    std::string digits = s, out;
    const bool neg = digits[0] == '-';
    if (neg) digits.erase(0, 1);
    for (size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
      out += digits[i];
    }
    s = (neg ? "-" : "") + out;
  }
  return s;
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

SvgPlot::SvgPlot(std::string title, std::string x_label, std::string y_label, int width, int height)
    : title_(std::move(title)), x_label_(std::move(x_label)), y_label_(std::move(y_label)),
      width_(width), height_(height) {}

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

std::string SvgPlot::render() const {
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  for (const auto& s : series_)
    for (const auto& [x, y] : s.xy) {
      const double x2 = s.kind == PlotSeries::Kind::Bars ? x + s.bar_width : x;
      xlo = std::min(xlo, x);
      xhi = std::max(xhi, x2);
      ylo = std::min(ylo, y);
      yhi = std::max(yhi, y);
    }
  std::ostringstream o;
  o << "<figure><figcaption>" << html_escape(title_) << "</figcaption>";
  if (!(xlo <= xhi)) {
    o << "<p class='nodata'>no data</p></figure>";
    return o.str();
  }
  if (x_from_zero_) xlo = std::min(0.0, xlo);
  if (y_from_zero_) ylo = std::min(0.0, ylo);
  if (has_y_fixed_) ylo = y_fixed_.first, yhi = y_fixed_.second;
  const std::vector<double> xt = nice_ticks(xlo, xhi, std::max(3, width_ / 90));
  const std::vector<double> yt = nice_ticks(ylo, yhi, std::max(3, height_ / 55));
  const double x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;

  // Legend entries flow left to right above the plot, wrapping into rows (text ~6.5 px a char).
  struct Entry {
    const PlotSeries* series;
    int row;
  };
  std::vector<std::pair<Entry, double>> legend;
  {
    double x = 70;
    int row = 0;
    for (const auto& s : series_) {
      if (s.name.empty()) continue;
      const double w = 28 + 6.5 * s.name.size();
      if (x + w > width_ - 10 && x > 70) x = 70, ++row;
      legend.push_back({{&s, row}, x});
      x += w;
    }
  }
  const int rows = legend.empty() ? 0 : legend.back().first.row + 1;
  const int L = 70, R = 18, T = 12 + 16 * rows, B = 50;
  const double pw = width_ - L - R, ph = height_ - T - B;
  auto px = [&](double x) { return L + pw * (x - x0) / (x1 - x0); };
  auto py = [&](double y) { return T + ph - ph * (y - y0) / (y1 - y0); };

  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width_ << "' height='" << height_
    << "' viewBox='0 0 " << width_ << ' ' << height_ << "' font-family='sans-serif' font-size='12' role='img'>";
  o << "<rect x='" << L << "' y='" << T << "' width='" << num(pw) << "' height='" << num(ph)
    << "' fill='#fff' stroke='#888'/>";
  // Grid, ticks and tick labels.
  for (double v : xt) {
    const double x = px(v);
    o << "<line class='grid' x1='" << num(x) << "' y1='" << T << "' x2='" << num(x) << "' y2='" << num(T + ph)
      << "' stroke='#e3e3e3'/><line x1='" << num(x) << "' y1='" << num(T + ph) << "' x2='" << num(x) << "' y2='"
      << num(T + ph + 5) << "' stroke='#555'/><text class='tick' x='" << num(x) << "' y='" << num(T + ph + 18)
      << "' text-anchor='middle' fill='#333'>" << tick_label(v, xstep) << "</text>";
  }
  for (double v : yt) {
    const double y = py(v);
    o << "<line class='grid' x1='" << L << "' y1='" << num(y) << "' x2='" << num(L + pw) << "' y2='" << num(y)
      << "' stroke='#e3e3e3'/><line x1='" << L - 5 << "' y1='" << num(y) << "' x2='" << L << "' y2='" << num(y)
      << "' stroke='#555'/><text class='tick' x='" << L - 8 << "' y='" << num(y + 4)
      << "' text-anchor='end' fill='#333'>" << tick_label(v, ystep) << "</text>";
  }
  o << "<text class='xlabel' x='" << num(L + pw / 2) << "' y='" << height_ - 8 << "' text-anchor='middle'>"
    << html_escape(x_label_) << "</text><text class='ylabel' transform='translate(16," << num(T + ph / 2)
    << ") rotate(-90)' text-anchor='middle'>" << html_escape(y_label_) << "</text>";

  // Data, clipped to the plot area.
  o << "<g>";
  for (const auto& s : series_) {
    if (s.kind == PlotSeries::Kind::Bars) {
      const bool overlay = series_.size() > 1;
      for (const auto& [x, h] : s.xy) {
        if (h <= 0) continue;
        o << "<rect x='" << num(px(x)) << "' y='" << num(py(h)) << "' width='"
          << num(std::max(0.5, px(x + s.bar_width) - px(x) - 0.5)) << "' height='" << num(py(y0) - py(h))
          << "' fill='" << s.color << "' fill-opacity='" << (overlay ? "0.5" : "0.85") << "'><title>"
          << tick_label(h, 1) << "</title></rect>";
      }
      continue;
    }
    o << "<polyline fill='none' stroke='" << s.color << "' stroke-width='2'"
      << (s.dashed ? " stroke-dasharray='6 4'" : "") << " points='";
    for (const auto& [x, y] : s.xy) o << num(px(x)) << ',' << num(py(y)) << ' ';
    o << "'/>";
    for (size_t i = 0; i < s.xy.size(); ++i) {
      const double x = px(s.xy[i].first), y = py(s.xy[i].second);
      if (s.markers) o << "<circle cx='" << num(x) << "' cy='" << num(y) << "' r='4' fill='" << s.color << "'/>";
      if (i < s.point_labels.size() && !s.point_labels[i].empty()) {
        const bool right_half = x > L + pw * 0.7;  // keep labels inside the plot
        o << "<text x='" << num(x + (right_half ? -7 : 7)) << "' y='" << num(std::max(T + 12.0, y - 7))
          << "' font-size='11' fill='" << s.color << "' text-anchor='" << (right_half ? "end" : "start") << "'>"
          << html_escape(s.point_labels[i]) << "</text>";
      }
    }
  }
  o << "</g>";
  // Legend, in rows above the plot: a swatch drawn like the series (bar, line, dashed line).
  for (const auto& [e, row_x] : legend) {
    const PlotSeries& s = *e.series;
    const double y = 14 + 16 * e.row;
    if (s.kind == PlotSeries::Kind::Bars)
      o << "<rect x='" << num(row_x) << "' y='" << num(y - 9) << "' width='16' height='10' fill='" << s.color
        << "' fill-opacity='0.6'/>";
    else
      o << "<line x1='" << num(row_x) << "' y1='" << num(y - 4) << "' x2='" << num(row_x + 16) << "' y2='"
        << num(y - 4) << "' stroke='" << s.color << "' stroke-width='2'" << (s.dashed ? " stroke-dasharray='4 3'" : "")
        << "/>";
    o << "<text x='" << num(row_x + 20) << "' y='" << num(y) << "' font-size='11' fill='#222'>" << html_escape(s.name)
      << "</text>";
  }
  o << "</svg></figure>";
  return o.str();
}

}  // namespace pagoda::bench
