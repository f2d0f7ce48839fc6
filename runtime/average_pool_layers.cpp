// avg_pool and global_avg_pool (runtime/layers.hpp): the kernels are the
// backend's avg_pool_forward and avg_pool_backward; the global pool is
// one window over the whole image, its output [N, C] as Keras's
// GlobalAveragePooling2D gives.

#include "runtime/base/error.hpp"
#include "runtime/layer_prefix.hpp"
#include "runtime/layers.hpp"
#include "runtime/pool_window.hpp"

namespace syncfac {

namespace {

class avg_pool_layer : public layer {
public:
  avg_pool_layer(std::string name, int64_t k, int64_t stride, padding pad)
    : layer(std::move(name)), k_(k), stride_(stride), pad_(pad) {
  }

  caf::expected<tensor_shape>
  output_shape(const tensor_shape& input) const override {
    auto g = geometry(input);
    if (!g)
      return g.error();
    return g->output_shape();
  }

  caf::error forward(backend& dev, const tensor& x) override {
    auto g = geometry(x.shape());
    if (!g)
      return g.error();
    geom_ = *g;
    return dev.avg_pool_forward(geom_, x, y_);
  }

  const tensor& output() const noexcept override {
    return y_;
  }

  caf::error backward(backend& dev, const tensor& dy, tensor* dx) override {
    if (dx == nullptr)
      return caf::none;
    return dev.avg_pool_backward(geom_, dy, *dx);
  }

  caf::error adopt_prefix(const layer& source, const tensor& x,
                          int64_t n) override {
    auto src = prefix_source<avg_pool_layer>(*this, source, x, n,
                                             source.output());
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
    return pool_window(name(), input, k_, k_, stride_, pad_);
  }

  int64_t k_;
  int64_t stride_;
  padding pad_;
  pool2d_geometry geom_;
  tensor y_;
};

class global_avg_pool_layer : public layer {
public:
  explicit global_avg_pool_layer(std::string name) : layer(std::move(name)) {
  }

  caf::expected<tensor_shape>
  output_shape(const tensor_shape& input) const override {
    if (input.size() != 4)
      return make_error(ec::shape_mismatch,
                        name() + ": input " + to_string(input)
                          + " must be an image batch [N, H, W, C]");
    return tensor_shape{input[0], input[3]};
  }

  caf::error forward(backend& dev, const tensor& x) override {
    auto shape = output_shape(x.shape());
    if (!shape)
      return shape.error();
    auto g = whole_image(x.shape());
    if (!g)
      return g.error();
    geom_ = *g;
    if (auto err = dev.avg_pool_forward(geom_, x, pooled_))
      return err;
    return dev.reshape_copy(pooled_, *shape, y_);
  }

  const tensor& output() const noexcept override {
    return y_;
  }

  caf::error backward(backend& dev, const tensor& dy, tensor* dx) override {
    if (dx == nullptr)
      return caf::none;
    if (auto err = dev.reshape_copy(dy, geom_.output_shape(), pooled_grad_))
      return with_context(err, name());
    return dev.avg_pool_backward(geom_, pooled_grad_, *dx);
  }

  caf::error adopt_prefix(const layer& source, const tensor& x,
                          int64_t n) override {
    auto src = prefix_source<global_avg_pool_layer>(*this, source, x, n,
                                                    source.output());
    if (!src)
      return src.error();
    auto g = whole_image(x.shape());
    if (!g)
      return g.error();
    geom_ = *g;
    copy_prefix((*src)->y_, n, y_);
    return caf::none;
  }

private:
  /// One window over the whole image of x [N, H, W, C].
  caf::expected<pool2d_geometry> whole_image(const tensor_shape& x) const {
    if (auto shape = output_shape(x); !shape)
      return shape.error();
    return pool_window(name(), x, x[1], x[2], 1, padding::valid);
  }

  pool2d_geometry geom_;
  tensor pooled_;
  tensor pooled_grad_;
  tensor y_;
};

} // namespace

layer_ptr make_avg_pool_layer(std::string name, int64_t kernel_size,
                              int64_t stride, padding pad) {
  return std::make_unique<avg_pool_layer>(std::move(name), kernel_size,
                                          stride, pad);
}

layer_ptr make_global_avg_pool_layer(std::string name) {
  return std::make_unique<global_avg_pool_layer>(std::move(name));
}

} // namespace syncfac
