// A bench report's JSON written and read back: the raw per-request timings travel with the
// summaries, so `pagoda bench report A.json B.json` redraws every figure (CDFs, time series,
// goodput under a new --slo) from two runs made apart, as --compare draws one run.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/bench/report.h"

namespace pagoda::bench {

nlohmann::json run_to_json(const RunResult& run);
// Throws std::invalid_argument naming the field that is missing or of the wrong type.
RunResult run_from_json(const nlohmann::json& j);
// The objectives as data ({"metric": "ttft", "percentile": 90, "limit_s": 0.5}), read back exactly.
nlohmann::json slo_objectives_json(const std::vector<SloObjective>& slo);

// The report `pagoda bench --json` wrote, with its points and goodput recomputed from the raw
// requests (under `slo` when given, else under the SLO the file was made with). Throws
// std::invalid_argument when the file predates raw timings or is not a bench report.
BenchReport report_from_json(const nlohmann::json& j, const std::vector<SloObjective>* slo = nullptr);

// Two single-server reports side by side: A's target first, B's second, as --compare makes
// them. Throws std::invalid_argument when either is already a comparison or their sweeps differ
// in kind; notes in the metadata where their workloads differ.
BenchReport merge_reports(const BenchReport& a, const std::string& a_name, const BenchReport& b,
                          const std::string& b_name);

}  // namespace pagoda::bench
