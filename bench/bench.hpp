#pragma once
// `sluice bench`: sluice's pipeline beside the hand-written peers (and a
// PyTorch peer where the machine has PyTorch), on the same data, every row
// verified, each beside the absolute bound measured in the same run and the
// model's prediction.
#include <functional>
#include <string>
#include <vector>

#include "bench_result.hpp"
#include "sluice/pipeline/pipeline_options.hpp"
#include "workload.hpp"

namespace sluice::bench {

struct BenchOptions {
  int device = 0;
  std::vector<workloads::Workload> workloads;
  std::vector<std::size_t> sizes;        // bytes per array
  int repeats = 5;                       // timed rounds at 256 MiB and above, up to 8x below (rounds_for)
  std::vector<unsigned> staircase_streams{2, 3, 4, 6, 8, 12, 16};
  std::vector<std::size_t> triple_buffer_chunk_bytes{std::size_t{2} << 20, std::size_t{4} << 20, std::size_t{8} << 20,
                                                     std::size_t{16} << 20};
  PipelineOptions pipeline;              // for the sluice rows
  bool host_rows = true;                 // pageable, registered and automatic rows
  std::string torch_peer;                // path to bench/torch_peer.py; empty: no PyTorch rows
  std::string python = "python3";
  // File cases (--files): a file of floats through a reduction and a transform.
  std::size_t file_bytes = 0;            // 0: no file cases
  std::string file_dir = ".";
  bool keep_file = false;
};

// progress(line) is called as each row finishes, for a live log.
BenchResult run_bench(const BenchOptions& options, const std::function<void(const std::string&)>& progress = {});

namespace detail {
// The file cases, appended to `result` (bench_files.cpp).
void run_file_cases(const BenchOptions& options, BenchResult& result, const std::function<void(const std::string&)>& progress);
// PyTorch's rows for every case, from one run of the peer script (torch_peer.cpp).
std::vector<MeasuredRow> torch_rows(const BenchOptions& options, std::string& note);
// What the model needs to predict a pipeline run over a case.
ModelInput model_input(const BenchResult& result, const BenchCase& c, const workloads::Problem& problem,
                       const PipelineOptions& options, bool staged);
// Rates are the machine's, not a case's: every case's bound is computed with
// the best each engine showed anywhere in the run, and every row is judged
// by it (bound, efficiency) and predicted again. Rows are judged only here.
void settle_bounds(BenchResult& result);
}  // namespace detail

}  // namespace sluice::bench
