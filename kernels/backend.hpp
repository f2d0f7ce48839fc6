#pragma once

// The device-agnostic kernel interface. A backend owns one compute device
// (the CPU via Eigen, or later one CUDA device) and is driven by exactly one
// device actor, so implementations need not be thread-safe.
//
// Conventions:
// - Tensors are row-major float32; images are NHWC; a dense weight is
//   [in, out]; a conv kernel is [kh, kw, in_c, out_c] (TensorFlow's HWIO), so
//   an im2col patch ordered (kh, kw, c) times the kernel viewed as
//   [kh*kw*in_c, out_c] is the convolution.
// - Outputs are resized by the kernel; their storage is reused across calls.
// - Layers with parameters fuse their activation: forward computes
//   y = act(s) with s the pre-activation; backward takes the post-activation
//   output y and dy = dL/dy and also returns ds = dL/ds, which K-FAC needs
//   (the derivatives of identity, relu, tanh and sigmoid are all functions
//   of y, so s is never stored).
// - A shape that does not fit is an error of code ec::shape_mismatch whose
//   context names both shapes; nothing is written then.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/geometry.hpp"
#include "kernels/tensor.hpp"

namespace syncfac {

enum class activation : uint8_t { identity, relu, tanh, sigmoid };

const char* to_string(activation x) noexcept;

/// Parses "identity" (or "linear"), "relu", "tanh", "sigmoid".
caf::expected<activation> parse_activation(const std::string& str);

using label_vector = std::vector<int32_t>;

class backend {
public:
  virtual ~backend() = default;

  /// "cpu", "cuda:0", ...
  virtual std::string name() const = 0;

  /// Worker threads (CPU) or streams (GPU) this backend uses.
  virtual int threads() const = 0;

  /// Runs f(i) once for every i < parts, in any order, on any of the
  /// host threads this backend has: the host loops of the defaults below
  /// (batch norm, add) over their chunks (kernels/host_chunks.hpp), which
  /// make a result the same bits whatever the order. `elements` is the
  /// floats all the parts hold together, so that work too small to pay
  /// for waking a thread stays on the calling one. The default runs the
  /// parts in order on the calling thread. f must not throw.
  virtual void run_host_parts(int64_t parts, int64_t elements,
                              const std::function<void(int64_t)>& f);

  /// c = alpha * op(a) * op(b) + beta * c for rank-2 a, b, c; with beta == 0
  /// c is resized and need not be initialised.
  virtual caf::error gemm(const tensor& a, bool trans_a, const tensor& b,
                          bool trans_b, float alpha, float beta, tensor& c)
    = 0;

  /// c[i] = alpha * op(a[i]) * op(b[i]) + beta * c[i] for i in [0, batch):
  /// a is [batch, rows, cols] and c [batch, m, n]; b is either
  /// [batch, rows, cols] or one rank-2 matrix shared by every entry (towers
  /// or layers sharing weights). With beta == 0 c is resized and need not
  /// be initialised; errors as gemm's, naming the operand that does not fit.
  virtual caf::error gemm_batched(const tensor& a, bool trans_a,
                                  const tensor& b, bool trans_b, float alpha,
                                  float beta, tensor& c)
    = 0;

  /// y = act(x w + b): x [N, in], w [in, out], b [out] -> y [N, out].
  virtual caf::error dense_forward(const tensor& x, const tensor& w,
                                   const tensor& b, activation act, tensor& y)
    = 0;

  /// Gradients of dense_forward: ds = dy * act'(y) [N, out],
  /// dw = x^T ds, db = sum_n ds, and dx = ds w^T unless dx is null.
  virtual caf::error dense_backward(const tensor& x, const tensor& w,
                                    const tensor& y, const tensor& dy,
                                    activation act, tensor& ds, tensor& dw,
                                    tensor& db, tensor* dx)
    = 0;

