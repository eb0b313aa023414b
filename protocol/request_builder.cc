#include "protocol/request_builder.h"

#include <vector>

#include "protocol/wire.h"

namespace limiter {

struct RequestBuilder::Impl {
  flatbuffers::FlatBufferBuilder fbb{1024};
  std::vector<flatbuffers::Offset<wire::Op>> ops;
  flatbuffers::Offset<wire::Hello> hello;
  uint16_t split_k = 0, split_index = 0;  // for the next op only
  uint32_t split_epoch = 0;
  std::vector<uint8_t> split_token;

  flatbuffers::Offset<flatbuffers::String> Str(std::string_view s) {
    return fbb.CreateString(s.data(), s.size());
  }
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::Limit>>> One(
      std::string_view policy, std::string_view key) {
    const auto p = Str(policy);
    const auto k = Str(key);
    const flatbuffers::Offset<wire::Limit> limit = wire::CreateLimit(fbb, p, k);
    return fbb.CreateVector(&limit, 1);
  }
  void Add(uint64_t id, wire::OpType type,
           flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::Limit>>> limits,
           std::string_view tenant, int64_t cost, std::string_view operation, bool dry_run,
           int64_t leased_at, uint64_t lease_id = 0) {
    const auto t = tenant.empty() ? 0 : Str(tenant);
    const auto op = operation.empty() ? 0 : Str(operation);
    const auto token = split_k == 0 || split_token.empty()
                           ? 0
                           : fbb.CreateVector(split_token.data(), split_token.size());
    wire::OpBuilder b(fbb);
    b.add_id(id);
    b.add_type(type);
    if (!limits.IsNull()) b.add_limits(limits);
    if (!t.IsNull()) b.add_tenant(t);
    b.add_cost(cost);
    if (!op.IsNull()) b.add_operation(op);
    b.add_dry_run(dry_run);
    b.add_leased_at_ms(leased_at);
    b.add_lease_id(lease_id);
    if (split_k != 0) {
      b.add_split_k(split_k);
      b.add_split_index(split_index);
      b.add_split_epoch(split_epoch);
      if (!token.IsNull()) b.add_split_token(token);
      split_k = 0;
    }
    ops.push_back(b.Finish());
  }
};

RequestBuilder::RequestBuilder() : impl_(std::make_unique<Impl>()) {}
RequestBuilder::~RequestBuilder() = default;

void RequestBuilder::Clear() {
  impl_->fbb.Clear();
  impl_->ops.clear();
  impl_->hello = 0;
  impl_->split_k = 0;
}

void RequestBuilder::Hello(std::string_view client_name, std::span<const uint8_t> nonce,
                           std::span<const uint8_t> proof, std::string_view peer_name,
                           std::span<const uint8_t> peer_proof) {
  auto& fbb = impl_->fbb;
  const auto name = impl_->Str(client_name);
  const auto n = nonce.empty() ? 0 : fbb.CreateVector(nonce.data(), nonce.size());
  const auto p = proof.empty() ? 0 : fbb.CreateVector(proof.data(), proof.size());
  const auto member = peer_name.empty() ? 0 : impl_->Str(peer_name);
  const auto pp = peer_proof.empty() ? 0 : fbb.CreateVector(peer_proof.data(), peer_proof.size());
  impl_->hello = wire::CreateHello(fbb, kProtocolVersion, name, n, p, member, pp);
}

void RequestBuilder::Check(uint64_t id, std::string_view policy, std::string_view key,
                           std::string_view tenant, int64_t cost, std::string_view operation,
                           bool dry_run) {
  impl_->Add(id, wire::OpType::Check, impl_->One(policy, key), tenant, cost, operation, dry_run, 0);
}

void RequestBuilder::CheckMany(
    uint64_t id, std::span<const std::pair<std::string_view, std::string_view>> limits,
    std::string_view tenant, int64_t cost, bool dry_run) {
  std::vector<flatbuffers::Offset<wire::Limit>> list;
  for (const auto& [policy, key] : limits) {
    const auto p = impl_->Str(policy);
    const auto k = impl_->Str(key);
    list.push_back(wire::CreateLimit(impl_->fbb, p, k));
  }
  impl_->Add(id, wire::OpType::Check, impl_->fbb.CreateVector(list), tenant, cost, {}, dry_run, 0);
}

void RequestBuilder::Lease(uint64_t id, std::string_view policy, std::string_view key,
                           std::string_view tenant, int64_t units) {
  impl_->Add(id, wire::OpType::Lease, impl_->One(policy, key), tenant, units, {}, false, 0);
}

void RequestBuilder::Return(uint64_t id, std::string_view policy, std::string_view key,
                            std::string_view tenant, int64_t units, int64_t leased_at_ms,
                            uint64_t lease_id) {
  impl_->Add(id, wire::OpType::Return, impl_->One(policy, key), tenant, units, {}, false,
             leased_at_ms, lease_id);
}

void RequestBuilder::Inspect(uint64_t id, std::string_view policy, std::string_view key,
                             std::string_view tenant) {
  impl_->Add(id, wire::OpType::Inspect, impl_->One(policy, key), tenant, 1, {}, false, 0);
}

void RequestBuilder::Stats(uint64_t id) {
  impl_->Add(id, wire::OpType::Stats, 0, {}, 1, {}, false, 0);
}

void RequestBuilder::Split(uint64_t id, std::string_view policy, std::string_view key,
                           int64_t sent) {
  impl_->Add(id, wire::OpType::Split, impl_->One(policy, key), {}, sent, {}, false, 0);
}

void RequestBuilder::HotKeys(uint64_t id) {
  impl_->Add(id, wire::OpType::HotKeys, 0, {}, 1, {}, false, 0);
}

void RequestBuilder::Regions(uint64_t id, std::string_view policy, std::string_view key,
                             std::string_view tenant) {
  impl_->Add(id, wire::OpType::Regions, policy.empty() ? 0 : impl_->One(policy, key), tenant, 1, {},
             false, 0);
}

void RequestBuilder::Members(uint64_t id) {
  impl_->Add(id, wire::OpType::Members, 0, {}, 1, {}, false, 0);
}

void RequestBuilder::OnSubBucket(uint16_t k, uint16_t index, uint32_t epoch,
                                 std::span<const uint8_t> token) {
  impl_->split_token.assign(token.begin(), token.end());
  impl_->split_k = k;
  impl_->split_index = index;
  impl_->split_epoch = epoch;
}

size_t RequestBuilder::ops() const { return impl_->ops.size(); }

std::span<const uint8_t> RequestBuilder::Finish() {
  auto& fbb = impl_->fbb;
  const auto ops = fbb.CreateVector(impl_->ops);
  wire::RequestBuilder request(fbb);
  if (!impl_->hello.IsNull()) request.add_hello(impl_->hello);
  request.add_ops(ops);
  fbb.Finish(request.Finish());
  return {fbb.GetBufferPointer(), fbb.GetSize()};
}

}  // namespace limiter
