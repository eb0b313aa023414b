// RequestBuilder: encodes one Request frame body (a batch of ops). Reusable: Clear() keeps
// its buffer. Not thread-safe; one per connection or thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace limiter {

class RequestBuilder {
 public:
  RequestBuilder();
  ~RequestBuilder();

  void Clear();
  // A hello; with the cluster secret, the handshake's nonce and then its proof (handshake.h).
  // A node speaking to another names the member it speaks for (peer_name) and proves the
  // peer secret in peer_proof.
  void Hello(std::string_view client_name, std::span<const uint8_t> nonce = {},
             std::span<const uint8_t> proof = {}, std::string_view peer_name = {},
             std::span<const uint8_t> peer_proof = {});
  // cost applies when operation is empty.
  void Check(uint64_t id, std::string_view policy, std::string_view key,
             std::string_view tenant = {}, int64_t cost = 1, std::string_view operation = {},
             bool dry_run = false);
  // A CHECK over several limits at once: (policy, key) pairs.
  void CheckMany(uint64_t id, std::span<const std::pair<std::string_view, std::string_view>> limits,
                 std::string_view tenant, int64_t cost, bool dry_run = false);
  void Lease(uint64_t id, std::string_view policy, std::string_view key, std::string_view tenant,
             int64_t units);
  // Gives back `units` of the lease that LEASE answered with lease_id and granted_at_ms.
  void Return(uint64_t id, std::string_view policy, std::string_view key, std::string_view tenant,
              int64_t units, int64_t leased_at_ms, uint64_t lease_id);
  void Inspect(uint64_t id, std::string_view policy, std::string_view key,
               std::string_view tenant = {});
  void Stats(uint64_t id);
  // SPLIT: a split key's current split, reporting `sent` ops sent to its sub-buckets.
  void Split(uint64_t id, std::string_view policy, std::string_view key, int64_t sent);
  void HotKeys(uint64_t id);
  // MEMBERS with no list: asks the node for its member list and generation.
  void Members(uint64_t id);
  // REGIONS: what the node knows of the regions' shares of one global key (its owner
  // answers), or, with no policy, of its links to the other regions.
  void Regions(uint64_t id, std::string_view policy = {}, std::string_view key = {},
               std::string_view tenant = {});
  // Makes the next op (Check, Lease, Return, Inspect) one on sub-bucket `index` of a key split
  // `k` ways in split `epoch`.
  void OnSubBucket(uint16_t k, uint16_t index, uint32_t epoch, std::span<const uint8_t> token = {});

  size_t ops() const;
  // The encoded body, valid until the next call that changes the builder.
  std::span<const uint8_t> Finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace limiter
