#include "comm/traffic_ledger.hpp"

namespace exa::comm {

namespace {

std::array<TrafficBytes, kTrafficKinds>& ledger() {
  static std::array<TrafficBytes, kTrafficKinds> l{};
  return l;
}

}  // namespace

void TrafficLedger::add(Traffic t, double logical, double wire) {
  auto& b = ledger()[static_cast<std::size_t>(t)];
  b.logical += logical;
  b.wire += wire;
}

std::array<TrafficBytes, kTrafficKinds> TrafficLedger::totals() { return ledger(); }

const char* TrafficLedger::name(Traffic t) {
  switch (t) {
    case Traffic::DpGrads: return "dp_grads";
    case Traffic::ZeroWeights: return "zero_weights";
    case Traffic::ExpertA2a: return "expert_a2a";
    case Traffic::Tp: return "tp";
    case Traffic::PpP2p: return "pp_p2p";
    case Traffic::Cp: return "cp";
  }
  return "?";
}

}  // namespace exa::comm
