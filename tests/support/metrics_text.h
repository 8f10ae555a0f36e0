// Reading a sample out of Prometheus text (serve's GET /metrics, or
// ServeMetrics::Render), for tests.
#ifndef COLIBRI_TESTS_SUPPORT_METRICS_TEXT_H_
#define COLIBRI_TESTS_SUPPORT_METRICS_TEXT_H_

#include <string>

namespace colibri::testing {

// The value of the sample line of `series` (name and labels, e.g.
// `colibri_draft_tokens_total{outcome="accepted"}`) in `text`; -1 when absent.
inline double MetricSample(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_METRICS_TEXT_H_