  /// y = act(conv(x, w) + b): x [N, H, W, C], w [kh, kw, C, O], b [O].
  virtual caf::error conv2d_forward(const conv2d_geometry& g, const tensor& x,
                                    const tensor& w, const tensor& b,
                                    activation act, tensor& y)
    = 0;

  /// Gradients of conv2d_forward; ds has y's shape; dx is skipped when null
  /// (a first layer needs no input gradient).
  virtual caf::error conv2d_backward(const conv2d_geometry& g, const tensor& x,
                                     const tensor& w, const tensor& y,
                                     const tensor& dy, activation act,
                                     tensor& ds, tensor& dw, tensor& db,
                                     tensor* dx)
    = 0;

  /// conv2d_backward without the weight and bias gradients: only ds and,
  /// unless dx is null, dx (K-FAC's statistics pass needs no parameter
  /// gradients). The default runs conv2d_backward into scratch tensors.
  virtual caf::error conv2d_backward_data(const conv2d_geometry& g,
                                          const tensor& x, const tensor& w,
                                          const tensor& y, const tensor& dy,
                                          activation act, tensor& ds,
                                          tensor* dx) {
    tensor dw;
    tensor db;
    return conv2d_backward(g, x, w, y, dy, act, ds, dw, db, dx);
  }

  /// conv2d_backward from a pre-activation gradient ds (y's shape) that
  /// is given rather than computed from y and dy: dw, db and, unless dx is
  /// null, dx, the same bits conv2d_backward gives for that ds. The layer
  /// whose output goes straight into a max_pool gets ds from the pool
  /// (max_pool_backward_activated), so no activation pass runs here. The
  /// default runs conv2d_backward with the identity on ds.
  virtual caf::error conv2d_backward_from_ds(const conv2d_geometry& g,
                                             const tensor& x, const tensor& w,
                                             const tensor& ds, tensor& dw,
                                             tensor& db, tensor* dx);

  /// conv2d_backward_data from a given ds: only dx (nothing to compute
  /// when dx is null; the shapes are still checked). K-FAC's statistics
  /// pass through a conv2d layer whose max_pool wrote ds.
  virtual caf::error conv2d_backward_data_from_ds(const conv2d_geometry& g,
                                                  const tensor& x,
                                                  const tensor& w,
                                                  const tensor& ds,
                                                  tensor* dx);

  /// Elementwise y = act(x).
  virtual caf::error activation_forward(activation act, const tensor& x,
                                        tensor& y)
    = 0;

  /// Elementwise dx = dy * act'(y), from the forward output y.
  virtual caf::error activation_backward(activation act, const tensor& y,
                                         const tensor& dy, tensor& dx)
    = 0;

  /// Max-pooling; argmax receives, per output element, the flat index into
  /// x of the winning input (padding never wins).
  virtual caf::error max_pool_forward(const pool2d_geometry& g,
                                      const tensor& x, tensor& y,
                                      std::vector<int32_t>& argmax)
    = 0;

  /// conv2d_forward into conv_y, then max_pool_forward of conv_y into
  /// pooled and argmax (pool's input shape must be conv's output shape):
  /// the same values. The model runs a conv and the max_pool after it so
  /// where the pool is all the conv's output feeds; a backend may pool
  /// each tile of images while the conv's output is still in cache (the
  /// CPU's), where the default runs the two ops one after the other.
  virtual caf::error conv2d_max_pool_forward(
    const conv2d_geometry& conv, const tensor& x, const tensor& w,
    const tensor& b, activation act, const pool2d_geometry& pool,
    tensor& conv_y, tensor& pooled, std::vector<int32_t>& argmax);

  /// dx = scatter of dy to the argmax positions (dx has g's input shape).
  virtual caf::error max_pool_backward(const pool2d_geometry& g,
                                       const tensor& dy,
                                       const std::vector<int32_t>& argmax,
                                       tensor& dx)
    = 0;

