#pragma once
// A few elements kept in place, up to N: a plan's operation has at most three
// edges and three slots, and executors build one per operation they submit.
#include <array>
#include <cstddef>
#include <stdexcept>

namespace sluice {

template <typename T, std::size_t N>
class Few {
 public:
  void push(const T& value) {
    if (size_ == N) throw std::length_error("sluice::Few: more than its room");
    items_[size_++] = value;
  }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T* begin() const { return items_.data(); }
  const T* end() const { return items_.data() + size_; }
  const T& operator[](std::size_t i) const { return items_[i]; }

 private:
  std::array<T, N> items_{};
  std::size_t size_ = 0;
};

}  // namespace sluice
