#pragma once

// The CPU backend: Eigen for plain GEMMs, hand-written AVX2 micro-kernels
// for convolutions, OpenMP over tiles of images.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/backend.hpp"

namespace syncfac::cpu {

/// Buffers reused across calls so that steady-state steps allocate nothing.
struct conv_workspace {
  std::vector<float> w_packed;     // [K, opad], zero columns past out_c
  std::vector<float> w_transposed; // [out_c, K + pad], scattered input grad
  std::vector<float> w_flipped;    // [kh, kw, out_c, cpad], dx as a conv
  std::vector<float> bias;         // [opad]
  std::vector<float> zero_bias;    // [cpad]
  std::vector<int64_t> row_offsets;    // one tile's output rows -> first tap
  std::vector<int64_t> dx_row_offsets; // the same for dx as a conv
  std::vector<int64_t> tap_offsets; // patch index k -> offset from first tap
  std::vector<float> dw_partials;   // [chunks, K, opad], or Winograd's
                                    // dU [chunks, alpha^2, cpad, opad]
  std::vector<float> db_partials;   // [chunks, opad]
  std::vector<std::vector<float>> padded;  // per thread: padded x tile
  std::vector<std::vector<float>> dpadded; // per thread: padded dx or ds
  std::vector<float> winograd_u;    // [alpha^2, cpad, opad] (winograd.hpp)
  std::vector<float> winograd_bias; // [opad]
  std::vector<double> winograd_du_sum; // the dU partials' sum (winograd.hpp)
  std::vector<std::vector<float>> winograd_scratch; // per thread: V and M
};

/// Called on a conv's thread once the images [first, first + count) of
/// its output are written, while they are in cache (conv2d.cpp; the
/// pool of conv2d_max_pool_forward).
using images_done = std::function<void(int64_t first, int64_t count)>;

class cpu_backend final : public backend {
public:
  explicit cpu_backend(int threads);

  std::string name() const override;
  int threads() const override;

  /// The parts on up to threads() OpenMP threads (parallel.hpp's
  /// parallel_for), fewer where the elements are too few to pay for them.
  void run_host_parts(int64_t parts, int64_t elements,
                      const std::function<void(int64_t)>& f) override;

  caf::error gemm(const tensor& a, bool trans_a, const tensor& b,
                  bool trans_b, float alpha, float beta,
                  tensor& c) override;

  caf::error gemm_batched(const tensor& a, bool trans_a, const tensor& b,
                          bool trans_b, float alpha, float beta,
                          tensor& c) override;

  caf::error dense_forward(const tensor& x, const tensor& w, const tensor& b,
                           activation act, tensor& y) override;

  caf::error dense_backward(const tensor& x, const tensor& w,
                            const tensor& y, const tensor& dy,
                            activation act, tensor& ds, tensor& dw,
                            tensor& db, tensor* dx) override;

  caf::error conv2d_forward(const conv2d_geometry& g, const tensor& x,
                            const tensor& w, const tensor& b, activation act,
                            tensor& y) override;

  caf::error conv2d_backward(const conv2d_geometry& g, const tensor& x,
                             const tensor& w, const tensor& y,
                             const tensor& dy, activation act, tensor& ds,
                             tensor& dw, tensor& db, tensor* dx) override;

  caf::error conv2d_backward_data(const conv2d_geometry& g, const tensor& x,
                                  const tensor& w, const tensor& y,
                                  const tensor& dy, activation act,
                                  tensor& ds, tensor* dx) override;

  caf::error conv2d_backward_from_ds(const conv2d_geometry& g,
                                     const tensor& x, const tensor& w,
                                     const tensor& ds, tensor& dw,
                                     tensor& db, tensor* dx) override;

  caf::error conv2d_backward_data_from_ds(const conv2d_geometry& g,
                                          const tensor& x, const tensor& w,
                                          const tensor& ds,
                                          tensor* dx) override;

  caf::error activation_forward(activation act, const tensor& x,
                                tensor& y) override;

  caf::error activation_backward(activation act, const tensor& y,
                                 const tensor& dy, tensor& dx) override;

  caf::error max_pool_forward(const pool2d_geometry& g, const tensor& x,
                              tensor& y,
                              std::vector<int32_t>& argmax) override;

  caf::error conv2d_max_pool_forward(const conv2d_geometry& conv,
                                     const tensor& x, const tensor& w,
                                     const tensor& b, activation act,
                                     const pool2d_geometry& pool,
                                     tensor& conv_y, tensor& pooled,
                                     std::vector<int32_t>& argmax) override;

  caf::error max_pool_backward(const pool2d_geometry& g, const tensor& dy,
                               const std::vector<int32_t>& argmax,
                               tensor& dx) override;

  caf::error max_pool_backward_activated(const pool2d_geometry& g,
                                         const tensor& dy,
                                         const std::vector<int32_t>& argmax,
                                         const tensor& pooled_y,
                                         activation act,
                                         tensor& ds) override;

  bool fuses_pool_activation() const noexcept override {
    return true;
  }

  caf::error softmax_xent_forward(const tensor& logits,
                                  const label_vector& labels, tensor& probs,
                                  float& loss) override;

  caf::error softmax_xent_backward(const tensor& probs,
                                   const label_vector& labels,
                                   tensor& dlogits) override;

  caf::error sigmoid_xent_forward(const tensor& logits,
                                  const tensor& targets, tensor& probs,
                                  float& loss) override;

  caf::error sigmoid_xent_backward(const tensor& probs,
                                   const tensor& targets,
                                   tensor& dlogits) override;

  caf::expected<int64_t> count_correct(const tensor& logits,
                                       const label_vector& labels) override;

private:
  /// conv2d_forward's work after its checks, y sized; then `done` per tile
  /// of images where it is set.
  void conv2d_forward_tiles(const conv2d_geometry& g, const tensor& x,
                            const tensor& w, const tensor& b, activation act,
                            tensor& y, const images_done& done);

  /// ec::invalid_argument unless every image's argmax lies in that image.
  caf::error check_images(const char* op, const pool2d_geometry& g,
                          const std::vector<int32_t>& argmax);

  int threads_;
  conv_workspace conv_;
  tensor alias_a_; // copies of gemm inputs that alias the output
  tensor alias_b_;
  std::vector<double> row_losses_;
  std::vector<int64_t> bad_pool_index_; // per image, -1 when all fit
  // Per thread, one image's sums of the pooled gradient, all zero between
  // calls (max_pool_backward_activated, tanh and sigmoid).
  std::vector<std::vector<float>> pool_sums_;
};

} // namespace syncfac::cpu
