#pragma once

// The layers a model is built from. A layer remembers, between forward and
// backward, exactly what its backward pass and K-FAC need: its input and
// its output (layers with parameters fuse their activation, see
// kernels/backend.hpp) and, after backward, the pre-activation gradient.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/backend.hpp"
#include "runtime/named_tensor.hpp"

namespace syncfac {

enum class layer_kind : uint8_t { dense, conv2d };

/// What the forward passes to come are for, as the model tells every
/// layer before one: training (batch_norm normalises by the batch's own
/// statistics, dropout zeroes inputs) or evaluation (the moving
/// statistics; dropout passes everything).
struct pass_mode {
  bool training = true;
  /// Where dropout's masks come from: one value per layer and pass
  /// (model::set_noise_seed), so a batch's masks are the same on every
  /// run that draws that batch (a resumed run included).
  uint64_t noise_seed = 0;
};

/// What K-FAC needs of a layer with parameters, valid after a forward and
/// backward pass and until the next one, and while the output gradient
/// given to that backward lives: a layer without activation shows it as
/// its dL/ds instead of a copy.
struct kfac_view {
  std::string layer;
  layer_kind kind = layer_kind::dense;
  /// The layer's input: [N, in] for dense, [N, H, W, C] for conv2d.
  const tensor* input = nullptr;
  /// dL/ds with s the pre-activation, for the mean loss of the batch:
  /// [N, out] or [N, out_h, out_w, out_c].
  const tensor* preactivation_grad = nullptr;
  /// Convolution geometry (conv2d only).
  conv2d_geometry geometry;
  std::string weight_name;
  std::string bias_name;
};

class layer {
public:
  virtual ~layer() = default;

  const std::string& name() const noexcept {
    return name_;
  }

  /// Shape of the output for `input`, or an error naming both shapes.
  virtual caf::expected<tensor_shape>
  output_shape(const tensor_shape& input) const = 0;

  /// Parameters this layer owns, zero-initialised (init comes later).
  virtual parameter_set make_parameters() const {
    return {};
  }

  /// Whether make_parameters() gives the starting values (batch_norm's
  /// ones and zeros) rather than shapes for the model's init scheme.
  virtual bool parameters_start_as_made() const {
    return false;
  }

  /// Sets what the forward passes from now on are for.
  virtual void begin_pass(const pass_mode& mode) {
    (void) mode;
  }

  /// Points the layer at its parameters and gradients: the entries of the
  /// model's sets starting at `params` / `grads`, in make_parameters()
  /// order (stable for the model's lifetime).
  virtual void bind(named_tensor* /*params*/, named_tensor* /*grads*/) {
  }

  /// Computes output() from x; keeps a pointer to x until backward.
  virtual caf::error forward(backend& dev, const tensor& x) = 0;

  virtual const tensor& output() const noexcept = 0;

  /// From dy = dL/d(output) computes parameter gradients and, unless dx is
  /// null, dx = dL/d(input).
  virtual caf::error backward(backend& dev, const tensor& dy, tensor* dx) = 0;

  /// backward() without parameter gradients (K-FAC's statistics pass):
  /// the pre-activation gradient of a layer with parameters and, unless dx
  /// is null, dx; the parameter gradients keep their values.
  virtual caf::error backward_data(backend& dev, const tensor& dy,
                                   tensor* dx) {
    return backward(dev, dy, dx);
  }

  /// Leaves the state forward(dev, x) would leave, taken from `source` (a
  /// layer of the same kind and configuration in another replica, with
  /// the same parameters) for the first n examples of the batch its last
  /// forward ran on; x holds those n examples of source's input and, as
  /// in forward, must outlive the next backward. Copies, computes nothing.
  virtual caf::error adopt_prefix(const layer& source, const tensor& x,
                                  int64_t n)
    = 0;

  /// The K-FAC view of a layer with parameters.
  virtual std::optional<kfac_view> kfac() const {
    return std::nullopt;
  }

  /// A layer whose one parameter gets sparse gradients (embedding_bag):
  /// the rows its last backward touched, increasing; null otherwise.
  virtual const std::vector<int64_t>* sparse_rows() const {
    return nullptr;
  }

  /// The name of that parameter (empty for other layers), without making
  /// the parameter: make_parameters() of a 262,144 x 32 table allocates
  /// 33.5 MB, which sparse_gradient_rows() once did on every step.
  virtual std::string sparse_variable() const {
    return {};
  }

protected:
  explicit layer(std::string name) : name_(std::move(name)) {
  }

private:
  std::string name_;
};

using layer_ptr = std::unique_ptr<layer>;

/// A layer of several inputs (add, concat), in the order the description
/// names them. The one-input entry points refuse: the model calls these.
class merge_layer : public layer {
public:
  /// The output shape for inputs of `inputs`, or an error naming them.
  virtual caf::expected<tensor_shape>
  merged_shape(const std::vector<tensor_shape>& inputs) const = 0;

  /// Computes output() from xs.
  virtual caf::error forward_all(backend& dev,
                                 const std::vector<const tensor*>& xs)
    = 0;

  /// From dy = dL/d(output), dxs[k] = dL/d(input k), skipped when null.
  virtual caf::error backward_all(backend& dev, const tensor& dy,
                                  const std::vector<tensor*>& dxs)
    = 0;

