// CudaGraphCache: CUDA graphs of the CUDA backend's decode steps and speculative verify steps,
// keyed by the step's shape (CudaBackendOptions::cuda_graphs; on by default). Compiled only
// with PAGODA_CUDA.
//
// The CUDA backend asks begin() before the ops of a step that Model marks recordable (see
// Backend::replay_recorded). A shape seen for the first time runs eagerly, which also grows
// every scratch buffer to the size the shape needs; the second time its ops are captured into
// a graph, which is instantiated and launched; from then on the graph is replayed. A graph
// reads everything that varies between steps of one shape (tokens, positions, slots, block
// tables, token trees' slot lists, draw params) from device buffers at fixed addresses; when
// one of those buffers has moved since the capture, the graph is captured again. Model pads
// plain decode steps to row buckets (Backend::recorded_rows), so the shapes seen are few;
// verify steps are keyed on their exact shape (rows, trees' sizes). At most `max_graphs` are
// kept, later shapes run eagerly.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>

namespace pagoda {

// What decides a decode step's launches and the offsets its kernels read the index buffer
// at: its sizes and the decode attention's split count. n_drawn_rows: the logit rows drawn on
// the device (the LM head's first rows; the rest stay in the logits buffer for the model to
// read back after the step). A speculative verify step adds its token trees: `tree` (the
// attention reads tree index arrays) and n_tree_slots (the trees' slot lists, sized by the
// trees' row counts alone, whatever their branching).
struct CudaGraphKey {
  int64_t n_tokens = 0, n_logit = 0, n_decode = 0, n_draws = 0, n_drawn_rows = 0, n_tree_slots = 0;
  int n_splits = 0;
  bool tree = false;
  bool greedy = false;  // every draw plain greedy: the LM head may run its fused argmax
  auto operator<=>(const CudaGraphKey&) const = default;
};

// The device buffers a recorded step uses besides weights, activations and the KV cache (which
// never move; a new KV cache drops every graph, see clear()): index arrays, GEMM input
// scratch (bf16 and int8 activations), attention workspace, draws, and the mixture-of-experts
// routing and gathered rows, the fused LM-head argmax's keys.
using CudaGraphBuffers = std::array<const void*, 11>;

// The largest row bucket of decode-step graphs (CudaBackend::recorded_rows pads a step of n <=
// this many rows to the next power of two).
constexpr int64_t kGraphBucketMax = 64;

struct CudaGraphStats {
  int64_t captures = 0;  // graphs captured (re-captures included)
  int64_t replays = 0;   // steps run by replaying a graph
  int64_t graphs = 0;    // graphs held now
};

class CudaGraphCache {
 public:
  // `stream` is the backend's cudaStream_t.
  explicit CudaGraphCache(void* stream, size_t max_graphs = 64);
  ~CudaGraphCache();
  CudaGraphCache(const CudaGraphCache&) = delete;
  CudaGraphCache& operator=(const CudaGraphCache&) = delete;

  // Before a recordable step's ops. True: a graph of this shape was launched on the stream and
  // the caller issues nothing. False: the caller issues the ops; when capturing() is then true
  // they are being captured and end() must follow them.
  bool begin(const CudaGraphKey& key, const CudaGraphBuffers& buffers);
  // Ends the capture begun by begin(), instantiates the graph and launches it (the captured
  // ops have not run yet). Throws CudaError on failure.
  void end();
  // Ends an unfinished capture (an op threw) and discards it; no-op when not capturing.
  void abort() noexcept;
  // Drops every graph (e.g. the KV cache was allocated again); shapes already seen are
  // captured on their next step.
  void clear();
  bool capturing() const { return capturing_; }
  CudaGraphStats stats() const;

 private:
  struct Graph {
    void* exec = nullptr;  // cudaGraphExec_t
    CudaGraphBuffers buffers{};
  };
  void* stream_;
  size_t max_graphs_;
  std::map<CudaGraphKey, Graph> graphs_;
  std::set<CudaGraphKey> seen_;
  bool capturing_ = false;
  CudaGraphKey capture_key_;
  CudaGraphBuffers capture_buffers_{};
  CudaGraphStats stats_;
};

}  // namespace pagoda
