// A small metrics registry exposed in the Prometheus text format (version
// 0.0.4): counters, gauges and histograms with fixed buckets, each a family
// of series told apart by label values.
//
// Recording is lock-light: a series is found once (Family::With takes the
// family's mutex) and the returned pointer is then updated with relaxed
// atomics only, so hot paths keep the pointer. Series live as long as the
// registry. Values that already exist elsewhere (a queue length, a node's
// counters) are better read at scrape time: Registry::AddCollector.
//
// Names follow Prometheus' rules: [a-zA-Z_:][a-zA-Z0-9_:]*, label names
// [a-zA-Z_][a-zA-Z0-9_]*; counters should end in `_total` and carry the unit
// in the name (`_seconds`, `_bytes`). Bad names are program bugs (CHECK).
//
// Thread-safety: everything is thread-safe.
#ifndef COLIBRI_COMMON_METRICS_H_
#define COLIBRI_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace colibri::metrics {

// A value that only goes up.
class Counter {
 public:
  void Increment(double by = 1);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double by);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted in fixed buckets (upper bounds, increasing; +Inf is
// implicit), with their count and sum.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // [bounds.size() + 1], the last is +Inf
    uint64_t count = 0;
    double sum = 0;
  };
  // Buckets read one by one while others observe: each is exact, the set is
  // consistent to within the observations made meanwhile.
  Snapshot snapshot() const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // [bounds_.size() + 1]
  std::atomic<double> sum_{0};
};

// Bucket bounds: `count` bounds from `start`, each `factor` times the last.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

enum class Type { kCounter, kGauge, kHistogram };

// One metric name and its series, keyed by label values (in the order of the
// family's label names).
template <typename T>
class Family {
 public:
  Family(std::vector<std::string> label_names, std::function<std::unique_ptr<T>()> make)
      : label_names_(std::move(label_names)), make_(std::move(make)) {}

  // The series for these label values (as many as label names; CHECKed),
  // created on first use. The pointer stays valid as long as the registry.
  T* With(const std::vector<std::string>& values);
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Calls fn(values, series) for every series, in label-value order.
  void ForEach(const std::function<void(const std::vector<std::string>&, const T&)>& fn) const;

 private:
  const std::vector<std::string> label_names_;
  const std::function<std::unique_ptr<T>()> make_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> series_ ABSL_GUARDED_BY(mu_);
};

// Writes metric families in the text format. Used by collectors, which
// describe values read at scrape time.
class TextWriter {
 public:
  // Starts a family: its # HELP and # TYPE lines. A family must be written
  // whole before the next begins (the format forbids interleaving).
  void Family(const std::string& name, const std::string& help, Type type);
  // A sample of the current counter or gauge family.
  void Sample(const std::string& name, const std::vector<std::string>& label_names,
              const std::vector<std::string>& label_values, double value);
  // Every sample of one histogram series (_bucket, _sum, _count).
  void HistogramSamples(const std::string& name, const std::vector<std::string>& label_names,
                        const std::vector<std::string>& label_values,
                        const Histogram::Snapshot& snapshot);
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

// Named families and scrape-time collectors, rendered together.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Registers a family; the returned pointer lives as long as the registry.
  // A name used twice is a program bug (CHECK).
  metrics::Family<Counter>* AddCounter(const std::string& name, const std::string& help,
                                       std::vector<std::string> label_names = {});
  metrics::Family<Gauge>* AddGauge(const std::string& name, const std::string& help,
                                   std::vector<std::string> label_names = {});
  metrics::Family<Histogram>* AddHistogram(const std::string& name, const std::string& help,
                                           std::vector<double> bounds,
                                           std::vector<std::string> label_names = {});
  // A function that writes more families at every scrape (after the
  // registered ones, in the order added). It must not block for long.
  void AddCollector(std::function<void(TextWriter&)> collector);

  // Every family in the text format, families in registration order.
  std::string Render() const;

 private:
  struct Entry {
    std::string name;
    std::string help;
    Type type;
    std::unique_ptr<metrics::Family<Counter>> counters;
    std::unique_ptr<metrics::Family<Gauge>> gauges;
    std::unique_ptr<metrics::Family<Histogram>> histograms;
  };
  Entry& NewEntry(const std::string& name, const std::string& help, Type type,
                  const std::vector<std::string>& label_names) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(TextWriter&)>> collectors_ ABSL_GUARDED_BY(mu_);
};

// The Content-Type of Render's text.
inline constexpr char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// --- implementation of the template ---

template <typename T>
T* Family<T>::With(const std::vector<std::string>& values) {
  if (values.size() != label_names_.size()) std::abort();  // a program bug
  absl::MutexLock lock(&mu_);
  std::unique_ptr<T>& series = series_[values];
  if (series == nullptr) series = make_();
  return series.get();
}

template <typename T>
void Family<T>::ForEach(
    const std::function<void(const std::vector<std::string>&, const T&)>& fn) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [values, series] : series_) fn(values, *series);
}

}  // namespace colibri::metrics

#endif  // COLIBRI_COMMON_METRICS_H_
