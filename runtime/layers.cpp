#include "runtime/layers.hpp"

#include <algorithm>
#include <typeinfo>

#include "runtime/base/error.hpp"
#include "runtime/layer_prefix.hpp"
#include "runtime/pool_window.hpp"

namespace syncfac {

namespace {

/// A layer with a weight and a bias and a fused activation: what dense and
/// conv2d layers share, including what K-FAC reads of them.
class weighted_layer : public layer {
public:
  void bind(named_tensor* params, named_tensor* grads) override {
    w_ = &params[0].value;
    b_ = &params[1].value;
    dw_ = &grads[0].value;
    db_ = &grads[1].value;
  }

  const tensor& output() const noexcept override {
    return y_;
  }

protected:
  weighted_layer(std::string name, activation act, std::string weight_name)
    : layer(std::move(name)), act_(act), weight_name_(std::move(weight_name)) {
  }

  parameter_set named(tensor weight, tensor bias) const {
    return {{name() + "/" + weight_name_, std::move(weight)},
            {name() + "/bias", std::move(bias)}};
  }

  kfac_view view(layer_kind kind) const {
    kfac_view result;
    result.layer = name();
    result.kind = kind;
    result.input = x_;
    result.preactivation_grad = ds_given_ != nullptr ? ds_given_ : &ds_;
    result.weight_name = name() + "/" + weight_name_;
    result.bias_name = name() + "/bias";
    return result;
  }

  activation act_;
  std::string weight_name_;
  tensor* w_ = nullptr;
  tensor* b_ = nullptr;
  tensor* dw_ = nullptr;
  tensor* db_ = nullptr;
  const tensor* x_ = nullptr;
  tensor y_;
  tensor ds_;
  // dL/ds when it is another tensor, not ds_: the output gradient itself
  // for an identity activation (conv2d_layer), so no copy of it is made.
  const tensor* ds_given_ = nullptr;
};

class dense_layer : public weighted_layer {
public:
  dense_layer(std::string name, int64_t in, int64_t out, activation act)
    : weighted_layer(std::move(name), act, "weights"), in_(in), out_(out) {
  }

  caf::expected<tensor_shape>
  output_shape(const tensor_shape& input) const override {
    if (input.size() != 2 || input[1] != in_)
      return make_error(ec::shape_mismatch,
                        name() + ": input " + to_string(input)
                          + " does not fit weights "
                          + to_string(tensor_shape{in_, out_}));
    return tensor_shape{input[0], out_};
  }

  parameter_set make_parameters() const override {
    return named(tensor{in_, out_}, tensor{out_});
  }

  caf::error forward(backend& dev, const tensor& x) override {
    x_ = &x;
    return dev.dense_forward(x, *w_, *b_, act_, y_);
  }

  caf::error backward(backend& dev, const tensor& dy, tensor* dx) override {
    return dev.dense_backward(*x_, *w_, y_, dy, act_, ds_, *dw_, *db_, dx);
  }

  caf::error backward_data(backend& dev, const tensor& dy,
                           tensor* dx) override {
    if (auto err = dev.activation_backward(act_, y_, dy, ds_))
      return err;
    if (dx == nullptr)
      return caf::none;
    // dx = ds w^T
    return dev.gemm(ds_, false, *w_, true, 1.0f, 0.0f, *dx);
  }

  caf::error adopt_prefix(const layer& source, const tensor& x,
                          int64_t n) override {
    auto src = prefix_source<dense_layer>(*this, source, x, n);
    if (!src)
      return src.error();
    if (auto shape = output_shape(x.shape()); !shape)
      return shape.error();
    x_ = &x;
    copy_prefix((*src)->y_, n, y_);
    return caf::none;
  }

  std::optional<kfac_view> kfac() const override {
    return view(layer_kind::dense);
  }

private:
  int64_t in_;
  int64_t out_;
};

class conv2d_layer : public weighted_layer {
public:
  conv2d_layer(std::string name, int64_t k, int64_t in_c, int64_t out_c,
               int64_t stride, padding pad, activation act)
    : weighted_layer(std::move(name), act, "kernel"),
      k_(k),
      in_c_(in_c),
      out_c_(out_c),
      stride_(stride),
      pad_(pad) {
  }

