#pragma once
// "did you mean ...?" for misspelt deck sections, keys and values.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace exa::deck {

// Optimal-string-alignment distance (Levenshtein plus adjacent
// transpositions, so "d_modle" is one edit from "d_model"), ignoring case.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, if it is close enough to be a plausible
// typo (at most max(1, |word|/3) edits); "" otherwise. Ties go to the
// earlier candidate, so callers list candidates in schema order.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace exa::deck
