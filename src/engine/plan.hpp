#pragma once
// The engine's one plan format. Every product plans its work before it runs,
// as a value, in its own terms (a pipeline's schedule of chunks, a ring's
// positions) and emits it in this form: operations in groups, each on a lane,
// using slots of rings and waiting on edges. One checker reads it
// (plan_check.hpp): over every operation before anything runs, and as a host
// executor runs each one. Host-only.
//
// A group is what passes the steps together (a chunk, a position); an
// operation is one step of one group. A ring of slots serves group after
// group: group g uses slot g % size, so the contents g overwrites belong to
// group g - size. Every plan keeps three rules:
//   - an edge waits on an operation before it (an earlier group, or an earlier step of its own);
//   - an operation that writes a slot comes after every use of the slot by its previous group;
//   - an operation that reads a slot comes after its group's earlier writes of it;
// where "comes after" is a path of edges and lane order.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "sluice/core/few.hpp"

namespace sluice::engine {

struct OpKey {
  std::size_t group = 0;
  std::uint8_t step = 0;
  friend constexpr bool operator==(const OpKey&, const OpKey&) = default;
};

enum class Access : std::uint8_t { read, write, read_write };
constexpr bool reads(Access a) { return a != Access::write; }
constexpr bool writes(Access a) { return a != Access::read; }

struct SlotUse {
  std::uint8_t ring = 0;  // the domain's ring
  std::size_t slot = 0;
  Access access = Access::read;
};

// What an edge waits for: the operation finished (a lane or the host waits
// for it to run), or only submitted (the host waits until the consumer has
// asked for that much: it orders nothing that runs).
enum class Until : std::uint8_t { finished, submitted };

struct Edge {
  OpKey on;
  std::uint8_t why = 0;  // the domain's reason
  Until until = Until::finished;
};

struct Op {
  OpKey key;
  std::uint8_t lane = 0;  // the domain's lane
  // The operation before it on its lane, where the lane runs its operations one at a time in order.
  std::optional<OpKey> after;
  Few<SlotUse, 3> slots;
  Few<Edge, 3> edges;
};

// A broken rule, seen statically (may_*) or as an operation started (the rest).
struct Violation {
  enum class Kind : std::uint8_t {
    edge_backwards,  // an edge waits on an operation that does not come before it
    wrong_slot,      // a slot that is not its group's (g % size)
    may_overwrite,   // no path orders a write after a use of the slot's previous contents
    may_read_early,  // no path orders a read after the write it reads
    started_early,   // started before an operation it waits on (`edge`)
    overwrote,       // wrote a slot while `other`, of the previous group, still used it
    read_early,      // read a slot before `other` had written it
  };
  Kind kind = Kind::started_early;
  OpKey op;
  Edge edge;      // edge_backwards, started_early
  SlotUse use;    // the slot kinds
  OpKey other;    // may_overwrite, may_read_early, overwrote, read_early
};

// A plan in the engine's form, read operation by operation: each one derived
// from its domain's rules when asked (a ring may have no end).
class Plan {
 public:
  static constexpr std::size_t no_end = SIZE_MAX;
  virtual ~Plan() = default;
  // Operations per group.
  virtual std::uint8_t steps() const = 0;
  // The groups that run: first_group() up to groups() (no_end: none). A
  // plan resumed past its first groups leaves out edges and slot uses before them.
  virtual std::size_t first_group() const { return 0; }
  virtual std::size_t groups() const = 0;
  virtual std::size_t ring_size(std::uint8_t ring) const = 0;
  // Throws std::out_of_range for a group past the last.
  virtual Op op(OpKey key) const = 0;
  // An operation's place among all: group by group, step by step.
  std::size_t index(OpKey key) const { return key.group * steps() + key.step; }

  // For messages: an operation, a ring and a reason by name.
  virtual std::string name(OpKey key) const = 0;
  virtual std::string ring_name(std::uint8_t ring) const = 0;
  virtual std::string why_name(std::uint8_t why) const = 0;
  // One line for a broken rule; a domain may phrase its own.
  virtual std::string describe(const Violation& v) const;
};

using KeepEdge = std::function<bool(const Op& op, const Edge& edge)>;

}  // namespace sluice::engine
