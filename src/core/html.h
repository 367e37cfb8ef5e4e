// Text for the HTML / SVG reports (compare's report.html, plan --chart): one escaping rule for both.
#pragma once
#include <string>

namespace lowbit {

// s with & < > " ' escaped, safe inside element text and single- or double-quoted attributes.
inline std::string html_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

}  // namespace lowbit
