#pragma once
// The copy engines at their best on one device: large transfers between
// pinned host memory and the device, one direction alone and both at once
// (equal bytes, and twice the bytes one way or the other), with one and with
// two streams per direction (the fastest counts), fastest of the repeats.
// This is the link part of the absolute bound.
#include <cstddef>

#include "sluice/bound/bound.hpp"

namespace sluice {

struct LinkRates {
  double h2d_gbps = 0;
  double d2h_gbps = 0;
  double both_gbps = 0;  // bytes of both directions counted
  LinkPoint h2d_heavy;   // both at once, 2:1 host -> device
  LinkPoint d2h_heavy;   // both at once, 1:2
};

// Measures now (equal mixes move `bytes` each way). Allocates 2 x `bytes` pinned and on the device while it runs.
LinkRates measure_link_rates(int device, std::size_t bytes = std::size_t{64} << 20, int repeats = 5);

// Measured once per device and process, then reused (about 0.1 s the first time).
LinkRates link_rates(int device);
// Measures again and keeps, figure by figure, the best this process has seen:
// a link measured in a bad moment (another process's traffic, a power state
// waking up) would make a bound that runs beat. Returns the best.
LinkRates refresh_link_rates(int device);
// The faster of two measurements, figure by figure.
LinkRates fastest_of(const LinkRates& a, const LinkRates& b);
// Seeds the cache, e.g. from a saved `sluice probe --json`.
void remember_link_rates(int device, const LinkRates& rates);

// The link and host parts of EngineRates together.
inline EngineRates with_link(EngineRates rates, const LinkRates& link) {
  rates.h2d_gbps = link.h2d_gbps;
  rates.d2h_gbps = link.d2h_gbps;
  rates.both_gbps = link.both_gbps;
  rates.h2d_heavy = link.h2d_heavy;
  rates.d2h_heavy = link.d2h_heavy;
  return rates;
}

}  // namespace sluice
