#pragma once
// What the pipeline tests share, on either backend (backend.hpp): data that
// is never all zeros, outputs poisoned with NaN, a check that every element
// was written right, and the fixtures. A test binary runs every suite here
// on its backend with SLUICE_INSTANTIATE_PIPELINE_TESTS. Host-only.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "backend.hpp"

namespace sluice::test {

inline std::vector<float> pattern(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7919) % 10007) * 0.25f + 1.0f;
  return v;
}

// Every element written (the poison is NaN) and equal to 2 * in + 1.
template <typename In, typename Out>
::testing::AssertionResult is_affine(const In& in, const Out& out) {
  if (std::size(in) != std::size(out)) return ::testing::AssertionFailure() << "sizes differ";
  for (std::size_t i = 0; i < std::size(in); ++i)
    if (!(out[i] == in[i] * 2.0f + 1.0f))
      return ::testing::AssertionFailure() << "element " << i << " of " << std::size(in) << " is " << out[i]
                                           << ", expected " << in[i] * 2.0f + 1.0f;
  return ::testing::AssertionSuccess();
}

// The note a run that learnt its chunks leaves (PipelineOptions::adapt_chunks), or "" when it left none.
inline std::string adapt_note(const RunReport& report) {
  for (const std::string& note : report.notes)
    if (note.find("adapt_chunks") != std::string::npos) return note;
  return {};
}

// A backend, by name: the parameter of every suite here.
struct BackendKind {
  const char* name;
  std::unique_ptr<Backend> (*make)();
};
inline void PrintTo(const BackendKind& kind, std::ostream* os) { *os << kind.name; }

class PipelineTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    backend_ = GetParam().make();
    if (const std::string why = backend_->unavailable(); !why.empty()) GTEST_SKIP() << why;
  }
  void TearDown() override {
    if (backend_ && !IsSkipped()) backend_->expect_clean();
  }

  Backend& backend() { return *backend_; }
  Pipeline pipeline(const PipelineOptions& options = {}) { return backend_->pipeline(options); }
  // y = 2x + 1 through the pipeline, with typed handles.
  void affine(Pipeline& p, SpanHandle<const float> in, SpanHandle<float> out) {
    p.compute([b = backend_.get(), in, out](const Chunk& c) { b->affine(c, c[in].data(), c[out].data(), 2.0f, 1.0f); });
  }

 private:
  std::unique_ptr<Backend> backend_;
};

// Pipeline tests with a directory of their own for files.
class SourceTest : public PipelineTest {
 protected:
  void SetUp() override;
  void TearDown() override;
  std::filesystem::path write_floats(const std::string& name, const std::vector<float>& v, std::size_t header = 0);
  std::vector<float> read_floats(const std::filesystem::path& path);
  // The names in the test's directory other than `expected`: files a run left behind.
  std::vector<std::string> left_behind(const std::vector<std::string>& expected);
  std::filesystem::path dir_;
};

}  // namespace sluice::test

// Runs every suite above on one backend, its tests named `prefix`/Suite.Test/0.
#define SLUICE_INSTANTIATE_PIPELINE_TESTS(prefix, kind)                             \
  INSTANTIATE_TEST_SUITE_P(prefix, PipelineTest, ::testing::Values(kind)); \
  INSTANTIATE_TEST_SUITE_P(prefix, SourceTest, ::testing::Values(kind))
