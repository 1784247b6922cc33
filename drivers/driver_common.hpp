#pragma once
// What every ExaMoE driver does the same way: command-line errors and
// exa::Error both end as one "<program>: error: <message>" line on rank 0's
// stderr and exit code 1 on every rank; --help prints and exits 0.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <sstream>
#include <string>

namespace exa::driver {

// Parses; returns -1 to go on, else the exit code main should return.
inline int parse(CLI::App& app, int argc, char** argv, int rank, const std::string& program) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return rank == 0 ? app.exit(e) : 0;
    std::string help = program;
    for (const CLI::App* sub : app.get_subcommands()) help += " " + sub->get_name();
    if (rank == 0) fmt::print(stderr, "{}: error: {}; see `{} --help`\n", program, e.what(), help);
    return 1;
  }
}

// Validator for a number >= `lo` (CLI11's ranges print their bounds as
// 1.797693e+308 and the like): "--batch: must be a number >= 1, not 0".
inline CLI::Validator at_least(double lo) {
  std::ostringstream name;
  name << ">= " << lo;
  return CLI::Validator(
      [lo](std::string& in) {
        std::istringstream is(in);
        double v = 0;
        if (!(is >> v) || !is.eof() || !(v >= lo)) {
          std::ostringstream msg;
          msg << "must be a number >= " << lo << ", not " << in;
          return msg.str();
        }
        return std::string();
      },
      name.str());
}

inline void print_error(int rank, const std::string& program, const std::string& what) {
  if (rank == 0) {
    fmt::print(stderr, "{}: error: {}\n", program, what);
    std::fflush(stderr);
  }
}

}  // namespace exa::driver
