// NodeOptions: what a node is told at start (limiterd's flags and config file: server/config.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/auth.h"
#include "protocol/frame_codec.h"
#include "server/hot_keys.h"
#include "server/region_shares.h"
#include "server/store.h"

namespace limiter {

struct NodeOptions {
  std::string name = "limiterd";
  // The cluster: every node's host:port, and this node's own among them. With no members
  // the node is standalone and owns every key. The list's generation orders lists: a node
  // and its gateways adopt only a list with a larger one (Ownership::SetMembers).
  std::vector<std::string> members;
  uint64_t generation = 0;
  std::string self;
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
  // Bounds on the work one frame may ask for. Over any, the frame is refused whole (nothing
  // in it is done), the peer gets an error reply and its connection closes.
  uint32_t max_ops_per_frame = 8192;
  uint32_t max_reply_bytes = 8u << 20;   // checked as the reply is built
  uint32_t max_inspects_per_frame = 64;  // INSPECT; STATS and HOTKEYS: one each
  // The gateway secret(s): with any, every connection must prove one (or the peer secret) in
  // its hello, and split tokens are signed with the first. Empty: gateways need not prove
  // anything (a node that also has no peer credential trusts every peer).
  auth::Secrets secrets;
  // The peer credential, which only nodes hold: the peer secret(s), and/or, with mutual TLS,
  // a node certificate (peer_tls: the server tells node certificates from gateways' by a
  // separate CA and marks the session, Authenticator::NoteTlsNode). Only a session that proved it
  // may send what nodes say to each other: member-list changes, hand-offs, region reports.
  auth::Secrets peer_secrets;
  bool peer_tls = false;
  // How far apart the nodes' wall clocks may be: a split token is honoured this long past
  // its time, and a split reopens this much later.
  int64_t clock_skew_ms = 1000;
  Store::Options store;
  size_t sweep_budget = 4096;  // slots per stripe and policy per Sweep
  HotKeyOptions hot;
  // Hand-off (server/ownership.h): how long this node answers Moving for keys it gained and
  // waits to be handed, before it serves them fresh (the crash promise); and whether it starts
  // with every key waiting, for a node joining a running cluster until it knows who holds
  // what (Join or OpenGate).
  int64_t handoff_deadline_ms = 10'000;
  bool join_gate = false;
  // Regions (region_shares.h): with a region named, `scope: global` limits are enforced as
  // this region's share. Checked by RegionShares::Check.
  RegionOptions regions;
  // The first lease id; 0: a random one (what a real node wants: ids never repeat across
  // restarts). Simulations fix it so that a seeded run repeats exactly.
  uint64_t lease_id_start = 0;
};

}  // namespace limiter