  caf::expected<tensor_shape>
  output_shape(const tensor_shape& input) const override {
    auto g = geometry(input);
    if (!g)
      return g.error();
    return g->output_shape();
  }

  parameter_set make_parameters() const override {
    return named(tensor{k_, k_, in_c_, out_c_}, tensor{out_c_});
  }

  caf::error forward(backend& dev, const tensor& x) override {
    auto g = geometry(x.shape());
    if (!g)
      return g.error();
    geom_ = *g;
    x_ = &x;
    return dev.conv2d_forward(geom_, x, *w_, *b_, act_, y_);
  }

  /// forward, fused with the max_pool after it (forward_through_pool):
  /// pool.forward_after runs both.
  template <class Pool>
  caf::error forward_into(backend& dev, const tensor& x, Pool& pool) {
    auto g = geometry(x.shape());
    if (!g)
      return g.error();
    geom_ = *g;
    x_ = &x;
    return pool.forward_after(dev, geom_, x, *w_, *b_, act_, y_);
  }

  // With the identity activation dL/ds is dy: the passes start from it
  // and K-FAC's view shows it, where ds_ would be a copy of it (ResNet-20:
  // batch_norm follows every conv, so every conv has the identity).
  caf::error backward(backend& dev, const tensor& dy, tensor* dx) override {
    if (act_ == activation::identity) {
      ds_given_ = &dy;
      return dev.conv2d_backward_from_ds(geom_, *x_, *w_, dy, *dw_, *db_, dx);
    }
    ds_given_ = nullptr;
    return dev.conv2d_backward(geom_, *x_, *w_, y_, dy, act_, ds_, *dw_, *db_,
                               dx);
  }

  caf::error backward_data(backend& dev, const tensor& dy,
                           tensor* dx) override {
    if (act_ == activation::identity) {
      ds_given_ = &dy;
      return dev.conv2d_backward_data_from_ds(geom_, *x_, *w_, dy, dx);
    }
    ds_given_ = nullptr;
    return dev.conv2d_backward_data(geom_, *x_, *w_, y_, dy, act_, ds_, dx);
  }

  activation act() const noexcept {
    return act_;
  }

  /// Where a max_pool after this layer writes dL/ds (backward_through_pool);
  /// the K-FAC view shows the same tensor.
  tensor& preactivation_grad() noexcept {
    return ds_;
  }

  /// backward (or backward_data) from the dL/ds already in
  /// preactivation_grad(): no pass of the activation's derivative.
  caf::error backward_from_preactivation(backend& dev, tensor* dx,
                                         bool parameter_grads) {
    ds_given_ = nullptr;
    if (parameter_grads)
      return dev.conv2d_backward_from_ds(geom_, *x_, *w_, ds_, *dw_, *db_,
                                         dx);
    return dev.conv2d_backward_data_from_ds(geom_, *x_, *w_, ds_, dx);
  }

  caf::error adopt_prefix(const layer& source, const tensor& x,
                          int64_t n) override {
    auto src = prefix_source<conv2d_layer>(*this, source, x, n);
    if (!src)
      return src.error();
    auto g = geometry(x.shape());
    if (!g)
      return g.error();
    geom_ = *g;
    x_ = &x;
    copy_prefix((*src)->y_, n, y_);
    return caf::none;
  }

  std::optional<kfac_view> kfac() const override {
    auto result = view(layer_kind::conv2d);
    result.geometry = geom_;
    return result;
  }

private:
  caf::expected<conv2d_geometry> geometry(const tensor_shape& input) const {
    auto g = conv2d_geometry::make(input, {k_, k_, in_c_, out_c_}, stride_,
                                   stride_, pad_);
    if (!g)
      return make_error(ec::shape_mismatch,
                        name() + ": " + render(g.error()));
    return g;
  }

  int64_t k_;
  int64_t in_c_;
  int64_t out_c_;
  int64_t stride_;
  padding pad_;
  conv2d_geometry geom_;
};

class max_pool_layer : public layer {
public:
  max_pool_layer(std::string name, int64_t k, int64_t stride, padding pad)
    : layer(std::move(name)), k_(k), stride_(stride), pad_(pad) {
  }

  caf::expected<tensor_shape>
  output_shape(const tensor_shape& input) const override {
    auto g = pool_window(name(), input, k_, k_, stride_, pad_);
    if (!g)
      return g.error();
    return g->output_shape();
  }

