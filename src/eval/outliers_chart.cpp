// `lowbit eval outliers --chart FILE.svg|.html`: max|x|/RMS per layer and linear input site as bars, before
// and after the rotation side by side, on a log axis (outlier ratios span 3 to several hundred).
// Self-contained SVG (no scripts, no external fonts or styles), in the style of plan's and compare's charts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/html.h"
#include "eval/outliers.h"

namespace lowbit::eval {
namespace {

constexpr double kH = 460, kL = 70, kT = 60, kB = 380;  // canvas height, plot area (x extent by bar count)
constexpr const char* kBefore = "#4e79a7";
constexpr const char* kAfter = "#f28e2b";

std::string num(double v, const char* fmt = "%.1f") {
  char b[32];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

const SiteOutliers* find(const OutlierReport* r, int layer, ActSite site) {
  if (!r) return nullptr;
  for (const auto& s : r->sites)
    if (s.layer == layer && s.site == site) return &s;
  return nullptr;
}

}  // namespace

std::string outliers_chart_svg(const OutlierReport& before, const OutlierReport* after,
                               const std::string& title, const std::string& after_label) {
  const size_t groups = before.sites.size();
  const int bars = after ? 2 : 1;
  const double bw = 9, gap = 6, gw = bars * bw + gap;
  const double R = kL + std::max<double>(1, static_cast<double>(groups)) * gw + 20;
  const double W = std::max(R + 20, 640.0);
  double hi = 10;
  for (const auto& s : before.sites) hi = std::max(hi, s.ratio);
  if (after)
    for (const auto& s : after->sites) hi = std::max(hi, s.ratio);
  const double lo = 1, top = std::pow(10.0, std::ceil(std::log10(hi)));
  auto Y = [&](double v) {
    const double t = (std::log10(std::max(v, lo)) - std::log10(lo)) / (std::log10(top) - std::log10(lo));
    return kB - t * (kB - kT);
  };
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << kH << "' viewBox='0 0 " << W
    << " " << kH << "' font-family='sans-serif' font-size='12'>";
  o << "<text x='10' y='20' font-size='14' font-weight='bold'>" << html_escape(title) << "</text>";
  o << "<text x='10' y='38'>max |x| / RMS per layer and linear input (log scale; i.i.d. Gaussian data: about "
       "4.4 at 10^5 values)</text>";
  for (double g = lo; g <= top * 1.0001; g *= 10) {
    o << "<line x1='" << kL << "' x2='" << R << "' y1='" << Y(g) << "' y2='" << Y(g)
      << "' stroke='#ddd'/><text x='" << kL - 6 << "' y='" << Y(g) + 4 << "' text-anchor='end'>"
      << num(g, "%g") << "</text>";
  }
  o << "<line x1='" << kL << "' x2='" << kL << "' y1='" << kT << "' y2='" << kB << "' stroke='#333'/>";
  o << "<line x1='" << kL << "' x2='" << R << "' y1='" << kB << "' y2='" << kB << "' stroke='#333'/>";
  int prev_layer = -1;
  for (size_t i = 0; i < groups; ++i) {
    const SiteOutliers& b = before.sites[i];
    const SiteOutliers* a = find(after, b.layer, b.site);
    const double x0 = kL + 10 + static_cast<double>(i) * gw;
    const std::string name = "layer " + std::to_string(b.layer) + " " + act_site_name(b.site);
    auto bar = [&](double x, double v, const char* color, const std::string& label) {
      o << "<rect x='" << x << "' y='" << Y(v) << "' width='" << bw << "' height='" << kB - Y(v) << "' fill='"
        << color << "'><title>" << html_escape(name + " " + label) << ": max/RMS " << num(v)
        << "</title></rect>";
    };
    bar(x0, b.ratio, kBefore, "before");
    if (a) bar(x0 + bw, a->ratio, kAfter, after_label);
    if (b.layer != prev_layer) {
      o << "<line x1='" << x0 - gap / 2 << "' x2='" << x0 - gap / 2 << "' y1='" << kB << "' y2='" << kB + 22
        << "' stroke='#999'/><text x='" << x0 << "' y='" << kB + 18 << "'>L" << b.layer << "</text>";
      prev_layer = b.layer;
    }
    o << "<text transform='translate(" << x0 + bw << "," << kB + 28 << ") rotate(60)' font-size='9'>"
      << act_site_name(b.site) << "</text>";
  }
  const double ly = kH - 22;
  o << "<rect x='" << kL << "' y='" << ly << "' width='12' height='12' fill='" << kBefore << "'/><text x='"
    << kL + 16 << "' y='" << ly + 11 << "'>before</text>";
  if (after)
    o << "<rect x='" << kL + 90 << "' y='" << ly << "' width='12' height='12' fill='" << kAfter
      << "'/><text x='" << kL + 106 << "' y='" << ly + 11 << "'>" << html_escape(after_label) << "</text>";
  o << "</svg>";
  return o.str();
}

std::string outliers_chart_html(const OutlierReport& before, const OutlierReport* after,
                                const std::string& title, const std::string& after_label) {
  std::ostringstream o;
  o << "<!DOCTYPE html><html><head><meta charset='utf-8'><title>" << html_escape(title) << "</title><style>"
    << "body{font-family:sans-serif;margin:24px}table{border-collapse:collapse;font-size:12px}"
    << "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f4f4f4}"
    << "svg{display:block;margin:12px 0;border:1px solid #eee}</style></head><body>";
  o << "<h1>" << html_escape(title) << "</h1>";
  o << outliers_chart_svg(before, after, title, after_label);
  o << "<table><tr><th>layer</th><th>site</th><th>max/RMS before</th><th>kurtosis before</th>"
    << "<th>top channel before</th>";
  if (after)
    o << "<th>max/RMS " << html_escape(after_label) << "</th><th>kurtosis " << html_escape(after_label)
      << "</th><th>top channel " << html_escape(after_label) << "</th>";
  o << "</tr>";
  auto cells = [&](const SiteOutliers& s) {
    o << "<td>" << num(s.ratio) << "</td><td>" << num(s.kurtosis) << "</td><td>";
    if (!s.top.empty()) o << s.top[0].first << " (" << num(s.top[0].second, "%.3g") << ")";
    o << "</td>";
  };
  for (const auto& b : before.sites) {
    o << "<tr><td>" << b.layer << "</td><td>" << act_site_name(b.site) << "</td>";
    cells(b);
    if (const SiteOutliers* a = find(after, b.layer, b.site)) cells(*a);
    o << "</tr>";
  }
  o << "</table><p>Kurtosis is Pearson's (normal = 3), over every element of the site. Mean max/RMS "
    << num(before.mean_ratio);
  if (after) o << " before, " << num(after->mean_ratio) << " " << html_escape(after_label);
  o << ".</p></body></html>";
  return o.str();
}

}  // namespace lowbit::eval
