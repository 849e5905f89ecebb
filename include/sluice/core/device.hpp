#pragma once
// A CUDA device by ordinal: count, select, describe, synchronise.
#include <string>

#include "sluice/core/device_info.hpp"

namespace sluice {

class Device {
 public:
  explicit Device(int ordinal = 0);

  // Number of usable devices; 0 (not an exception) when there is no GPU or
  // no driver, so callers can skip GPU work with a reason.
  static int count() noexcept;
  // Why count() is 0, in CUDA's words; empty when a device is present.
  static std::string unavailable_reason();
  static Device current();

  int ordinal() const { return ordinal_; }
  void make_current() const;
  DeviceInfo info() const;
  // Blocks until all work on the device is done, then rethrows the first
  // exception a host function (enqueue_host) raised on any stream.
  void synchronize() const;

 private:
  int ordinal_;
};

}  // namespace sluice