  caf::error forward(backend& dev, const tensor& x) override {
    auto g = pool_window(name(), x.shape(), k_, k_, stride_, pad_);
    if (!g)
      return g.error();
    geom_ = *g;
    return dev.max_pool_forward(geom_, x, y_, argmax_);
  }

  /// forward of the conv before this pool and then of this pool, from
  /// the conv's geometry, input and parameters (forward_through_pool).
  caf::error forward_after(backend& dev, const conv2d_geometry& conv,
                           const tensor& x, const tensor& w, const tensor& b,
                           activation act, tensor& conv_y) {
    auto g = pool_window(name(), conv.output_shape(), k_, k_, stride_, pad_);
    if (!g)
      return g.error();
    geom_ = *g;
    return dev.conv2d_max_pool_forward(conv, x, w, b, act, geom_, conv_y, y_,
                                       argmax_);
  }

  const tensor& output() const noexcept override {
    return y_;
  }

  caf::error backward(backend& dev, const tensor& dy, tensor* dx) override {
    if (dx == nullptr)
      return caf::none;
    return dev.max_pool_backward(geom_, dy, argmax_, *dx);
  }

  /// backward into the layer before: ds = dL/d(its pre-activation) for
  /// its activation act, from this pool's outputs, which are the winning
  /// inputs' values (backend::max_pool_backward_activated).
  caf::error backward_into_preactivation(backend& dev, const tensor& dy,
                                         activation act, tensor& ds) {
    return dev.max_pool_backward_activated(geom_, dy, argmax_, y_, act, ds);
  }

  caf::error adopt_prefix(const layer& source, const tensor& x,
                          int64_t n) override {
    auto src = prefix_source<max_pool_layer>(*this, source, x, n);
    if (!src)
      return src.error();
    auto g = pool_window(name(), x.shape(), k_, k_, stride_, pad_);
    if (!g)
      return g.error();
    geom_ = *g;
    copy_prefix((*src)->y_, n, y_);
    // The winners of the first n examples index into their first n inputs.
    auto per_example = y_.size() / n;
    const auto& from = (*src)->argmax_;
    argmax_.assign(from.begin(), from.begin() + n * per_example);
    return caf::none;
  }

private:
  int64_t k_;
  int64_t stride_;
  padding pad_;
  pool2d_geometry geom_;
  tensor y_;
  std::vector<int32_t> argmax_;
};

class flatten_layer : public layer {
public:
  explicit flatten_layer(std::string name) : layer(std::move(name)) {
  }

  caf::expected<tensor_shape>
  output_shape(const tensor_shape& input) const override {
    if (input.empty())
      return make_error(ec::shape_mismatch,
                        name() + ": cannot flatten a scalar");
    return tensor_shape{input[0], element_count(input) / std::max<int64_t>(
                                                            input[0], 1)};
  }

  caf::error forward(backend& dev, const tensor& x) override {
    auto shape = output_shape(x.shape());
    if (!shape)
      return shape.error();
    input_shape_ = x.shape();
    return dev.reshape_copy(x, *shape, y_);
  }

  const tensor& output() const noexcept override {
    return y_;
  }

  caf::error adopt_prefix(const layer& source, const tensor& x,
                          int64_t n) override {
    auto src = prefix_source<flatten_layer>(*this, source, x, n);
    if (!src)
      return src.error();
    input_shape_ = x.shape();
    copy_prefix((*src)->y_, n, y_);
    return caf::none;
  }

  caf::error backward(backend& dev, const tensor& dy, tensor* dx) override {
    if (dx == nullptr)
      return caf::none;
    if (dy.size() != element_count(input_shape_))
      return make_error(ec::shape_mismatch,
                        name() + ": gradient " + dy.shape_string()
                          + " does not fit input "
                          + to_string(input_shape_));
    return dev.reshape_copy(dy, input_shape_, *dx);
  }

private:
  tensor_shape input_shape_;
  tensor y_;
};

class embedding_bag_layer : public layer {
public:
  embedding_bag_layer(std::string name, int64_t vocabulary, int64_t width,
                      bool mean)
    : layer(std::move(name)), vocabulary_(vocabulary), width_(width),
      mean_(mean) {
  }

