#pragma once
// Makes a device current for a scope and puts the caller's back on every
// path out of it, exceptions included: sluice never changes which device the
// calling thread has current. Not copyable or movable.
namespace sluice {

class DeviceScope {
 public:
  // Throws CudaError when the device cannot be made current.
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace sluice