  /// max_pool_backward through the activation of the layer before the
  /// pool: ds = dL/ds of that layer's pre-activation (g's input shape),
  /// zero except at the argmax positions, where ds = act'(y) * (the sum of
  /// dy over the outputs that position won). The input y there is the
  /// pool's output pooled_y (the winner IS that value), so neither y nor
  /// the scattered dL/dy of the input is read or written. For y in the
  /// activation's range these are the bits of max_pool_backward followed
  /// by activation_backward on the pool's input (the same sums in the same
  /// order, the same formula of y), also where windows overlap; only a NaN
  /// or Inf in a losing position, which the composition spreads, stays
  /// out. Errors as max_pool_backward's, and pooled_y must have g's output
  /// shape. The default composes the two from max_pool_backward and
  /// activation_backward: for relu the scatter of pooled_y gives y's sign
  /// (on a GPU, on the device); tanh and sigmoid rebuild the pool's input
  /// from pooled_y on the host.
  virtual caf::error
  max_pool_backward_activated(const pool2d_geometry& g, const tensor& dy,
                              const std::vector<int32_t>& argmax,
                              const tensor& pooled_y, activation act,
                              tensor& ds);

  /// Whether max_pool_backward_activated and the conv2d backward from ds
  /// are this backend's own kernels. The model runs a conv and its pool
  /// fused only then: the defaults above compose the plain kernels with
  /// more passes than the two layers make apart (a GPU would read the
  /// pooled values back to the host for tanh and sigmoid).
  virtual bool fuses_pool_activation() const noexcept {
    return false;
  }

  /// Mean softmax cross-entropy of logits [N, K] against labels in [0, K);
  /// probs receives softmax(logits). A label out of range is
  /// ec::invalid_argument naming the index and the value.
  virtual caf::error softmax_xent_forward(const tensor& logits,
                                          const label_vector& labels,
                                          tensor& probs, float& loss)
    = 0;

  /// dlogits = (probs - onehot(labels)) / N.
  virtual caf::error softmax_xent_backward(const tensor& probs,
                                           const label_vector& labels,
                                           tensor& dlogits)
    = 0;

  /// Mean over the N rows of logits [N, D] of the per-row sum of sigmoid
  /// cross-entropies against targets [N, D] in [0, 1] (the Bernoulli
  /// negative log-likelihood): loss = (1/N) sum_n sum_d
  /// max(x, 0) - x t + log1p(exp(-|x|)), exact for any finite logit;
  /// probs receives sigmoid(logits). Shapes must match (rank 2).
  virtual caf::error sigmoid_xent_forward(const tensor& logits,
                                          const tensor& targets,
                                          tensor& probs, float& loss)
    = 0;

  /// dlogits = (probs - targets) / N, the gradient of the forward's loss.
  virtual caf::error sigmoid_xent_backward(const tensor& probs,
                                           const tensor& targets,
                                           tensor& dlogits)
    = 0;

  /// Number of rows whose arg-max logit equals the label.
  virtual caf::expected<int64_t> count_correct(const tensor& logits,
                                               const label_vector& labels)
    = 0;

  /// Keeps x's values on this backend's device from now on: a GPU backend
  /// copies them there unless its copy is already current, so that the
  /// kernels reading x (a parameter: the forward and the backward pass) find
  /// them there; host code changing x later makes the copy stale again. The
  /// CPU backend has nothing to do.
  virtual caf::error make_resident(tensor& x) {
    (void) x;
    return caf::none;
  }

  /// y = act(xs[0] + xs[1] + ...), summed in that order: two or more
  /// tensors of one shape (a residual connection's add layer; y may be
  /// one of them). The default runs on the host values (any backend: a
  /// tensor's host values are current when read), the activation on each
  /// chunk while it is in cache, over run_host_parts.
  virtual caf::error add_forward(const std::vector<const tensor*>& xs,
                                 activation act, tensor& y);