  caf::expected<tensor_shape>
  output_shape(const tensor_shape& input) const override {
    if (input.size() < 2)
      return make_error(ec::shape_mismatch,
                        name() + ": input " + to_string(input)
                          + " holds no bags (expected [N, indices...])");
    return tensor_shape{input[0], width_};
  }

  parameter_set make_parameters() const override {
    return {{sparse_variable(), tensor{vocabulary_, width_}}};
  }

  std::string sparse_variable() const override {
    return name() + "/embeddings";
  }

  void bind(named_tensor* params, named_tensor* grads) override {
    table_ = &params[0].value;
    dtable_ = &grads[0].value;
  }

  caf::error forward(backend&, const tensor& x) override {
    auto shape = output_shape(x.shape());
    if (!shape)
      return shape.error();
    auto n = x.dim(0);
    auto per = n > 0 ? x.size() / n : 0;
    y_.resize(*shape);
    y_.fill(0.0f);
    bags_.assign(static_cast<size_t>(n), {});
    for (int64_t i = 0; i < n; ++i) {
      auto& bag = bags_[static_cast<size_t>(i)];
      for (int64_t k = 0; k < per; ++k) {
        auto v = x[i * per + k];
        if (v < 0)
          continue; // padding
        auto row = static_cast<int64_t>(v);
        if (static_cast<float>(row) != v || row >= vocabulary_)
          return make_error(ec::invalid_argument,
                            name() + ": index " + std::to_string(v)
                              + " of example " + std::to_string(i)
                              + " is not a row of the vocabulary of "
                              + std::to_string(vocabulary_));
        bag.push_back(row);
      }
      if (bag.empty())
        continue;
      float scale = mean_ ? 1.0f / static_cast<float>(bag.size()) : 1.0f;
      float* out = y_.data() + i * width_;
      for (auto row : bag) {
        const float* src = table_->data() + row * width_;
        for (int64_t j = 0; j < width_; ++j)
          out[j] += scale * src[j];
      }
    }
    return caf::none;
  }

  const tensor& output() const noexcept override {
    return y_;
  }

  caf::error backward(backend&, const tensor& dy, tensor* dx) override {
    if (dx != nullptr)
      return make_error(ec::invalid_argument,
                        name() + ": indices have no gradient (embedding_bag "
                                 "must be the first layer)");
    // Only the rows touched last time are non-zero: clear those, not the
    // whole table.
    for (auto row : touched_)
      std::fill(dtable_->data() + row * width_,
                dtable_->data() + (row + 1) * width_, 0.0f);
    touched_.clear();
    for (size_t i = 0; i < bags_.size(); ++i) {
      const auto& bag = bags_[i];
      if (bag.empty())
        continue;
      float scale = mean_ ? 1.0f / static_cast<float>(bag.size()) : 1.0f;
      const float* g = dy.data() + static_cast<int64_t>(i) * width_;
      for (auto row : bag) {
        float* dst = dtable_->data() + row * width_;
        for (int64_t j = 0; j < width_; ++j)
          dst[j] += scale * g[j];
        touched_.push_back(row);
      }
    }
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()),
                   touched_.end());
    return caf::none;
  }

  caf::error backward_data(backend&, const tensor&, tensor*) override {
    return caf::none; // no statistics: K-FAC does not see this layer
  }

  caf::error adopt_prefix(const layer& source, const tensor& x,
                          int64_t n) override {
    auto src = prefix_source<embedding_bag_layer>(*this, source, x, n);
    if (!src)
      return src.error();
    copy_prefix((*src)->y_, n, y_);
    bags_.assign((*src)->bags_.begin(), (*src)->bags_.begin() + n);
    return caf::none;
  }

  const std::vector<int64_t>* sparse_rows() const override {
    return &touched_;
  }

private:
  int64_t vocabulary_;
  int64_t width_;
  bool mean_;
  tensor* table_ = nullptr;
  tensor* dtable_ = nullptr;
  tensor y_;
  std::vector<std::vector<int64_t>> bags_;
  std::vector<int64_t> touched_;
};

/// A shape as messages show it, the batch dimension as -1.
std::string shown(tensor_shape shape) {
  if (!shape.empty())
    shape[0] = -1;
  return to_string(shape);
}

