#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tokengate::metrics {

enum class Kind { counter, gauge, histogram };

/// Label values longer than this are cut (at a UTF-8 boundary): a client's 200 KB model name
/// must not become a 200 KB label.
inline constexpr std::size_t k_max_label_bytes = 128;

/// One metric name with its label names and series. Label cardinality is capped: once a
/// family holds `max_series` series, new label sets are counted in one series whose label
/// values are all "_other", so a flood of tenants or keys cannot exhaust memory.
class Family {
    struct Series;

public:
    Family(std::string name, std::string help, Kind kind, std::vector<std::string> label_names,
           std::vector<double> buckets, std::size_t max_series);

    /// One series, found once: an update through it looks nothing up, so a request that makes
    /// several for the same label set finds it once (SPEC §19). Series are never freed, so a Ref
    /// stays valid as long as its family; a cleared series shows again on its next update.
    class Ref {
    public:
        Ref() = default;
        explicit operator bool() const { return series_ != nullptr; }
        void add(double value = 1) const;
        void set(double value) const;
        void observe(double value) const;

    private:
        friend class Family;
        Ref(const Family* family, Series* series) : family_(family), series_(series) {}
        const Family* family_ = nullptr;
        Series* series_ = nullptr;
    };
    /// The series of `labels`, created (or the capped "_other" one) if new.
    Ref at(std::initializer_list<std::string_view> labels) { return {this, &series(labels)}; }

    void add(std::initializer_list<std::string_view> labels, double value = 1);
    void set(std::initializer_list<std::string_view> labels, double value);
    void observe(std::initializer_list<std::string_view> labels, double value);
    /// Drops every series (for gauges recomputed at scrape time).
    void clear();
    /// The current value of one series (0 if absent): for tests and admin views.
    double value(std::initializer_list<std::string_view> labels) const;
    /// At most `max` distinct values of label `child` per value of label `parent` (models per
    /// tenant): further ones are counted as "_other", so one tenant cannot take every series.
    /// Set before the family is used.
    void limit_values_per(std::size_t parent, std::size_t child, std::size_t max);

    void render(std::string& out) const;

private:
    /// Updated without a lock (relaxed atomics): a worker finds its series in a per-thread
    /// cache, so a request's dozen updates take no mutex. Series are never freed (their count
    /// is capped), which keeps the cached pointers valid; clear() hides them instead.
    struct Series {
        std::vector<std::string> labels;
        std::atomic<double> value{0};
        std::unique_ptr<std::atomic<std::uint64_t>[]> bucket_counts;  // per bucket, not cumulative
        std::atomic<double> sum{0};
        std::atomic<std::uint64_t> count{0};
        std::atomic<bool> visible{true};
    };
    Series& series(std::initializer_list<std::string_view> labels);
    static void show(Series& s);
    Series& find_or_create(std::string_view key, std::initializer_list<std::string_view> labels);

    std::uint64_t id_;  // names this family in the per-thread caches; never reused
    std::string name_;
    std::string help_;
    Kind kind_;
    std::vector<std::string> label_names_;
    std::vector<double> buckets_;
    std::size_t max_series_;
    struct ValueLimit {
        std::size_t parent = 0, child = 0, max = 0;                      // max 0: none
        std::unordered_map<std::string, std::vector<std::string>> seen;  // parent value → child values
    } value_limit_;
    /// Lets a series be found by a key in a reused buffer, without building a std::string.
    struct KeyHash {
        using is_transparent = void;
        std::size_t operator()(std::string_view key) const { return std::hash<std::string_view>{}(key); }
    };
    mutable std::mutex mutex_;  // guards index_ and storage_'s growth, not the values
    std::deque<Series> storage_;
    std::unordered_map<std::string, Series*, KeyHash, std::equal_to<>> index_;
};

/// Holds the families and renders them in the Prometheus text exposition format (0.0.4).
class Registry {
public:
    explicit Registry(std::size_t max_series_per_family = 10000) : max_series_(max_series_per_family) {}
    Family& counter(std::string name, std::string help, std::vector<std::string> labels);
    Family& gauge(std::string name, std::string help, std::vector<std::string> labels);
    Family& histogram(std::string name, std::string help, std::vector<std::string> labels, std::vector<double> buckets);
    std::string render() const;

private:
    std::size_t max_series_;
    mutable std::mutex mutex_;
    std::deque<Family> families_;  // stable addresses
};

/// `value` cut to k_max_label_bytes, without splitting a UTF-8 sequence.
std::string_view bounded_label(std::string_view value);

/// Escapes a label value: backslash, double quote and newline.
std::string escape_label(std::string_view value);

}  // namespace tokengate::metrics
