#pragma once
// Streams and events belong to the device current when they are made, and an
// event is recorded only on its own device's streams (making one on another
// device would also start that device's context). made_on<T>(device, ...)
// makes one on `device` and leaves the caller's current device as it was, so
// that an owner on any device can make its members in its initialiser list.
#include <utility>

#include "sluice/core/device_scope.hpp"

namespace sluice::detail {

template <class T, class... Args>
T made_on(int device, Args&&... args) {
  const DeviceScope scope(device);
  return T(std::forward<Args>(args)...);
}

}  // namespace sluice::detail
