// CudaGraphCache: capture on the second sight of a shape, replay afterwards (see cuda_graphs.h).
#include "engine/backend/cuda/cuda_graphs.h"

#include <cuda_runtime.h>

#include "kernels/cuda/common.cuh"

namespace pagoda {
namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaGraphExec_t as_exec(void* e) { return static_cast<cudaGraphExec_t>(e); }

}  // namespace

CudaGraphCache::CudaGraphCache(void* stream, size_t max_graphs) : stream_(stream), max_graphs_(max_graphs) {}

CudaGraphCache::~CudaGraphCache() {
  abort();
  for (auto& [key, g] : graphs_) cudaGraphExecDestroy(as_exec(g.exec));
}

bool CudaGraphCache::begin(const CudaGraphKey& key, const CudaGraphBuffers& buffers) {
  abort();  // a capture left open by an exception
  auto it = graphs_.find(key);
  if (it != graphs_.end()) {
    if (it->second.buffers == buffers) {
      CUDA_CHECK(cudaGraphLaunch(as_exec(it->second.exec), as_stream(stream_)));
      ++stats_.replays;
      return true;
    }
    // A buffer moved (it grew for a bigger step): the graph points at freed memory.
    CUDA_CHECK(cudaGraphExecDestroy(as_exec(it->second.exec)));
    graphs_.erase(it);
  }
  // First sight: run eagerly, which sizes every scratch buffer, so nothing grows (and
  // synchronises, which a capture forbids) while capturing.
  if (seen_.insert(key).second || graphs_.size() >= max_graphs_) return false;
  CUDA_CHECK(cudaStreamBeginCapture(as_stream(stream_), cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  capture_key_ = key;
  capture_buffers_ = buffers;
  return false;
}

void CudaGraphCache::end() {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(as_stream(stream_), &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(inst);
  graphs_[capture_key_] = Graph{exec, capture_buffers_};
  ++stats_.captures;
  CUDA_CHECK(cudaGraphLaunch(exec, as_stream(stream_)));
}

void CudaGraphCache::abort() noexcept {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(as_stream(stream_), &graph);
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();  // clear the capture's sticky error, if any
}

void CudaGraphCache::clear() {
  abort();
  for (auto& [key, g] : graphs_) CUDA_CHECK(cudaGraphExecDestroy(as_exec(g.exec)));
  graphs_.clear();
}

CudaGraphStats CudaGraphCache::stats() const {
  CudaGraphStats s = stats_;
  s.graphs = static_cast<int64_t>(graphs_.size());
  return s;
}

}  // namespace pagoda