  /// Whether every input's gradient is the same tensor (add's is): the
  /// model then has backward_all make it for one input only.
  virtual bool gradient_is_shared() const {
    return false;
  }

  /// Whether backward_shares takes dL/d(output) as the shares its
  /// consumers gave (the output feeds several layers, as a residual
  /// block's add does) and adds them in its own pass; otherwise the
  /// model sums them first and calls backward_all.
  virtual bool sums_gradient_shares() const {
    return false;
  }

  /// backward_all with dy = dys[0] + dys[1] + ..., summed in that order
  /// (one or more of dy's shape); only where sums_gradient_shares().
  virtual caf::error backward_shares(backend& dev,
                                     const std::vector<const tensor*>& dys,
                                     const std::vector<tensor*>& dxs);

  caf::expected<tensor_shape>
  output_shape(const tensor_shape& input) const override;
  caf::error forward(backend& dev, const tensor& x) override;
  caf::error backward(backend& dev, const tensor& dy, tensor* dx) override;

protected:
  using layer::layer;
};

/// Whether the forward and backward passes of `producer` followed by
/// `pool` run fused (forward_through_pool, backward_through_pool):
/// producer is a conv2d layer and pool a max_pool layer right after it,
/// so the conv's output goes only into the pool, and
/// the pool's backward writes the conv's pre-activation gradient directly
/// (backend::max_pool_backward_activated) instead of dL/d(conv output),
/// which the conv would then read again with its output to apply the
/// activation's derivative: for the ConvNet's first layer that pass alone
/// moved 19 MB a step (docs/kernels.md, "The activation gradient inside
/// max-pool's backward").
bool pool_takes_activation(const layer& producer, const layer& pool);

/// The forward pass of such a pair on x, the conv's input: both layers'
/// outputs as producer.forward then pool.forward give them, from
/// backend::conv2d_max_pool_forward, which may pool each tile of images
/// while the conv's output is still in cache (the ConvNet's first conv
/// writes 6 MB a batch, which the pool otherwise read back from memory).
caf::error forward_through_pool(backend& dev, layer& producer, layer& pool,
                                const tensor& x);

/// The backward pass of such a pair: dy = dL/d(pool output); the conv's
/// parameter gradients (without parameter_grads, as backward_data, only
/// its pre-activation gradient) and, unless dx is null, dx = dL/d(conv
/// input). The same bits as pool.backward then producer.backward.
caf::error backward_through_pool(backend& dev, layer& producer, layer& pool,
                                 const tensor& dy, tensor* dx,
                                 bool parameter_grads);

/// y = act(x w + b), weights "<name>/weights" [in, out], "<name>/bias".
layer_ptr make_dense_layer(std::string name, int64_t in, int64_t out,
                           activation act);

/// y = act(conv(x, w) + b), kernel "<name>/kernel" [k, k, in_c, out_c].
layer_ptr make_conv2d_layer(std::string name, int64_t kernel_size,
                            int64_t in_c, int64_t out_c, int64_t stride,
                            padding pad, activation act);

/// Max-pooling k x k with the given stride and padding.
layer_ptr make_max_pool_layer(std::string name, int64_t kernel_size,
                              int64_t stride, padding pad);

/// y = act(x_0 + x_1 + ...), inputs of one shape: a residual connection.
layer_ptr make_add_layer(std::string name, activation act);

/// The inputs side by side along the last axis.
layer_ptr make_concat_layer(std::string name);

/// Average pooling k x k with the given stride and padding (TF's: the
/// padding is not counted in a mean).
layer_ptr make_avg_pool_layer(std::string name, int64_t kernel_size,
                              int64_t stride, padding pad);

/// [N, H, W, C] -> [N, C]: each channel's mean over the image.
layer_ptr make_global_avg_pool_layer(std::string name);

/// y = act(gamma (x - mean) / sqrt(var + epsilon) + beta) per channel (the
/// last axis): "<name>/gamma", "<name>/beta" trained (first-order under
/// K-FAC), and "<name>/moving_mean", "<name>/moving_variance", moving
/// statistics (runtime/moving_statistic.hpp) used at evaluation.
layer_ptr make_batch_norm_layer(std::string name, int64_t channels,
                                double momentum, double epsilon,
                                activation act);

/// Training: each input zeroed with probability `rate`, the others scaled
/// by 1 / (1 - rate) (inverted dropout); evaluation: the identity.
layer_ptr make_dropout_layer(std::string name, double rate);

/// [N, ...] -> [N, prod(...)], row-major (matches TF's reshape of NHWC).
layer_ptr make_flatten_layer(std::string name);

/// [N, ...] bags of row indices (every value of an example; integers as
/// floats, negative ones padding) -> [N, width]: the sum, or with `mean`
/// the mean, of those rows of the table "<name>/embeddings" [vocabulary,
/// width] (zero for an empty bag). Its gradient touches only those rows
/// (sparse_rows); it has no input gradient and no K-FAC view.
layer_ptr make_embedding_bag_layer(std::string name, int64_t vocabulary,
                                   int64_t width, bool mean);

} // namespace syncfac
