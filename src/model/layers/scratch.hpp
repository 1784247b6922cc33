#pragma once
// Temporaries of one forward or backward pass, shared by every layer of a
// stage (one pass runs at a time; what must outlive a pass lives in the
// activation context instead). Sized for the stage's local extents by
// StageModel when the micro-batch shape changes.
#include "core/types.hpp"

namespace exa::model {

template <class T, class D = Device>
struct LayerScratch {
  using V2 = Kokkos::View<T**, Layout, D>;
  V2 dres, dxn;            // residual-stream gradient, norm-output gradient [N,d]
  V2 dq, dk, dv, dout;     // [N,Hl*hd], [N,Hkvl*hd] x2, [N,Hl*hd]
  V2 dda, ddb, ddh;        // dense FFN [N,d_ff local]
  V2 dsa, dsb, dsh;        // one shared expert [N,F]
  V2 dgates, drouter;      // [N,k], [N,E]
  V2 moe_y;                // forward: routed experts' output [N,d]

  std::size_t bytes() const {
    std::size_t n = 0;
    for (const auto* v : {&dres, &dxn, &dq, &dk, &dv, &dout, &dda, &ddb, &ddh, &dsa, &dsb, &dsh, &dgates, &drouter,
                          &moe_y})
      n += v->span();
    return n * sizeof(T);
  }
};

}  // namespace exa::model
