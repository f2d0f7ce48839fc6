// avg_pool and global_avg_pool (runtime/layers.hpp): one layer whose
// window is k x k or the whole image; the kernels are the backend's
// avg_pool_forward and avg_pool_backward. The global pool's output is
// [N, C], as Keras's GlobalAveragePooling2D gives.

#include <optional>

#include "runtime/base/error.hpp"
#include "runtime/layer_prefix.hpp"
#include "runtime/layers.hpp"
#include "runtime/pool_window.hpp"

namespace syncfac {

namespace {

/// A k x k window with stride and padding, or none: the whole image.
struct pool_shape {
  int64_t k;
  int64_t stride;
  padding pad;
};

class average_pool_layer : public layer {
public:
  average_pool_layer(std::string name, std::optional<pool_shape> window)
    : layer(std::move(name)), window_(window) {
  }

  caf::expected<tensor_shape>
  output_shape(const tensor_shape& input) const override {
    auto g = geometry(input);
    if (!g)
      return g.error();
    if (window_)
      return g->output_shape();
    return tensor_shape{input[0], input[3]};
  }

  caf::error forward(backend& dev, const tensor& x) override {
    auto g = geometry(x.shape());
    if (!g)
      return g.error();
    geom_ = *g;
    if (window_)
      return dev.avg_pool_forward(geom_, x, y_);
    if (auto err = dev.avg_pool_forward(geom_, x, pooled_))
      return err;
    return dev.reshape_copy(pooled_, {x.dim(0), x.dim(3)}, y_);
  }

  const tensor& output() const noexcept override {
    return y_;
  }

  caf::error backward(backend& dev, const tensor& dy, tensor* dx) override {
    if (dx == nullptr)
      return caf::none;
    if (window_)
      return dev.avg_pool_backward(geom_, dy, *dx);
    if (auto err = dev.reshape_copy(dy, geom_.output_shape(), pooled_grad_))
      return with_context(err, name());
    return dev.avg_pool_backward(geom_, pooled_grad_, *dx);
  }

  caf::error adopt_prefix(const layer& source, const tensor& x,
                          int64_t n) override {
    auto src = prefix_source<average_pool_layer>(*this, source, x, n);
    if (!src)
      return src.error();
    auto g = geometry(x.shape());
    if (!g)
      return g.error();
    geom_ = *g;
    copy_prefix((*src)->y_, n, y_);
    return caf::none;
  }

private:
  caf::expected<pool2d_geometry> geometry(const tensor_shape& input) const {
    if (window_)
      return pool_window(name(), input, window_->k, window_->k,
                         window_->stride, window_->pad);
    if (input.size() != 4)
      return make_error(ec::shape_mismatch,
                        name() + ": input " + to_string(input)
                          + " must be an image batch [N, H, W, C]");
    return pool_window(name(), input, input[1], input[2], 1, padding::valid);
  }

  std::optional<pool_shape> window_;
  pool2d_geometry geom_;
  /// The global pool's [N, 1, 1, C] output and gradient.
  tensor pooled_;
  tensor pooled_grad_;
  tensor y_;
};

} // namespace

layer_ptr make_avg_pool_layer(std::string name, int64_t kernel_size,
                              int64_t stride, padding pad) {
  return std::make_unique<average_pool_layer>(
    std::move(name), pool_shape{kernel_size, stride, pad});
}

layer_ptr make_global_avg_pool_layer(std::string name) {
  return std::make_unique<average_pool_layer>(std::move(name), std::nullopt);
}

} // namespace syncfac
