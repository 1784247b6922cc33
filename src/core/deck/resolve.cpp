#include "core/deck/resolve.hpp"

#include <fmt/format.h>

#include "core/deck/config_access.hpp"

namespace exa::deck {
namespace {

void derive(Config& c, const char* key, std::int64_t value, std::string why) {
  Setting& s = ConfigAccess::at(c, key);
  if (std::get<std::int64_t>(s.value) != 0) return;
  s.value = Value{value};
  s.derived = std::move(why);
}

}  // namespace

void resolve_derived(Config& c) {
  const auto pp = c.get_int("parallel.pp"), cp = c.get_int("parallel.cp"), tp = c.get_int("parallel.tp");
  const int world = c.layout_world_size();
  derive(c, "parallel.dp", world / (pp * cp * tp),
         world == c.world_size()
             ? fmt::format("0 -> world size {} / (pp*cp*tp = {})", world, pp * cp * tp)
             : fmt::format("0 -> a federated site's {} ranks / (pp*cp*tp = {})", world, pp * cp * tp));
  derive(c, "model.n_kv_heads", c.get_int("model.n_heads"), "0 -> model.n_heads");
  derive(c, "parallel.microbatches", c.get_int("train.grad_accum"), "0 -> train.grad_accum");
  derive(c, "output.metrics_every", c.get_int("train.log_every"), "0 -> train.log_every");
}

}  // namespace exa::deck
