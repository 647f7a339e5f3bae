// The hyper-parameters and tensors of a BERT encoder GGUF (general.architecture "bert", as
// llama.cpp's converter writes it): token, position and token-type embeddings with a LayerNorm,
// then post-norm layers (attention, add, LayerNorm; GELU FFN, add, LayerNorm), every matrix with
// a bias, attention over the whole input in both directions, and a pooling of the last states.
// nomic-bert ("nomic-bert") is the same frame with rotary positions (NeoX halves) instead of
// position embeddings, one fused QKV matrix, SwiGLU FFN, and no biases on the matrices.
// XLM-RoBERTa files (bge-m3) are "bert" files too (llama.cpp's converter cuts RoBERTa's position
// offset out of the table). Pooling "rank" (4) marks a cross-encoder reranker: the first token's
// state goes through its classification head (cls: dense + tanh, then cls.output: the scores).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/ggml_type.h"

namespace pagoda::gguf { class GgufFile; struct TensorInfo; }

namespace pagoda::encoder {

struct EncoderError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Pooling { Mean = 1, Cls = 2, Rank = 4 };
enum class EncoderArch { Bert, NomicBert };

// A matrix (or vector) inside the mapped file: rows x cols in ggml's row-major order.
struct WeightRef {
  GgmlType type = GgmlType::F32;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
};

// A bias absent from the file (nomic-bert) has data == nullptr.
struct BertLayer {
  WeightRef q, q_b, k, k_b, v, v_b, o, o_b, attn_norm, attn_norm_b;
  WeightRef qkv;  // nomic-bert: Q, K and V stacked [3 dim x dim]; then q, k, v are unset
  WeightRef up, up_b, gate, down, down_b, out_norm, out_norm_b;  // gate: SwiGLU (nomic-bert) only
};

struct BertConfig {
  EncoderArch arch = EncoderArch::Bert;
  std::string name;
  float rope_freq_base = 1000.0f;  // nomic-bert: <arch>.rope.freq_base; rotates every head dimension
  int n_layers = 0, dim = 0, ff_dim = 0, n_heads = 0, ctx = 0, vocab_size = 0, n_types = 0;
  float eps = 1e-12f;
  Pooling pooling = Pooling::Mean;
  WeightRef tok_embd, pos_embd, type_embd, embd_norm, embd_norm_b;
  // Pooling::Rank: cls [dim x dim] + cls_b, tanh, then cls_out [n_cls_out x dim] + cls_out_b;
  // either stage may be absent (not both). n_cls_out: the scores per input (the first is the
  // relevance).
  WeightRef cls, cls_b, cls_out, cls_out_b;
  int n_cls_out = 0;
  std::vector<BertLayer> layers;

  // True when the file's general.architecture is one this folder serves.
  static bool is_encoder(const gguf::GgufFile& file);
  // Reads keys and tensors; throws EncoderError naming the key or tensor at fault (missing,
  // wrong shape, a type the CPU matmul cannot read; norms and biases must be F32; pooling other
  // than mean, CLS and rank; rank without a classification head).
  static BertConfig from_gguf(const gguf::GgufFile& file);
};

}  // namespace pagoda::encoder