  /// dx = act'(y) * (dys[0] + dys[1] + ...), the sum taken in that order:
  /// the gradient of an activation's output y arriving as shares from its
  /// consumers (the add that ends a residual block, whose output feeds the
  /// next block's conv and its identity path), summed and multiplied in
  /// one pass (dx may be one of dys). One share is activation_backward
  /// (the device's kernel); two or more run on the host values as
  /// add_forward's default does.
  virtual caf::error activation_backward_sum(
    activation act, const tensor& y, const std::vector<const tensor*>& dys,
    tensor& dx);

  /// y = xs side by side along their last axis (a concat layer): every
  /// other axis equal, y's last one the sum of theirs. Default on the host.
  virtual caf::error concat_forward(const std::vector<const tensor*>& xs,
                                    tensor& y);

  /// concat_forward's gradient: dxs[k] (of shapes[k], skipped when null)
  /// = the part of dy that input k gave. Default on the host.
  virtual caf::error concat_backward(const tensor& dy,
                                     const std::vector<tensor_shape>& shapes,
                                     const std::vector<tensor*>& dxs);

  /// Average pooling as TF's: each output is the mean of its window's
  /// inputs inside the image (SAME padding's positions are not counted).
  /// Default on the host (kernels/average_pool.cpp).
  virtual caf::error avg_pool_forward(const pool2d_geometry& g,
                                      const tensor& x, tensor& y);

  /// avg_pool_forward's gradient: each output's dy shared evenly by the
  /// inputs its mean counted; dx has g's input shape.
  virtual caf::error avg_pool_backward(const pool2d_geometry& g,
                                       const tensor& dy, tensor& dx);

  /// Per channel (x's last axis, C), over every other position of x: the
  /// mean and the biased variance (divided by the count), each [C],
  /// accumulated in double. Default on the host (kernels/batch_norm.cpp).
  virtual caf::error batch_norm_statistics(const tensor& x, tensor& mean,
                                           tensor& variance);

  /// y = act(gamma (x - mean) inv_std + beta) per channel (x's last axis;
  /// gamma, beta, mean and inv_std [C]). Training passes the batch's
  /// statistics, evaluation the moving ones.
  virtual caf::error batch_norm_forward(const tensor& x, const tensor& gamma,
                                        const tensor& beta,
                                        const tensor& mean,
                                        const tensor& inv_std, activation act,
                                        tensor& y);

  /// Gradients of a training batch_norm_forward (mean and inv_std the
  /// batch's own, so they depend on x): with ds = dy act'(y) and x̂ = (x -
  /// mean) inv_std, dgamma = sum ds x̂, dbeta = sum ds and, unless dx is
  /// null, dx = gamma inv_std / M (M ds - dbeta - x̂ dgamma), M the
  /// positions per channel. scratch is the caller's, kept between calls,
  /// where a backend keeps ds whole (the host default does so unless act
  /// is the identity, where ds is dy); what it holds afterwards is the
  /// backend's.
  virtual caf::error batch_norm_backward(const tensor& x, const tensor& gamma,
                                         const tensor& mean,
                                         const tensor& inv_std,
                                         const tensor& y, const tensor& dy,
                                         activation act, tensor& scratch,
                                         tensor& dgamma, tensor& dbeta,
                                         tensor* dx);

  /// y = x * m elementwise, one shape (dropout's mask). Default on the
  /// host.
  virtual caf::error multiply(const tensor& x, const tensor& m, tensor& y);

  /// y = x with `shape` (the same element count), copied where x's current
  /// values are: a flatten layer's output stays on the device.
  virtual caf::error reshape_copy(const tensor& x, const tensor_shape& shape,
                                  tensor& y);
};

/// The CPU (Eigen) backend using `threads` threads (>= 1). A device by
/// its --device name, the CUDA one included, comes from
/// make_device_backend (kernels/backend_factory.hpp).
std::unique_ptr<backend> make_cpu_backend(int threads);

} // namespace syncfac
