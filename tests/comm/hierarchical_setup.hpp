#pragma once
// Test helper shared by the hierarchical collective tests: a ProcessGrid, the
// flat communicator over one of its groups and the (node-local, inter-node)
// pair made from it, built once per layout (communicator creation is slow on
// an oversubscribed machine).
#include <map>
#include <memory>
#include <tuple>

#include "comm/communicator.hpp"
#include "comm/hierarchical.hpp"
#include "comm/process_grid.hpp"

namespace exa::test {

struct GridLayout {
  comm::Group over;
  int tp, ranks_per_node;
  int ep = 1;
};

struct Setup {
  std::unique_ptr<comm::ProcessGrid> grid;
  std::unique_ptr<comm::Communicator> flat;
  comm::HierarchicalComms hc;
};

inline Setup& setup(const GridLayout& l) {
  static std::map<std::tuple<int, int, int, int>, Setup> cache;
  auto& st = cache[{static_cast<int>(l.over), l.tp, l.ranks_per_node, l.ep}];
  if (!st.grid) {
    comm::GridSizes s;
    s.tp = l.tp;
    s.ep = l.ep;
    s.ranks_per_node = l.ranks_per_node;
    st.grid = std::make_unique<comm::ProcessGrid>(s);
    st.flat = comm::make_mpi_communicator(st.grid->comm(l.over));
    st.hc = comm::make_hierarchical(*st.grid, l.over);
  }
  return st;
}

}  // namespace exa::test