/// What add and concat share: the output, and its prefix for
/// adopt_prefix (they keep no input: their backward needs none).
class merge_base : public merge_layer {
public:
  const tensor& output() const noexcept override {
    return y_;
  }

  caf::error adopt_prefix(const layer& source, const tensor& x,
                          int64_t n) override {
    (void) x; // a merge keeps no input
    if (auto err = check_prefix_source(*this, source,
                                       typeid(source) == typeid(*this), n))
      return err;
    copy_prefix(source.output(), n, y_);
    adopted(static_cast<const merge_base&>(source), n);
    return caf::none;
  }

protected:
  using merge_layer::merge_layer;

  /// What else adopt_prefix takes from a source of the same kind.
  virtual void adopted(const merge_base& source, int64_t n) {
    (void) source;
    (void) n;
  }

  tensor y_;
};

class add_layer : public merge_base {
public:
  add_layer(std::string name, activation act)
    : merge_base(std::move(name)), act_(act) {
  }

  caf::expected<tensor_shape>
  merged_shape(const std::vector<tensor_shape>& inputs) const override {
    for (size_t k = 1; k < inputs.size(); ++k)
      if (inputs[k] != inputs[0])
        return make_error(ec::shape_mismatch,
                          name() + ": add needs inputs of one shape, but "
                                   "input "
                            + std::to_string(k) + " is "
                            + shown(inputs[k]) + " and input 0 "
                            + shown(inputs[0]));
    return inputs.at(0);
  }

  caf::error forward_all(backend& dev,
                         const std::vector<const tensor*>& xs) override {
    return dev.add_forward(xs, act_, y_);
  }

  bool gradient_is_shared() const override {
    return true;
  }

  caf::error backward_all(backend& dev, const tensor& dy,
                          const std::vector<tensor*>& dxs) override {
    return backward_shares(dev, {&dy}, dxs);
  }

  bool sums_gradient_shares() const override {
    return true;
  }

  caf::error backward_shares(backend& dev,
                             const std::vector<const tensor*>& dys,
                             const std::vector<tensor*>& dxs) override {
    // Every input's gradient is dL/ds, the same for all: written into the
    // first input's gradient asked for (dy's shares summed on the way),
    // copied from there into the others' (the model asks for one where
    // it can share it).
    const tensor* ds = nullptr;
    for (auto* dx : dxs) {
      if (dx == nullptr)
        continue;
      if (ds == nullptr) {
        if (auto err = dev.activation_backward_sum(act_, y_, dys, *dx))
          return err;
      } else if (auto err = dev.reshape_copy(*ds, ds->shape(), *dx)) {
        return err;
      }
      ds = dx;
    }
    return caf::none;
  }

private:
  activation act_;
};

class concat_layer : public merge_base {
public:
  explicit concat_layer(std::string name) : merge_base(std::move(name)) {
  }

  caf::expected<tensor_shape>
  merged_shape(const std::vector<tensor_shape>& inputs) const override {
    auto out = inputs.at(0);
    if (out.size() < 2)
      return make_error(ec::shape_mismatch,
                        name() + ": concat joins [-1, ..., width] inputs");
    out.back() = 0;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const auto& s = inputs[k];
      if (s.size() != out.size()
          || !std::equal(s.begin() + 1, s.end() - 1, out.begin() + 1))
        return make_error(ec::shape_mismatch,
                          name() + ": concat joins along the last axis, "
                                   "the others equal, but input "
                            + std::to_string(k) + " is " + shown(s)
                            + " and input 0 " + shown(inputs[0]));
      out.back() += s.back();
    }
    return out;
  }

  caf::error forward_all(backend& dev,
                         const std::vector<const tensor*>& xs) override {
    input_shapes_.clear();
    for (const auto* x : xs)
      input_shapes_.push_back(x->shape());
    return dev.concat_forward(xs, y_);
  }

  caf::error backward_all(backend& dev, const tensor& dy,
                          const std::vector<tensor*>& dxs) override {
    return dev.concat_backward(dy, input_shapes_, dxs);
  }

private:
  void adopted(const merge_base& source, int64_t n) override {
    input_shapes_ = static_cast<const concat_layer&>(source).input_shapes_;
    for (auto& s : input_shapes_)
      s[0] = n;
  }

  std::vector<tensor_shape> input_shapes_;
};

} // namespace

