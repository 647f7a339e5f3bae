// --device selection (engine/backend_select.h): names, the CPU backend, auto's fallback, and a
// clear error when CUDA is asked for where it cannot run.
#include <catch2/catch.hpp>

#include "engine/backend/cuda/backend_cuda.h"
#include "engine/backend/backend_select.h"

using namespace pagoda;

TEST_CASE("select_backend: unknown device names are refused", "[backend_select]") {
  CHECK_THROWS_WITH(select_backend(BackendChoice{"tpu", 1, false}), Catch::Contains("cpu, cuda or auto"));
  CHECK_THROWS_WITH(select_backend(BackendChoice{"", 1, false}), Catch::Contains("cpu, cuda or auto"));
}

TEST_CASE("select_backend: cpu gives the CPU backend with its threads", "[backend_select]") {
  BackendSelection s = select_backend(BackendChoice{"cpu", 2, false});
  REQUIRE(s.backend);
  CHECK(s.backend->name() == "cpu");
  CHECK(s.description == "cpu (2 threads)");
  CHECK(s.fallback_reason.empty());
}

TEST_CASE("select_backend: auto and cuda follow cuda_available", "[backend_select]") {
  std::string why;
  const bool have_cuda = cuda_available(&why);
  BackendSelection s = select_backend(BackendChoice{"auto", 1, false});
  REQUIRE(s.backend);
  if (have_cuda) {
    CHECK(s.backend->name() == "cuda");
    CHECK(s.fallback_reason.empty());
    CHECK(select_backend(BackendChoice{"cuda", 1, false}).backend->name() == "cuda");
  } else {
    // No device here: auto falls back and says why; cuda is an error carrying the same reason.
    CHECK(s.backend->name() == "cpu");
    CHECK(s.fallback_reason == why);
    CHECK_FALSE(why.empty());
    CHECK_THROWS(select_backend(BackendChoice{"cuda", 1, false}));
  }
}

TEST_CASE("--cuda-weights names the CUDA weight mode", "[backend_select]") {
  CHECK(parse_cuda_weights("quantized", "--cuda-weights") == CudaWeights::Quantized);
  CHECK(parse_cuda_weights("bf16", "--cuda-weights") == CudaWeights::Bf16);
  CHECK(parse_cuda_weights("quantized-f32", "--cuda-weights") == CudaWeights::QuantizedF32);
  CHECK_THROWS_WITH(parse_cuda_weights("q4", "--cuda-weights"), Catch::Contains("quantized, quantized-f32 or bf16"));
  CHECK(BackendChoice{}.cuda_weights == "quantized");
  CHECK(CudaBackendOptions{}.weights == CudaWeights::Quantized);
}

TEST_CASE("--cuda-quant-gemm names the GEMM of quantized weights over more than 8 rows", "[backend_select]") {
  CHECK(parse_quant_gemm("mma", "--cuda-quant-gemm") == QuantGemm::Mma);
  CHECK(parse_quant_gemm("cublas", "--cuda-quant-gemm") == QuantGemm::DequantCublas);
  CHECK_THROWS_WITH(parse_quant_gemm("scratch", "--cuda-quant-gemm"), Catch::Contains("mma or cublas"));
  CHECK(BackendChoice{}.cuda_quant_gemm == "mma");
  CHECK(CudaBackendOptions{}.quant_gemm == QuantGemm::Mma);
}

TEST_CASE("--cuda-batch-invariant is off unless asked for", "[backend_select]") {
  CHECK_FALSE(BackendChoice{}.cuda_batch_invariant);
  CHECK_FALSE(CudaBackendOptions{}.batch_invariant);
}

TEST_CASE("--cuda-prefill-attention names the kernel of prefill chunks' attention", "[backend_select]") {
  CHECK(parse_prefill_attention("mma", "--cuda-prefill-attention") == PrefillAttention::Mma);
  CHECK(parse_prefill_attention("exact", "--cuda-prefill-attention") == PrefillAttention::Exact);
  CHECK_THROWS_WITH(parse_prefill_attention("flash", "--cuda-prefill-attention"), Catch::Contains("mma or exact"));
  CHECK(BackendChoice{}.cuda_prefill_attention == "mma");
  CHECK(CudaBackendOptions{}.prefill_attention == PrefillAttention::Mma);
}
