#pragma once
// Ranges of elements of a flat array (the offload tier's spans), and sets
// of them kept as sorted, disjoint spans: SpanSet is what the CUDA offload
// tier has prefetched to the device (core/offload_tier_managed.cpp).
// Touching spans merge, adding a covered range changes nothing, and removing
// a range splits the spans it cuts.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace exa {

// Elements [begin, end) of a flat array.
struct ElementSpan {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
};

class SpanSet {
 public:
  void add(ElementSpan s) {
    if (s.empty()) return;
    std::vector<ElementSpan> out;
    for (const auto& t : spans_) {
      if (t.end < s.begin || t.begin > s.end) {
        out.push_back(t);
      } else {
        s.begin = std::min(s.begin, t.begin);
        s.end = std::max(s.end, t.end);
      }
    }
    out.push_back(s);
    std::sort(out.begin(), out.end(), [](const ElementSpan& a, const ElementSpan& b) { return a.begin < b.begin; });
    spans_ = std::move(out);
  }

  void remove(ElementSpan s) {
    if (s.empty()) return;
    std::vector<ElementSpan> out;
    for (const auto& t : spans_) {
      if (t.end <= s.begin || t.begin >= s.end) {
        out.push_back(t);
        continue;
      }
      if (t.begin < s.begin) out.push_back({t.begin, s.begin});
      if (t.end > s.end) out.push_back({s.end, t.end});
    }
    spans_ = std::move(out);
  }

  void clear() { spans_.clear(); }
  std::int64_t elements() const {
    std::int64_t n = 0;
    for (const auto& s : spans_) n += s.size();
    return n;
  }
  const std::vector<ElementSpan>& spans() const { return spans_; }

 private:
  std::vector<ElementSpan> spans_;
};

}  // namespace exa
