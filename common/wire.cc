#include "common/wire.h"

namespace limiter {
namespace {

template <class T>
const T* Verified(std::span<const uint8_t> body) {
  // Depth and table counts bound the work a hostile frame can cause.
  flatbuffers::Verifier verifier(body.data(), body.size(), /*max_depth=*/16,
                                 /*max_tables=*/1u << 20);
  if (!verifier.VerifyBuffer<T>(nullptr)) return nullptr;
  return flatbuffers::GetRoot<T>(body.data());
}

}  // namespace

const wire::Request* VerifiedRequest(std::span<const uint8_t> body) {
  return Verified<wire::Request>(body);
}

const wire::Reply* VerifiedReply(std::span<const uint8_t> body) {
  return Verified<wire::Reply>(body);
}

}  // namespace limiter