bool pool_takes_activation(const layer& producer, const layer& pool) {
  return dynamic_cast<const conv2d_layer*>(&producer) != nullptr
         && dynamic_cast<const max_pool_layer*>(&pool) != nullptr;
}

namespace {

/// The pair of forward_through_pool and backward_through_pool, or null
/// with an error that names both layers.
struct conv_pool_pair {
  conv2d_layer* conv;
  max_pool_layer* pool;
};

caf::expected<conv_pool_pair> pair_of(const char* op, layer& producer,
                                      layer& pool) {
  auto conv = dynamic_cast<conv2d_layer*>(&producer);
  auto max_pool = dynamic_cast<max_pool_layer*>(&pool);
  if (conv == nullptr || max_pool == nullptr)
    return make_error(ec::invalid_argument,
                      std::string{op} + ": '" + producer.name() + "' and '"
                        + pool.name()
                        + "' are not a conv2d layer and a max_pool layer");
  return conv_pool_pair{conv, max_pool};
}

} // namespace

caf::error forward_through_pool(backend& dev, layer& producer, layer& pool,
                                const tensor& x) {
  auto pair = pair_of("forward_through_pool", producer, pool);
  if (!pair)
    return pair.error();
  return pair->conv->forward_into(dev, x, *pair->pool);
}

caf::error backward_through_pool(backend& dev, layer& producer, layer& pool,
                                 const tensor& dy, tensor* dx,
                                 bool parameter_grads) {
  auto pair = pair_of("backward_through_pool", producer, pool);
  if (!pair)
    return pair.error();
  auto conv = pair->conv;
  auto max_pool = pair->pool;
  if (auto err = max_pool->backward_into_preactivation(
        dev, dy, conv->act(), conv->preactivation_grad()))
    return err;
  return conv->backward_from_preactivation(dev, dx, parameter_grads);
}

layer_ptr make_embedding_bag_layer(std::string name, int64_t vocabulary,
                                   int64_t width, bool mean) {
  return std::make_unique<embedding_bag_layer>(std::move(name), vocabulary,
                                               width, mean);
}

layer_ptr make_dense_layer(std::string name, int64_t in, int64_t out,
                           activation act) {
  return std::make_unique<dense_layer>(std::move(name), in, out, act);
}

layer_ptr make_conv2d_layer(std::string name, int64_t kernel_size,
                            int64_t in_c, int64_t out_c, int64_t stride,
                            padding pad, activation act) {
  return std::make_unique<conv2d_layer>(std::move(name), kernel_size, in_c,
                                        out_c, stride, pad, act);
}

layer_ptr make_max_pool_layer(std::string name, int64_t kernel_size,
                              int64_t stride, padding pad) {
  return std::make_unique<max_pool_layer>(std::move(name), kernel_size,
                                          stride, pad);
}

caf::expected<tensor_shape>
merge_layer::output_shape(const tensor_shape& input) const {
  return merged_shape({input});
}

caf::error merge_layer::forward(backend& dev, const tensor& x) {
  (void) dev;
  (void) x;
  return make_error(ec::internal, name() + ": a merge layer's forward takes "
                                           "all its inputs (forward_all)");
}

caf::error merge_layer::backward(backend& dev, const tensor& dy, tensor* dx) {
  (void) dev;
  (void) dy;
  (void) dx;
  return make_error(ec::internal, name() + ": a merge layer's backward "
                                           "gives all its inputs' "
                                           "gradients (backward_all)");
}

caf::error merge_layer::backward_shares(backend& dev,
                                        const std::vector<const tensor*>& dys,
                                        const std::vector<tensor*>& dxs) {
  (void) dev;
  (void) dys;
  (void) dxs;
  return make_error(ec::internal, name() + ": this merge layer takes its "
                                           "output's gradient summed "
                                           "(backward_all)");
}

layer_ptr make_add_layer(std::string name, activation act) {
  return std::make_unique<add_layer>(std::move(name), act);
}

layer_ptr make_concat_layer(std::string name) {
  return std::make_unique<concat_layer>(std::move(name));
}

layer_ptr make_flatten_layer(std::string name) {
  return std::make_unique<flatten_layer>(std::move(name));
}

} // namespace syncfac
