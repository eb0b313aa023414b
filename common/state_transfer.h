// State transfer: a key's algorithm state written as a list of integers that another node can
// read back, for the hand-off of keys between nodes (server/handoff.h). Pure functions.
//
// Every node has its own monotonic clock, so a time in a state means nothing to another node.
// The sender writes each time as an offset from its clock when it read the state; the
// receiver adds the offsets to its own clock when it reads them. The time the message spends
// in flight thus counts as time passed (a bucket refills for it: a few milliseconds' worth).
//
// The window algorithms count in windows aligned to the node's clock (algorithms.h). Two
// nodes' windows do not line up, so a window that is still open when sent carries its counts
// into the receiver's current window: what was admitted in it is never admitted again, and
// the bound across the move is that of any fixed window, 2L in any W.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/key_limiter.h"
#include "common/result.h"

namespace limiter {

// Appends the state's fields: offsets from now_ms for times, or from the state's own latest
// time when that is later (another thread moved the key on past now_ms), so that no offset
// is positive. Precondition: the state is not fresh at now_ms (a fresh key carries nothing and
// is not sent).
void ExportState(const KeyLimiter& state, int64_t now_ms, std::vector<int64_t>& out);

// The state the fields describe, on a node whose clock reads now_ms; nullopt when it is
// fresh by now (a window that has passed). An error, naming the field, when the fields are not
// a state of `algorithm` at `rate` (wrong count, a value out of range): they came from the
// network.
Result<std::optional<KeyLimiter>> ImportState(Algorithm algorithm, const Rate& rate,
                                              std::span<const int64_t> fields, int64_t now_ms);

// Of two states of one key (a moved one, and one the receiver made meanwhile), the one that
// admits less from now on: the larger charge in effect.
KeyLimiter StricterOf(const Rate& rate, KeyLimiter a, KeyLimiter b, int64_t now_ms);

}  // namespace limiter
