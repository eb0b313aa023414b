// Region shares of a global limit (DESIGN "Regions"): pure functions, the same in every region
// so that regions holding the same demand reports compute the same shares without consensus.
//
//   AllocateShares: splits L units among regions, max-min fair over their demands, with a
//     floor per region; the shares always sum to L exactly, in integer units.
//   ShareRate:      the Rate a region enforces for its share: L_r per W, with the burst cut in
//     the same proportion (B_r = floor(B * L_r / L)), so the shares' bursts sum to at most B.
//   Reshaped:       a key's state moved from one share's Rate to another's: what it may still
//     admit now is kept (cut to the new burst), never raised by the change itself.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/algorithm_kind.h"
#include "common/key_limiter.h"
#include "common/rate.h"

namespace limiter {

// The algorithms a `scope: global` policy may use: token_bucket and gcra. Their state is the
// same shape at any rate, a change of share can be applied to it at once (Reshaped), and the
// store's expiry under the policy's own rate never drops a key before its share's rate would.
// A window's count stays when the shares move within the window (so the regions together
// could pass L in it); a sliding log is sized by L; a leaky bucket would expire early.
Status GlobalScopeError(Algorithm algorithm);

// The smallest nonzero share: a bucket algorithm needs B_r >= 1, so L_r >= ceil(L / B);
// a window algorithm needs 1 unit.
int64_t ShareQuantum(Algorithm algorithm, const Rate& rate);

// Shares of `limit` over regions, one per demand (units per window each region wants, in an
// order every region uses: by region name). Max-min fair: a region that wants less than an
// equal split gets what it wants, the rest is shared among the others up to what each wants,
// and what nobody wants is spread evenly, so the shares sum to `limit`. Each region wants at
// least `floor` (capped at limit / regions, so floors always fit) and `quantum`; every share
// is 0 or at least `quantum`, and 0 only when limit < regions * quantum (then the regions that
// want most get a quantum each; below one quantum in all, one region holds it). Remainders go to
// the regions with the largest unmet want, then the lowest index: deterministic. Preconditions:
// limit >= 0, demands >= 0.
std::vector<int64_t> AllocateShares(int64_t limit, std::span<const int64_t> demands, int64_t floor,
                                    int64_t quantum);

// The Rate that enforces `share` units of `policy_rate`; nullopt when share is 0 (deny).
std::optional<Rate> ShareRate(Algorithm algorithm, const Rate& policy_rate, int64_t share);

// `state` (last decided under `from`) as it must be under `to` at `now`: the window
// algorithms keep their counts; a token bucket or GCRA keeps what it could admit now, cut to
// the new burst. Only for GlobalScopeError-free algorithms.
KeyLimiter Reshaped(const KeyLimiter& state, const Rate& from, const Rate& to, int64_t now_ms);

}  // namespace limiter
