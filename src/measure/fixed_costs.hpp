#pragma once
// The fixed costs the model (model.hpp) needs, measured on one device: a
// copy's latency beyond its bytes, a kernel's start after its input is
// ready, the wake-up of a thread blocked on an event, the host's work to
// enqueue one chunk, a staging job's hand-off, and a run's own start and end
// (from a pipeline run of one tiny chunk). About 60 ms to measure.
#include "sluice/measure/model.hpp"

namespace sluice {

FixedCosts measure_fixed_costs(int device);

}  // namespace sluice
