#include "common/metrics.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace colibri::metrics {
namespace {

// Adds `by` to an atomic double (no fetch_add for floating point in C++17).
void AtomicAdd(std::atomic<double>& target, double by) {
  double old = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(old, old + by, std::memory_order_relaxed)) {
  }
}

bool ValidName(const std::string& name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

void CheckNames(const std::string& name, const std::vector<std::string>& label_names) {
  bool ok = ValidName(name, true);
  for (const std::string& label : label_names) {
    ok = ok && ValidName(label, false) && label != "le" && label.rfind("__", 0) != 0;
  }
  if (!ok) {
    std::fprintf(stderr, "metrics: bad metric or label name '%s'\n", name.c_str());
    std::abort();
  }
}

// A sample value as the text format writes it.
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  // The shortest of %.15g and %.17g that reads back as the same double.
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// Escapes a label value (backslash, double quote, newline) or HELP text
// (backslash, newline).
std::string Escape(const std::string& s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Labels(const std::vector<std::string>& names, const std::vector<std::string>& values,
                   const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    absl::StrAppend(&out, out.empty() ? "" : ",", names[i], "=\"", Escape(values[i], true), "\"");
  }
  if (!extra_name.empty()) {
    absl::StrAppend(&out, out.empty() ? "" : ",", extra_name, "=\"", extra_value, "\"");
  }
  return out.empty() ? out : absl::StrCat("{", out, "}");
}

const char* TypeName(Type type) {
  switch (type) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

}  // namespace

void Counter::Increment(double by) {
  if (by > 0) AtomicAdd(value_, by);
}

void Gauge::Add(double by) { AtomicAdd(value_, by); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 1; i < bounds_.size(); ++i) {
    if (!(bounds_[i] > bounds_[i - 1])) {
      std::fprintf(stderr, "metrics: histogram bounds must increase\n");
      std::abort();
    }
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, value);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = total;
  }
  s.count = total;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  double b = start;
  for (int i = 0; i < count; ++i, b *= factor) bounds.push_back(b);
  return bounds;
}

void TextWriter::Family(const std::string& name, const std::string& help, Type type) {
  absl::StrAppend(&out_, "# HELP ", name, " ", Escape(help, false), "\n# TYPE ", name, " ",
                  TypeName(type), "\n");
}

void TextWriter::Sample(const std::string& name, const std::vector<std::string>& label_names,
                        const std::vector<std::string>& label_values, double value) {
  absl::StrAppend(&out_, name, Labels(label_names, label_values), " ", FormatValue(value), "\n");
}

void TextWriter::HistogramSamples(const std::string& name,
                                  const std::vector<std::string>& label_names,
                                  const std::vector<std::string>& label_values,
                                  const Histogram::Snapshot& s) {
  for (size_t i = 0; i < s.cumulative.size(); ++i) {
    const std::string le = i < s.bounds.size() ? FormatValue(s.bounds[i]) : "+Inf";
    absl::StrAppend(&out_, name, "_bucket", Labels(label_names, label_values, "le", le), " ",
                    s.cumulative[i], "\n");
  }
  absl::StrAppend(&out_, name, "_sum", Labels(label_names, label_values), " ", FormatValue(s.sum),
                  "\n");
  absl::StrAppend(&out_, name, "_count", Labels(label_names, label_values), " ", s.count, "\n");
}

Registry::Entry& Registry::NewEntry(const std::string& name, const std::string& help, Type type,
                                    const std::vector<std::string>& label_names) {
  CheckNames(name, label_names);
  for (const auto& e : entries_) {
    if (e->name == name) {
      std::fprintf(stderr, "metrics: '%s' registered twice\n", name.c_str());
      std::abort();
    }
  }
  entries_.push_back(std::make_unique<Entry>());
  Entry& e = *entries_.back();
  e.name = name;
  e.help = help;
  e.type = type;
  return e;
}

Family<Counter>* Registry::AddCounter(const std::string& name, const std::string& help,
                                      std::vector<std::string> label_names) {
  absl::MutexLock lock(&mu_);
  Entry& e = NewEntry(name, help, Type::kCounter, label_names);
  e.counters = std::make_unique<metrics::Family<Counter>>(
      std::move(label_names), [] { return std::make_unique<Counter>(); });
  if (e.counters->label_names().empty()) e.counters->With({});  // shows 0 before any use
  return e.counters.get();
}

Family<Gauge>* Registry::AddGauge(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names) {
  absl::MutexLock lock(&mu_);
  Entry& e = NewEntry(name, help, Type::kGauge, label_names);
  e.gauges = std::make_unique<metrics::Family<Gauge>>(std::move(label_names),
                                                      [] { return std::make_unique<Gauge>(); });
  if (e.gauges->label_names().empty()) e.gauges->With({});
  return e.gauges.get();
}

Family<Histogram>* Registry::AddHistogram(const std::string& name, const std::string& help,
                                          std::vector<double> bounds,
                                          std::vector<std::string> label_names) {
  absl::MutexLock lock(&mu_);
  Entry& e = NewEntry(name, help, Type::kHistogram, label_names);
  e.histograms = std::make_unique<metrics::Family<Histogram>>(
      std::move(label_names), [bounds] { return std::make_unique<Histogram>(bounds); });
  if (e.histograms->label_names().empty()) e.histograms->With({});
  return e.histograms.get();
}

void Registry::AddCollector(std::function<void(TextWriter&)> collector) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

std::string Registry::Render() const {
  TextWriter w;
  absl::MutexLock lock(&mu_);
  for (const auto& e : entries_) {
    w.Family(e->name, e->help, e->type);
    if (e->counters != nullptr) {
      e->counters->ForEach([&](const std::vector<std::string>& values, const Counter& c) {
        w.Sample(e->name, e->counters->label_names(), values, c.value());
      });
    } else if (e->gauges != nullptr) {
      e->gauges->ForEach([&](const std::vector<std::string>& values, const Gauge& g) {
        w.Sample(e->name, e->gauges->label_names(), values, g.value());
      });
    } else {
      e->histograms->ForEach([&](const std::vector<std::string>& values, const Histogram& h) {
        w.HistogramSamples(e->name, e->histograms->label_names(), values, h.snapshot());
      });
    }
  }
  for (const auto& collector : collectors_) collector(w);
  return w.text();
}

}  // namespace colibri::metrics
