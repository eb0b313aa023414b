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
#include "limiter/status.h"

namespace limiter {

// Appends the state's fields: offsets from now_ms for times, or from the state's own latest
// time when that is later (another thread moved the key on past now_ms), so that no offset
// is positive. Precondition: the state is not fresh at now_ms (a fresh key carries nothing and
// is not sent).
void ExportState(const KeyLimiter& state, int64_t now_ms, std::vector<int64_t>& out);

// The state the fields describe, on a node whose clock reads now_ms; nullopt when it is
// fresh by now (a window that has passed). Amounts beyond what `rate` holds (a count over the
// limit, tokens or a level over the burst, a GCRA TAT further ahead than the burst allows: a
// state written under a higher limit or burst) are clamped to it, so the key is exhausted at
// this rate and never admits more than it did; the same fields under the same rate come back
// unchanged. An error, naming the field, when the fields are no state of `algorithm` at all
// (wrong count, a negative amount, a time out of order or out of range): they came from the
// network or the disk.
Result<std::optional<KeyLimiter>> ImportState(Algorithm algorithm, const Rate& rate,
                                              std::span<const int64_t> fields, int64_t now_ms);

// Fields ExportState wrote under `from`, rewritten in place as fields under `to` (the policy
// changed between the write and the read) that decide no more generously from then on:
// a bucket's tokens and a GCRA's missing tokens are scaled by W, so they are rescaled to the
// new window, rounded toward less allowance. Window counts and log costs are in cost units and
// need nothing here (ImportState keeps them within the new limit). Fields that are no state of
// `from` are left for ImportState to refuse.
void ConvertFields(Algorithm algorithm, const Rate& from, const Rate& to,
                   std::span<int64_t> fields);

// Of two states of one key (a moved one, and one the receiver made meanwhile), the one that
// admits less from now on: the larger charge in effect.
KeyLimiter StricterOf(const Rate& rate, KeyLimiter a, KeyLimiter b, int64_t now_ms);

}  // namespace limiter
