#pragma once
// The noise in repeated timings, and what it lets a comparison tell apart.
// A row's spread is its interquartile range: the middle half of its runs, as
// nvbench prints noise beside every figure. Two rows are told apart only
// where those middle halves do not overlap; a smaller lead is "level", and
// the bench says so instead of calling a winner. Host-only.
#include <cstddef>
#include <optional>
#include <span>
#include <string>

namespace sluice::bench {

struct Spread {
  double median = 0;
  double q25 = 0;  // ms: a quarter of the runs were faster
  double q75 = 0;  // ms: a quarter were slower
  // (q75 - q25) / median; 0 for fewer than 3 runs, where no spread can be told.
  double relative = 0;
};
// Throws std::invalid_argument on an empty sample.
Spread spread_of(std::span<const double> samples);

// Fewer runs than this say nothing about their spread, so nothing is resolved from them.
inline constexpr std::size_t min_samples_to_resolve = 3;

// Row `a` against row `b`.
struct Lead {
  double ratio = 0;  // b's median over a's: above 1, a is ahead
  // The smallest lead (ratio - 1, or 1 - ratio where a is behind) that these
  // spreads could tell: the half of each spread that faces the other median,
  // over the faster median. Unset where a row has too few runs.
  std::optional<double> resolvable;
  bool resolved = false;  // the middle halves of the two rows' runs do not overlap
};
// Throws std::invalid_argument on an empty sample.
Lead lead_of(std::span<const double> a, std::span<const double> b);

// "1.023x, resolved" / "0.991x, level (resolvable 1.5%)".
std::string describe(const Lead& lead);

// Timed rounds for rows of `bytes` per array: `repeats` at 256 MiB and
// above, up to 8x as many below, where a run takes a fraction of a
// millisecond and a few slow ones would otherwise decide the median.
int rounds_for(std::size_t bytes, int repeats);

}  // namespace sluice::bench
